"""The standardisation's range (issue 23): float64 statistics, non-finite results refused naming the array."""

import numpy as np
import pytest

from keras_ils.comparison.data import datasets, splits


def _reference(x_train, x):
    """Standardisation in float64, written out: the training split's mean and (population) standard deviation."""
    x_train = np.asarray(x_train, np.float64)
    mean = x_train.sum(axis=0) / len(x_train)
    std = np.sqrt(((x_train - mean) ** 2).sum(axis=0) / len(x_train))
    return (np.asarray(x, np.float64) - mean) / std


def _huge_float32_features(rng, n):
    """Two informative features near 1e30 in float32: their squares overflow float32 (max 3.4e38)."""
    labels = np.arange(n) % 2
    x = np.stack([labels + 0.3 * rng.normal(size=n), rng.normal(size=n)], axis=1)
    return (1e30 * (1.0 + 0.1 * x)).astype(np.float32), labels


class TestStandardise:
    def test_features_near_1e30_in_float32_are_standardised_not_zeroed(self):
        rng = np.random.default_rng(0)
        x_train, _ = _huge_float32_features(rng, 200)
        x_test, _ = _huge_float32_features(rng, 50)
        with np.errstate(over="ignore"):
            assert not np.isfinite(np.std(x_train, axis=0)).all()  # the float32 arithmetic this replaces
        train, test = splits.standardise(x_train, x_test)
        assert train.dtype == np.float32 and test.dtype == np.float32
        np.testing.assert_allclose(train, _reference(x_train, x_train), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(test, _reference(x_train, x_test), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(train.std(axis=0), 1.0, rtol=1e-4)

    def test_ordinary_float64_features_are_unchanged_by_the_float64_path(self):
        x = np.random.default_rng(1).normal(3.0, 2.0, size=(40, 3))
        (train,) = splits.standardise(x)
        np.testing.assert_array_equal(train, ((x - x.mean(axis=0)) / x.std(axis=0)).astype(np.float32))

    def test_features_float64_cannot_standardise_are_refused_naming_x_train(self):
        x = np.random.default_rng(2).normal(size=(20, 3))
        x[:, 1] *= 1e200  # squares overflow float64 too
        with pytest.raises(ValueError, match=r"Invalid value for argument `x_train`.*1 of 3 features"):
            splits.standardise(x, x[:5])

    def test_values_beyond_float32_once_standardised_are_refused_naming_their_array(self):
        x_train = np.random.default_rng(3).normal(size=(20, 2))
        x_test = np.array([[0.0, 1e300]])
        with pytest.raises(ValueError, match=r"Invalid value for argument `x_test`.*1 values"):
            splits.standardise(x_train, x_train[:3], x_test)


def test_npz_with_float32_features_near_1e30_loads_standardised(tmp_path):
    rng = np.random.default_rng(4)
    x_train, y_train = _huge_float32_features(rng, 100)
    x_test, y_test = _huge_float32_features(rng, 30)
    path = tmp_path / "huge.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    loaded = datasets.load_npz(str(path))
    train = np.stack([x for x, _ in loaded.train])
    test = np.stack([x for x, _ in loaded.test])
    # the loader's training rows (its seeded stratified split) give the statistics, in float64
    rows, _ = splits.stratified_split(y_train, 2, datasets.DEFAULT_VALIDATION_FRACTION, seed=0)
    np.testing.assert_allclose(train, _reference(x_train[rows], x_train[rows]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(test, _reference(x_train[rows], x_test), rtol=1e-5, atol=1e-5)
    assert np.abs(test).max() > 0.5  # not the zeros of the float32 arithmetic


def test_npz_whose_features_float64_cannot_standardise_is_refused_naming_x_train(tmp_path):
    rng = np.random.default_rng(5)
    x_train = rng.normal(size=(60, 2)) * np.array([1.0, 1e200])
    path = tmp_path / "overflow.npz"
    np.savez(path, x_train=x_train, y_train=np.arange(60) % 2, x_test=x_train[:4], y_test=np.arange(4) % 2)
    with pytest.raises(ValueError, match="Invalid value for argument `x_train`"):
        datasets.load_npz(str(path))
