"""`tfds:NAME` datasets (`keras_ils_experiments.tfds_loader`), through the library's `load` once registered."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import keras_ils_experiments
from keras_ils.comparison.data import datasets
from keras_ils.comparison.data import splits as splits_module


def test_validation_share_is_20_percent():
    assert inspect.signature(keras_ils_experiments.load_tfds).parameters["validation_fraction"].default == 0.2


def test_tfds_with_mock_data():
    with tfds.testing.mock_data(num_examples=200):  # every class >= 5 times (mock splits ignore slicing)
        splits = datasets.load("tfds:cifar10")
        x, y = next(iter(splits.train))
    assert splits.num_classes == 10 and splits.input_shape == (32, 32, 3) and splits.is_image
    assert x.dtype.name == "float32" and x.shape == (32, 32, 3) and y.dtype.name == "int32"


def test_tfds_unknown_name():
    with pytest.raises(ValueError, match="Unknown tensorflow-datasets name"):
        datasets.load("tfds:no_such_dataset_xyz")


def test_must_match_a_tfds_dataset():
    with tfds.testing.mock_data(num_examples=1):
        with pytest.raises(ValueError, match=r"Expected 10: tfds:cifar10 has 10 classes\. Received: num_classes=5"):
            datasets.load("tfds:cifar10", num_classes=5)


def _tfds_splits(labels_by_split):
    """An `as_dataset_fn` for `tfds.testing.mock_data` giving each split string its own CIFAR-10 labels."""

    def as_dataset(self, split, **kwargs):
        labels = np.asarray(labels_by_split[split])
        images = np.zeros((len(labels), 32, 32, 3), np.uint8)
        ids = [str(i) for i in range(len(labels))]
        return tf.data.Dataset.from_tensor_slices({"id": ids, "image": images, "label": labels})

    return as_dataset


class TestTfdsValidationSplit:
    def test_class_missing_from_validation(self):
        labels = {"train[:80%]": np.arange(100) % 10, "train[80%:]": np.arange(30) % 9, "test": np.arange(10)}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            with pytest.raises(
                ValueError,
                match=r"train\[80%:\] for validation\): the validation split has no example of class 9 "
                r"\(training 10, validation 0",
            ):
                datasets.load("tfds:cifar10")

    def test_class_missing_from_training(self):
        labels = {"train[:80%]": np.arange(100) % 9, "train[80%:]": np.arange(50) % 10, "test": np.arange(10)}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            with pytest.raises(ValueError, match=r"the training split has no example of class 9 \(training 0"):
                datasets.load("tfds:cifar10")

    def test_few_validation_examples_warn(self):
        validation = np.repeat(np.arange(10), [5] * 8 + [3, 2])
        labels = {"train[:90%]": np.arange(100) % 10, "train[90%:]": validation, "test": np.arange(10)}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            with pytest.warns(UserWarning, match=r"fewer than 5 examples of class 8 \(3\), class 9 \(2\)\. The"):
                splits = datasets.load("tfds:cifar10", validation_fraction=0.1)
        assert int(splits.validation.reduce(0, lambda n, _: n + 1)) == 45


class TestTfdsValidationSize:
    """An absolute validation count, and several training splits: the paper's 598K/6K SVHN split."""

    def test_svhn_train_and_extra_with_6000_for_validation(self):
        # the split strings are the keys: a different string would be a KeyError in the mock
        labels = {"train+extra[:-6000]": np.arange(300) % 10, "extra[-6000:]": np.arange(6000) % 10, "test": [0, 1]}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            splits = datasets.load("tfds:svhn_cropped", train_splits=("train", "extra"), validation_size=6000)
        count = lambda dataset: int(dataset.reduce(0, lambda n, _: n + 1))  # noqa: E731
        assert (count(splits.train), count(splits.validation), count(splits.test)) == (300, 6000, 2)
        assert splits.num_classes == 10 and splits.input_shape == (32, 32, 3)

    def test_a_count_from_the_end_of_train(self):
        labels = {"train[:-50]": np.arange(100) % 10, "train[-50:]": np.arange(50) % 10, "test": np.arange(10)}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            splits = keras_ils_experiments.load_tfds("cifar10", validation_size=50)
        assert int(splits.validation.reduce(0, lambda n, _: n + 1)) == 50

    def test_fewer_examples_than_the_count(self):
        labels = {"train[:-500]": np.arange(100) % 10, "train[-500:]": np.arange(50) % 10, "test": np.arange(10)}
        with tfds.testing.mock_data(as_dataset_fn=_tfds_splits(labels)):
            with pytest.raises(ValueError, match=r"Invalid value for argument `validation_size`.*has 50\)"):
                keras_ils_experiments.load_tfds("cifar10", validation_size=500)

    @pytest.mark.parametrize(
        "kwargs, argument",
        [
            (dict(validation_size=0), "validation_size"),
            (dict(validation_size="6000"), "validation_size"),
            (dict(validation_size=True), "validation_size"),
            (dict(train_splits=("train", "extra")), "validation_size"),  # a share of two splits is ambiguous
            (dict(train_splits="train", validation_size=10), "train_splits"),
            (dict(train_splits=(), validation_size=10), "train_splits"),
        ],
    )
    def test_bad_arguments(self, kwargs, argument):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
            datasets.load("tfds:svhn_cropped", **kwargs)


def test_tfds_images_from_their_stored_pixels():
    with tfds.testing.mock_data(num_examples=200):
        loaded = datasets.load("tfds:cifar10")
        raw = next(iter(tfds.load("cifar10", split="test", as_supervised=True)))[0].numpy()
        split_x = next(iter(loaded.test))[0].numpy()
    layer = splits_module.preprocessing_layer(loaded.preprocessing)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(raw[None].astype("float32")))[0], split_x, atol=1e-4)


def test_without_tensorflow_datasets_the_error_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # what a missing package looks like to `import`
    with pytest.raises(ImportError, match=r"tfds:cifar10 needs tensorflow-datasets.*keras-ils\[experiments\]"):
        datasets.load("tfds:cifar10")
