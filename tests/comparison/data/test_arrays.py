"""In-memory data as Splits: the stratified, seeded three-way split, the standardisation, the dataset reader."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_ils.comparison.data.arrays import array_splits, dataset_arrays
from keras_ils.comparison.data.splits import SmallValidationWarning


def _arrays(splits):
    return [tuple(np.stack(a) for a in zip(*d.as_numpy_iterator(), strict=True)) for d in
            (splits.train, splits.validation, splits.test)]  # fmt: skip


def test_three_way_split_is_stratified_seeded_and_standardised_on_train():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], [120, 60, 20])
    x = rng.normal(3.0, 2.0, size=(200, 4)) + y[:, None]
    with pytest.warns(SmallValidationWarning, match="fewer than 5 examples of class 2"):  # 4 of class 2
        splits = array_splits(x, y, test_fraction=0.2, validation_fraction=0.25, seed=3, name="mine")
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = _arrays(splits)
    assert (len(y_train), len(y_val), len(y_test)) == (120, 40, 40)
    assert np.bincount(y_test).tolist() == [24, 12, 4] and np.bincount(y_val).tolist() == [24, 12, 4]
    assert splits.num_classes == 3 and splits.input_shape == (4,) and splits.name == "mine"
    np.testing.assert_allclose(x_train.mean(axis=0), 0.0, atol=1e-5)  # standardised with training statistics
    np.testing.assert_allclose(x_train.std(axis=0), 1.0, atol=1e-4)
    # every example once, its features the standardised originals
    mean, scale = (np.array(splits.preprocessing[k]) for k in ("mean", "scale"))
    restored = np.concatenate([x_train, x_val, x_test]) * scale + mean
    distances = np.abs(restored[:, None, :] - x[None, :, :]).max(axis=2)
    nearest = distances.argmin(axis=1)
    assert sorted(nearest.tolist()) == list(range(200)) and distances.min(axis=1).max() < 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallValidationWarning)
        again = _arrays(array_splits(x, y, test_fraction=0.2, validation_fraction=0.25, seed=3))
        other = _arrays(array_splits(x, y, test_fraction=0.2, validation_fraction=0.25, seed=4))
    np.testing.assert_array_equal(again[2][0], x_test)
    assert not np.array_equal(other[2][0], x_test)


def test_grey_images_get_a_channel_axis():
    x = np.random.default_rng(0).random((80, 8, 8))
    splits = array_splits(x, np.arange(80) % 2, test_fraction=0.25, validation_fraction=0.2)
    assert splits.input_shape == (8, 8, 1) and splits.is_image


def test_bad_arrays_are_refused_naming_them():
    x = np.zeros((20, 2))
    with pytest.raises(ValueError, match="Invalid value for array `y`"):
        array_splits(x, np.arange(19) % 2, test_fraction=0.2, validation_fraction=0.2)
    with pytest.raises(ValueError, match="Invalid value for array `x`.*finite"):
        array_splits(np.full((20, 2), np.nan), np.arange(20) % 2, test_fraction=0.2, validation_fraction=0.2)
    with pytest.raises(ValueError, match="Invalid value for argument `validation_fraction`"):
        array_splits(x, np.arange(20) % 2, test_fraction=0.2, validation_fraction=1.0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        array_splits(x, np.zeros(20, int), test_fraction=0.2, validation_fraction=0.2)


@pytest.mark.parametrize("batch", [None, 3])
def test_dataset_arrays_reads_batched_and_unbatched_pairs(batch):
    x, y = np.arange(14.0).reshape(7, 2), np.arange(7) % 3
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    got_x, got_y = dataset_arrays(dataset if batch is None else dataset.batch(batch))
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)


def test_dataset_arrays_refuses_other_elements():
    with pytest.raises(ValueError, match=r"must yield `\(features, label\)` pairs"):
        dataset_arrays(tf.data.Dataset.from_tensor_slices(np.zeros((3, 2))))
    with pytest.raises(ValueError, match="yields no examples"):
        dataset_arrays(tf.data.Dataset.from_tensor_slices((np.zeros((0, 2)), np.zeros(0))))


def test_a_dataset_that_may_never_end_is_refused_unless_steps_bound_it():
    """`repeat()` read forever (memory growing); a dataset of unknown length may too: both refused at once."""
    x, y = np.arange(14.0).reshape(7, 2), np.arange(7) % 3
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    with pytest.raises(ValueError, match=r"argument `x`: the tf.data.Dataset is infinite.*`x.take\(n\)`.*`steps=n`"):
        dataset_arrays(dataset.repeat())
    with pytest.raises(ValueError, match=r"cardinality is unknown.*`steps=n`.*assert_cardinality\(n\)"):
        dataset_arrays(dataset.filter(lambda a, b: True))
    got_x, got_y = dataset_arrays(dataset.repeat().batch(3), steps=4)  # 4 batches of 3: the first 12 examples
    np.testing.assert_array_equal(got_x, np.concatenate([x, x])[:12])
    np.testing.assert_array_equal(got_y, np.concatenate([y, y])[:12])
    got_x, _ = dataset_arrays(dataset.filter(lambda a, b: b > 0), steps=100)  # ends before the bound
    np.testing.assert_array_equal(got_x, x[y > 0])
    known = dataset.filter(lambda a, b: True).apply(tf.data.experimental.assert_cardinality(7))
    np.testing.assert_array_equal(dataset_arrays(known)[0], x)
    with pytest.raises(ValueError, match="Invalid value for argument `steps`"):
        dataset_arrays(dataset, steps=0)


def test_a_dataset_that_fails_while_read_names_x():
    def broken(a, b):  # the third example (class 2) fails the assertion
        with tf.control_dependencies([tf.debugging.assert_less(b, tf.constant(2, b.dtype))]):
            return tf.identity(a), b

    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((6, 2)), np.arange(6) % 3)).map(broken)
    with pytest.raises(ValueError, match="argument `x`: reading the tf.data.Dataset failed after 2 examples"):
        dataset_arrays(dataset)
