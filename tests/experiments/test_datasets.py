import numpy as np
import pytest
import tensorflow_datasets as tfds

from keras_ils.experiments import datasets


def test_synthetic_protocol():
    splits = datasets.load("synthetic", seed=2)
    assert splits.num_classes == 3 and splits.input_shape == (2,) and not splits.is_image
    assert [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)] == [150, 150, 15000]
    assert splits.test_groups["dense"].sum() + splits.test_groups["sparse"].sum() == 15000


def test_tfds_with_mock_data():
    with tfds.testing.mock_data(num_examples=24):
        splits = datasets.load("tfds:cifar10")
        x, y = next(iter(splits.train))
    assert splits.num_classes == 10 and splits.input_shape == (32, 32, 3) and splits.is_image
    assert x.dtype.name == "float32" and x.shape == (32, 32, 3) and y.dtype.name == "int32"


def test_tfds_unknown_name():
    with pytest.raises(ValueError, match="Unknown tensorflow-datasets name"):
        datasets.load("tfds:no_such_dataset_xyz")


def _npz(tmp_path, **arrays):
    rng = np.random.default_rng(0)
    base = dict(
        x_train=rng.normal(size=(100, 5)),
        y_train=rng.integers(0, 4, 100),
        x_test=rng.normal(size=(30, 5)),
        y_test=rng.integers(0, 4, 30),
    )
    base.update(arrays)
    base = {k: v for k, v in base.items() if v is not None}
    path = tmp_path / "d.npz"
    np.savez(path, **base)
    return str(path)


def test_npz_split_and_standardisation(tmp_path):
    splits = datasets.load(_npz(tmp_path), validation_fraction=0.2, seed=1)
    assert [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)] == [80, 20, 30]
    x = np.stack([x for x, _ in splits.train])
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(x.std(0), 1, atol=1e-4)
    assert splits.num_classes == 4


@pytest.mark.parametrize(
    "arrays, match",
    [
        (dict(y_test=None), "lacks the arrays"),
        (dict(y_train=np.zeros(99, int)), "x_train has 100 rows but y_train has 99"),
        (dict(y_train=np.full(100, 0.5)), "integer labels"),
        (dict(y_test=-np.ones(30, int)), r"class indices in \[0, K\)"),
    ],
)
def test_npz_bad_input(tmp_path, arrays, match):
    with pytest.raises(ValueError, match=match):
        datasets.load(_npz(tmp_path, **arrays))


def test_unknown_spec_and_fraction(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset"):
        datasets.load("mnist")
    with pytest.raises(ValueError, match="validation_fraction"):
        datasets.load(_npz(tmp_path), validation_fraction=1.5)
    with pytest.raises(ValueError, match="No such .npz"):
        datasets.load(str(tmp_path / "missing.npz"))
