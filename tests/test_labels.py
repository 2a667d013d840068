"""The private readers of the package's y_true forms (keras_ils._labels)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ils import _bad_input, _labels, metrics, teacher_targets


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


def _compiled(function):
    """`function` compiled as Keras compiles a step on this backend: `jax.jit`, or a `tf.function` (XLA when
    `jit_compile`); torch's steps run eagerly."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    if keras.backend.backend() == "tensorflow":
        return tf.function(function)
    pytest.skip("torch's Keras steps run eagerly by default")


def _counted(check, *values):
    """The counts (by kind, numpy: a slot per kind) that `check(*values)` leaves in a compiled call."""

    def counts(*values):
        with _bad_input.collecting() as found:
            check(*values)
        return found.vector()

    return _np(_compiled(counts)(*values))


class TestLabelRange:
    def test_eager_out_of_range_raises_value_error(self):
        with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)") as info:
            _labels.check_labels_in_range(np.array([0, 3, -1, 1]), 3)
        assert "labels containing [3, -1]" in str(info.value)
        _labels.check_labels_in_range(np.array([0, 2]), 3)  # passes

    def test_a_compiled_call_counts_instead_of_raising(self):
        labels = ops.convert_to_tensor(np.array([0, 3, -1, 1, 7], "int32"))
        np.testing.assert_array_equal(_counted(lambda y: _labels.check_labels_in_range(y, 3), labels), [0, 3, 0, 0, 0])
        np.testing.assert_array_equal(_counted(lambda y: _labels.check_labels_in_range(y, 8), labels), [0, 1, 0, 0, 0])

    def test_a_compiled_check_outside_a_collecting_block_is_refused_when_traced(self):
        with pytest.raises(RuntimeError, match="nowhere to report"):
            _compiled(lambda y: _labels.class_indices(y, 3))(ops.convert_to_tensor(np.array([0, 1], "int32")))


class TestFloatLabels:
    def test_whole_number_floats_are_class_indices(self):
        np.testing.assert_array_equal(_np(_labels.class_indices(np.array([0.0, 2.0]), 3)), [0, 2])

    @pytest.mark.parametrize("values", [[0.0, 1.7], [0.5], [2.999]])
    def test_fractional_labels_are_refused_not_truncated(self, values):
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            _labels.class_indices(np.array(values), 3)

    def test_a_compiled_call_counts_them(self):
        labels = ops.convert_to_tensor(np.array([1.0, 1.5, 2.0, 0.25], "float32"))
        np.testing.assert_array_equal(_counted(lambda y: _labels.class_indices(y, 3), labels), [2, 0, 0, 0, 0])

    def test_strings_are_a_type_error(self):
        with pytest.raises(TypeError, match="integer class indices"):
            _labels.class_indices(np.array(["a"]), 3)

    def test_range_is_checked_before_the_int32_cast(self):
        with pytest.raises(ValueError, match="Expected class indices"):
            _labels.class_indices(np.array([2**32 + 1], dtype=np.int64), 3)

    def test_booleans_are_classes_zero_and_one(self):
        np.testing.assert_array_equal(_np(_labels.class_indices(np.array([True, False]), 2)), [1, 0])


@pytest.mark.tensorflow_only
def test_hard_label_map_refuses_fractional_labels_without_num_classes():
    from keras_ils import data

    ds = data.with_hard_labels(tf.data.Dataset.from_tensor_slices((np.zeros((2, 1)), [1.0, 1.5])))
    with pytest.raises(tf.errors.InvalidArgumentError, match="whole numbers"):
        list(ds)


class TestTeacherTargetsFirstHalf:
    """A `[batch, 2K]` y_true is read as teacher targets only when its first K columns are one-hot."""

    K = 3

    def _six_class_one_hot(self):
        return np.eye(2 * self.K, dtype="float32")[[0, 4, 2, 5]]  # a 6-class one-hot y_true, for a 3-class model

    @pytest.mark.parametrize(
        "first_half",
        [
            [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]],  # no class
            [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]],  # two classes
            [[0.9, 0.05, 0.05], [0.0, 1.0, 0.0]],  # soft
            [[2.0, -1.0, 0.0], [0.0, 1.0, 0.0]],  # sums to 1, not 0/1
        ],
    )
    def test_eager_refusal_says_what_was_expected_and_received(self, first_half):
        y = np.concatenate([np.array(first_half, "float32"), np.zeros((2, self.K), "float32")], axis=1)
        with pytest.raises(ValueError, match=r"Invalid value for argument `y_true`.*keras_ils.teacher_targets") as info:
            _labels.split_teacher_targets(y, self.K)
        assert "3 one-hot columns, then 3 teacher logits" in str(info.value)
        assert str(np.array(first_half[0], "float32").tolist()) in str(info.value)  # the received row

    def test_loss_and_hard_labels_refuse_a_wider_one_hot(self, rng):
        from keras_ils import ILSLoss

        logits = rng.normal(size=(4, self.K)).astype("float32")
        with pytest.raises(ValueError, match="first 3 columns must be one-hot"):
            ILSLoss(method="ils")(self._six_class_one_hot(), logits)
        with pytest.raises(ValueError, match="first 3 columns must be one-hot"):
            _labels.hard_labels(self._six_class_one_hot(), self.K, 2)

    def test_teacher_targets_pass(self, rng):
        labels, logits = rng.integers(0, self.K, 16), 5.0 * rng.normal(size=(16, self.K))
        one_hot, teacher = _labels.split_teacher_targets(_np(teacher_targets(labels, logits)), self.K)
        np.testing.assert_array_equal(_np(one_hot), np.eye(self.K)[labels])
        np.testing.assert_allclose(_np(teacher), logits, rtol=1e-6)

    def test_compiled_steps_refuse_and_accept(self, rng):
        """Keras' compiled step (a JAX trace, a `tf.function`): the loss is NaN, a metric raises after the step."""
        from keras_ils import ILSLoss

        x = rng.normal(size=(4, self.K)).astype("float32")
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((self.K,)), keras.layers.Dense(self.K)])
        model.compile(loss=ILSLoss(method="none"), optimizer="sgd", metrics=[metrics.InputCheck()])
        good = _np(teacher_targets([0, 1, 2, 0], rng.normal(size=(4, self.K))))
        want = keras.losses.CategoricalCrossentropy(from_logits=True)(good[:, : self.K], model.predict(x, verbose=0))
        got = model.evaluate(x, good, verbose=0, return_dict=True)
        assert got["loss"] == pytest.approx(float(want), rel=1e-5) and got["bad_input"] == 0
        with pytest.raises(ValueError, match="first 3 columns must be one-hot") as info:
            model.evaluate(x, self._six_class_one_hot(), verbose=0)
        if keras.backend.backend() != "torch":  # counted in the compiled step (torch's runs eagerly: raised at once)
            assert "Received: 2 such rows" in str(info.value)  # rows 1 and 3 have their 1 in the teacher half

    def test_a_compiled_split_counts_the_rows(self):
        y = ops.convert_to_tensor(np.concatenate([self._six_class_one_hot(), np.eye(6, dtype="float32")[:2]]))
        np.testing.assert_array_equal(_counted(lambda y: _labels.split_teacher_targets(y, 3), y), [0, 0, 2, 0, 0])

    def test_a_compiled_loss_is_nan_on_them(self, rng):
        """No metric to raise: the batch's loss is NaN, not a number trained on garbage."""
        from keras_ils import ILSLoss

        loss = ILSLoss(method="ils")
        logits = ops.convert_to_tensor(rng.normal(size=(4, self.K)).astype("float32"))
        compiled = _compiled(lambda y: loss(y, logits))
        assert np.isnan(_np(compiled(ops.convert_to_tensor(self._six_class_one_hot()))))
        good = teacher_targets([0, 1, 2, 0], rng.normal(size=(4, self.K)))
        np.testing.assert_allclose(_np(compiled(good)), _np(loss(good, logits)), rtol=1e-6)

    @pytest.mark.tensorflow_only
    def test_under_xla_too(self, rng):
        from keras_ils import ILSLoss

        loss = ILSLoss(method="ils")
        logits = tf.constant(rng.normal(size=(4, self.K)).astype("float32"))
        compiled = tf.function(lambda y: loss(y, logits), jit_compile=True)
        assert np.isnan(compiled(tf.constant(self._six_class_one_hot())).numpy())
