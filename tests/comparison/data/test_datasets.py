import inspect

import keras
import numpy as np
import pytest

from keras_ils.comparison.data import datasets
from keras_ils.comparison.data import splits as splits_module


def test_synthetic_protocol():
    splits = datasets.load("synthetic", seed=2)
    assert splits.num_classes == 3 and splits.input_shape == (2,) and not splits.is_image
    assert [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)] == [150, 150, 15000]
    assert splits.test_groups["dense"].sum() + splits.test_groups["sparse"].sum() == 15000


def _npz(tmp_path, **arrays):
    rng = np.random.default_rng(0)
    base = dict(
        x_train=rng.normal(size=(100, 5)),
        y_train=rng.permutation(np.arange(100) % 4),
        x_test=rng.normal(size=(30, 5)),
        y_test=rng.integers(0, 4, 30),
    )
    base.update(arrays)
    base = {k: v for k, v in base.items() if v is not None}
    path = tmp_path / "d.npz"
    np.savez(path, **base)
    return str(path)


def _labels(dataset):
    return np.array([int(y) for _, y in dataset])


def test_npz_split_and_standardisation(tmp_path):
    splits = datasets.load(_npz(tmp_path), validation_fraction=0.2, seed=1)
    assert [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)] == [80, 20, 30]
    x = np.stack([x for x, _ in splits.train])
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(x.std(0), 1, atol=1e-4)
    assert splits.num_classes == 4


def test_a_feature_constant_in_train_is_centred_not_blown_up(tmp_path):
    """scikit-learn's digits: edge pixels blank in every training image but lit in a test one."""
    x_train = np.zeros((100, 3))
    x_train[:, 0] = np.arange(100)
    x_train[:, 1] = 5.0  # constant in train
    x_test = np.array([[50.0, 5.0, 0.0], [50.0, 9.0, 16.0]])
    path = _npz(tmp_path, x_train=x_train, y_train=np.arange(100) % 4, x_test=x_test, y_test=np.array([0, 1]))
    splits = datasets.load(path)
    train = np.stack([x for x, _ in splits.train])
    test = np.stack([x for x, _ in splits.test])
    np.testing.assert_allclose(train[:, 1:], 0.0)
    np.testing.assert_allclose(test[:, 1:], [[0.0, 0.0], [4.0, 16.0]])  # only centred: x - 5 and x - 0


def test_default_validation_share_is_20_percent(tmp_path):
    for loader in (datasets.load, datasets.load_npz):
        assert inspect.signature(loader).parameters["validation_fraction"].default == 0.2
    splits = datasets.load(_npz(tmp_path))
    assert [int(d.cardinality()) for d in (splits.train, splits.validation)] == [80, 20]


class TestStratifiedSplit:
    # 120 training examples: classes of 70, 30, 12, 6 and 2 (sorted by class, as scikit-learn's sets are)
    COUNTS = (70, 30, 12, 6, 2)

    def _splits(self, tmp_path, seed, fraction=0.2):
        y = np.repeat(np.arange(len(self.COUNTS)), self.COUNTS)
        x = np.arange(len(y), dtype=float)[:, None]  # the row number, to compare splits
        path = _npz(tmp_path, x_train=x, y_train=y, x_test=np.zeros((5, 1)), y_test=np.arange(5))
        with pytest.warns(UserWarning):  # classes 3 and 4 have < 5 validation examples
            return datasets.load_npz(path, validation_fraction=fraction, seed=seed)

    def test_every_class_in_validation_in_proportion(self, tmp_path):
        splits = self._splits(tmp_path, seed=0)
        counts = np.bincount(_labels(splits.validation), minlength=5)
        np.testing.assert_array_equal(counts, [14, 6, 2, 1, 1])  # 20 % of each class, at least 1
        assert counts.sum() + int(splits.train.cardinality()) == 120
        np.testing.assert_array_equal(np.bincount(_labels(splits.train)), np.array(self.COUNTS) - counts)

    def test_reproducible_per_seed(self, tmp_path):
        def validation_rows(seed):
            splits = self._splits(tmp_path, seed)
            return sorted(int(y) * 1000 + float(x[0]) for x, y in splits.validation)

        assert validation_rows(3) == validation_rows(3)
        assert validation_rows(3) != validation_rows(4)

    def test_small_fraction_still_gives_every_class_one(self, tmp_path):
        splits = self._splits(tmp_path, seed=0, fraction=0.01)
        assert (np.bincount(_labels(splits.validation), minlength=5) >= 1).all()

    def test_class_with_one_training_example_is_an_error(self, tmp_path):
        y = np.array([0] * 10 + [1] * 10 + [2])
        path = _npz(tmp_path, x_train=np.zeros((21, 2)), y_train=y, x_test=np.zeros((3, 2)), y_test=np.arange(3))
        with pytest.raises(ValueError, match=r"validation split has no example of class 2 \(training 1, validation 0"):
            datasets.load_npz(path)

    def test_few_validation_examples_warn_what_they_cost(self, tmp_path):
        y = np.array([0] * 50 + [1] * 50 + [2] * 10)
        path = _npz(tmp_path, x_train=np.zeros((110, 2)), y_train=y, x_test=np.zeros((3, 2)), y_test=np.arange(3))
        with pytest.warns(UserWarning, match=r"fewer than 5 examples of class 2 \(2\)\. The teacher's temperature T\*"):
            datasets.load_npz(path)


@pytest.mark.parametrize(
    "arrays, match",
    [
        (dict(y_test=None), "lacks the arrays"),
        (dict(y_train=np.zeros(99, int)), "x_train has 100 rows but y_train has 99"),
        (dict(y_train=np.full(100, 0.5)), "integer class indices"),
        (dict(y_train=np.eye(4)[np.arange(100) % 4]), r"`y_train`.*one-hot rows: y.argmax\(1\)"),
        (dict(x_train=np.array([["a"]] * 100)), r"`x_train`.*real numbers.*Received: dtype <U1"),
        (dict(x_test=np.ones((30, 5)) + 1j), r"`x_test`.*real numbers.*complex128"),
        (dict(y_test=-np.ones(30, int)), r"`y_test`.*class indices >= 0\. Received: 30 negative labels"),
    ],
)
def test_npz_bad_input(tmp_path, arrays, match):
    with pytest.raises(ValueError, match=match):
        datasets.load(_npz(tmp_path, **arrays))


class TestUnreadableFile:
    def test_not_a_zip_archive(self, tmp_path):
        (tmp_path / "d.npz").write_bytes(b"garbage")
        with pytest.raises(ValueError, match=r"d\.npz is not a \.npz file: np\.load finds no arrays in it\. Save one"):
            datasets.load(str(tmp_path / "d.npz"))

    def test_truncated(self, tmp_path):
        path = _npz(tmp_path)
        data = open(path, "rb").read()
        open(path, "wb").write(data[:300])
        with pytest.raises(ValueError, match=r"is not a readable \.npz file \(File is not a zip file\)"):
            datasets.load(path)

    def test_damaged_array(self, tmp_path):
        path = _npz(tmp_path)
        data = bytearray(open(path, "rb").read())
        data[500] ^= 0xFF
        open(path, "wb").write(bytes(data))
        with pytest.raises(ValueError, match=r"the array `x_train` cannot be read \(Bad CRC-32.*the file is damaged"):
            datasets.load(path)

    def test_a_single_npy_array(self, tmp_path):
        np.save(tmp_path / "d.npy", np.zeros(3))
        (tmp_path / "d.npy").rename(tmp_path / "d.npz")
        with pytest.raises(ValueError, match="holds a single .npy array, not the four arrays of a .npz"):
            datasets.load(str(tmp_path / "d.npz"))

    def test_object_array(self, tmp_path):
        path = _npz(tmp_path, x_train=np.array([[1, "a"]] * 100, dtype=object))
        with pytest.raises(
            ValueError, match=r"`x_train` in .*Expected an array of numbers\. Received: an object array"
        ):
            datasets.load(path)


def _with_values(shape, where, value):
    x = np.random.default_rng(1).normal(size=shape)
    x[where] = value
    return x


@pytest.mark.parametrize(
    "arrays, match",
    [
        (dict(x_train=_with_values((100, 5), (slice(0, 3), 1), np.nan)), r"`x_train`.*finite.*3 NaN and 0 inf"),
        (dict(x_test=_with_values((30, 5), (0, 0), -np.inf)), r"`x_test`.*finite.*0 NaN and 1 inf among its 150"),
        (dict(x_train=np.zeros((0, 5)), y_train=np.zeros(0, int)), r"`x_train`.*at least one example.*\(0, 5\)"),
        (dict(x_test=np.zeros((30, 0))), r"`x_test`.*at least one example.*\(30, 0\)"),
        (dict(x_train=np.zeros(100)), r"`x_train`.*one feature per example is \[n, 1\].*shape \(100,\)"),
        (dict(x_test=np.float64(1.0)), r"`x_test`.*shape \(\)"),
        (dict(x_test=np.zeros((30, 4))), r"`x_test`.*shaped like those of x_train, \(5,\).*\(4,\)"),
    ],
)
def test_npz_bad_features(tmp_path, arrays, match):
    with pytest.raises(ValueError, match=match):
        datasets.load(_npz(tmp_path, **arrays))


class TestNumberOfClasses:
    def test_from_the_union_of_train_and_test_labels(self, tmp_path):
        path = _npz(tmp_path, y_train=np.arange(100) % 3, y_test=np.arange(30) % 3)
        assert datasets.load(path).num_classes == 3

    def test_given(self, tmp_path):
        path = _npz(tmp_path, y_train=np.arange(100) % 3, y_test=np.zeros(30, int))
        assert datasets.load(path, num_classes=3).num_classes == 3

    def test_label_in_test_never_in_train(self, tmp_path):
        path = _npz(tmp_path, y_train=np.arange(100) % 3, y_test=np.arange(30) % 4)
        with pytest.raises(ValueError, match=r"`y_test`.*Received: labels \[3\] that never appear in y_train"):
            datasets.load(path)

    def test_class_without_training_example(self, tmp_path):
        path = _npz(tmp_path, y_train=np.array([0, 1, 3] * 33 + [0]), y_test=np.zeros(30, int))
        with pytest.raises(ValueError, match=r"`y_train`.*every class in \[0, 4\).*no example of class\(es\) \[2\]"):
            datasets.load(path)

    def test_given_num_classes_with_an_unused_class(self, tmp_path):
        path = _npz(tmp_path, y_train=np.arange(100) % 3, y_test=np.arange(30) % 3)
        with pytest.raises(ValueError, match=r"no example of class\(es\) \[3, 4\]"):
            datasets.load(path, num_classes=5)

    @pytest.mark.parametrize(
        "arrays, match",
        [
            (dict(y_train=np.arange(100) % 4), r"`y_train`.*\[0, 3\) \(num_classes=3\)\. Received: 25 labels >= 3"),
            (
                dict(y_test=np.arange(30) % 5),
                r"`y_test`.*\[0, 3\) \(num_classes=3\)\. Received: 12 labels >= 3 \(largest 4\)",
            ),
        ],
    )
    def test_label_outside_the_given_num_classes(self, tmp_path, arrays, match):
        path = _npz(tmp_path, **{"y_train": np.arange(100) % 3, "y_test": np.arange(30) % 3, **arrays})
        with pytest.raises(ValueError, match=match):
            datasets.load(path, num_classes=3)

    def test_one_class_only(self, tmp_path):
        path = _npz(tmp_path, y_train=np.zeros(100, int), y_test=np.zeros(30, int))
        with pytest.raises(ValueError, match="at least 2 classes"):
            datasets.load(path)

    @pytest.mark.parametrize("value", [1, 0, 2.5, True])
    def test_bad_argument(self, tmp_path, value):
        with pytest.raises(ValueError, match=rf"Invalid value for argument `num_classes`.*num_classes={value}"):
            datasets.load(_npz(tmp_path), num_classes=value)

    def test_must_match_the_synthetic_task(self):
        with pytest.raises(ValueError, match=r"`num_classes`\. Expected 3: the synthetic task has 3 classes"):
            datasets.load("synthetic", num_classes=4)


def test_unknown_spec_and_fraction(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset"):
        datasets.load("mnist")
    for fraction in (0, 1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="Invalid value for argument `validation_fraction`"):
            datasets.load(_npz(tmp_path), validation_fraction=fraction)
    with pytest.raises(ValueError, match="No such .npz"):
        datasets.load(str(tmp_path / "missing.npz"))


class TestPreprocessingRecorded:
    """`Splits.preprocessing` maps the stored features to the splits' (issue 23: saved models take raw features)."""

    def test_npz(self, tmp_path):
        rng = np.random.default_rng(3)
        x_test = 40.0 + 7.0 * rng.normal(size=(30, 5))
        path = _npz(tmp_path, x_train=40.0 + 7.0 * rng.normal(size=(100, 5)), x_test=x_test)
        loaded = datasets.load(path, seed=1)
        layer = splits_module.preprocessing_layer(loaded.preprocessing)
        split_test = np.stack([x for x, _ in loaded.test])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x_test)), split_test, rtol=1e-5, atol=1e-5)
        # the statistics are the training rows' (population) mean and standard deviation
        train = np.stack([x for x, _ in loaded.train]) * np.array(loaded.preprocessing["scale"])
        np.testing.assert_allclose(train.std(0), loaded.preprocessing["scale"], rtol=1e-4)

    def test_synthetic_is_used_as_stored(self):
        assert datasets.load_synthetic(0).preprocessing is None
        assert splits_module.preprocessing_layer(None) is None


def test_the_synthetic_tasks_validation_size_is_drawn_per_class():
    splits = datasets.load("synthetic", validation_size=600, seed=1)
    labels = np.array([int(y) for _, y in splits.validation])
    np.testing.assert_array_equal(np.bincount(labels), [200, 200, 200])
    assert int(splits.train.cardinality()) == 150  # only the validation draw grows
    for size, match in ((100, "Expected a multiple of 3"), (3, "Expected an int >= 6")):
        with pytest.raises(ValueError, match=rf"Invalid value for argument `validation_size`\. {match}"):
            datasets.load("synthetic", validation_size=size)


def test_validation_size_and_train_splits_are_for_tfds_only(tmp_path):
    with pytest.raises(ValueError, match="apply to tfds datasets only"):
        datasets.load(_npz(tmp_path), validation_size=10)
    with pytest.raises(ValueError, match="apply to tfds datasets only"):
        datasets.load("synthetic", train_splits=("train", "extra"))
