"""The private readers of the package's y_true forms (keras_ils._labels)."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ils import _labels, teacher_targets


def _np(x):
    return ops.convert_to_numpy(x)


class TestForms:
    def test_forms_are_told_apart(self):
        k = 3
        assert _labels.y_true_kind(ops.zeros((4,)), k, 2) == "sparse"
        assert _labels.y_true_kind(ops.zeros((4, 1)), k, 2) == "sparse"
        assert _labels.y_true_kind(ops.zeros((4, 3)), k, 2) == "dense"
        assert _labels.y_true_kind(ops.zeros((4, 6)), k, 2) == "teacher"
        with pytest.raises(ValueError, match="Cannot read `y_true`"):
            _labels.y_true_kind(ops.zeros((4, 5)), k, 2)

    def test_hard_labels_of_every_form(self, rng):
        labels, logits = (rng.integers(0, 4, 8), rng.normal(size=(8, 4)))
        for y in (labels, labels[:, None], np.eye(4)[labels], _np(teacher_targets(labels, logits))):
            np.testing.assert_array_equal(_np(_labels.hard_labels(y, 4, 2)), labels)


class TestLabelRange:
    def test_eager_out_of_range_raises_value_error(self):
        with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)"):
            _labels.check_labels_in_range(np.array([0, 3]), 3)
        assert _labels.check_labels_in_range(np.array([0, 2]), 3) == []

    @pytest.mark.tensorflow_only
    def test_graph_check_is_an_assertion_that_fires(self):
        @tf.function
        def check(labels):
            with tf.control_dependencies(_labels.check_labels_in_range(labels, 3)):
                return tf.identity(labels)

        np.testing.assert_array_equal(check(tf.constant([0, 2])).numpy(), [0, 2])
        with pytest.raises(tf.errors.InvalidArgumentError, match="Expected class indices"):
            check(tf.constant([-1, 2]))


class TestFloatLabels:
    def test_whole_number_floats_are_class_indices(self):
        labels, checks = _labels.class_indices(np.array([0.0, 2.0]), 3)
        np.testing.assert_array_equal(_np(labels), [0, 2])
        assert checks == []

    @pytest.mark.parametrize("values", [[0.0, 1.7], [0.5], [2.999]])
    def test_fractional_labels_are_refused_not_truncated(self, values):
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            _labels.class_indices(np.array(values), 3)

    @pytest.mark.tensorflow_only
    def test_graph_check_fires(self):
        @tf.function
        def indices(labels):
            labels, checks = _labels.class_indices(labels, 3)
            with tf.control_dependencies(checks):
                return tf.identity(labels)

        np.testing.assert_array_equal(indices(tf.constant([1.0, 2.0])).numpy(), [1, 2])
        with pytest.raises(tf.errors.InvalidArgumentError, match="whole numbers"):
            indices(tf.constant([1.5, 2.0]))

    def test_strings_are_a_type_error(self):
        with pytest.raises(TypeError, match="integer class indices"):
            _labels.class_indices(tf.constant(["a"]), 3)

    def test_range_is_checked_before_the_int32_cast(self):
        with pytest.raises(ValueError, match="Expected class indices"):
            _labels.class_indices(np.array([2**32 + 1], dtype=np.int64), 3)

    def test_booleans_are_classes_zero_and_one(self):
        labels, _ = _labels.class_indices(np.array([True, False]), 2)
        np.testing.assert_array_equal(_np(labels), [1, 0])


@pytest.mark.tensorflow_only
def test_hard_label_map_refuses_fractional_labels_without_num_classes():
    from keras_ils import data

    ds = data.with_hard_labels(tf.data.Dataset.from_tensor_slices((np.zeros((2, 1)), [1.0, 1.5])))
    with pytest.raises(tf.errors.InvalidArgumentError, match="whole numbers"):
        list(ds)
