import keras
import numpy as np
import pytest
from keras import ops

from keras_ils.targets import ils_targets, smoothing_factor, targets_from_one_hot, teacher_targets

import reference

METHODS = ["none", "ls", "ils1", "ils2", "ils"]


def _np(x):
    return ops.convert_to_numpy(x)


def _case(rng, n=64, k=5, scale=3.0):
    labels = rng.integers(0, k, n)
    logits = scale * rng.normal(size=(n, k))
    return labels, logits


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [2, 3, 10])
def test_matches_numpy_reference(rng, method, k):
    labels, logits = _case(rng, k=k)
    hp = dict(epsilon=0.15, p1=0.85, p2=1.5, temperature=2.0)
    got = _np(ils_targets(labels, logits, method=method, **hp))
    want = reference.ils_targets(labels, logits, method, **hp)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    assert (got >= 0).all()


@pytest.mark.parametrize("method", ["ils1", "ils"])
def test_sinusoidal_family_matches_reference(rng, method):
    labels, logits = _case(rng)
    hp = dict(p1=0.6, p2=4.0, family="sinusoidal")
    got = _np(ils_targets(labels, logits, method=method, **hp))
    np.testing.assert_allclose(got, reference.ils_targets(labels, logits, method, **hp), rtol=1e-6, atol=1e-7)


def test_float32_inputs_give_float32_targets_close_to_float64(rng):
    labels, logits = _case(rng)
    got = ils_targets(labels, logits.astype("float32"), method="ils", p1=0.8, p2=2.0, temperature=4.0)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    want = reference.ils_targets(labels, logits, "ils", p1=0.8, p2=2.0, temperature=4.0)
    np.testing.assert_allclose(_np(got), want, rtol=1e-5, atol=1e-6)


def test_ls_without_teacher(rng):
    labels = rng.integers(0, 4, 10)
    got = _np(ils_targets(labels, num_classes=4, method="ls", epsilon=0.2))
    np.testing.assert_allclose(got, np.eye(4)[labels] * 0.8 + 0.05, rtol=1e-6)


@pytest.mark.parametrize("k", [2, 7])
def test_ls_of_soft_rows_is_keras_label_smoothing(rng, k):
    soft = rng.dirichlet(np.ones(k), size=10)
    got = _np(targets_from_one_hot(soft, method="ls", epsilon=0.3))
    np.testing.assert_allclose(got, soft * 0.7 + 0.3 / k, rtol=1e-6)
    np.testing.assert_allclose(_np(targets_from_one_hot(soft, method="none")), soft, rtol=1e-6)


def test_ils_eps_is_clipped_and_true_class_gets_one_minus_eps():
    # p_t = 0.2, far from p1: eps_x = min(0.2, 2 * 0.6**2) = 0.2
    logits = np.log([[0.2, 0.5, 0.3]])
    got = _np(ils_targets([0], logits, method="ils", p1=0.8, p2=2.0))
    np.testing.assert_allclose(got, [[0.8, 0.2 * 0.5 / 0.8, 0.2 * 0.3 / 0.8]], rtol=1e-6)


def test_ils1_teacher_at_p1_gives_hard_labels():
    logits = np.log([[0.1, 0.8, 0.1]])
    np.testing.assert_allclose(_np(ils_targets([1], logits, method="ils1", p1=0.8, p2=2.0)), [[0, 1, 0]], atol=1e-6)


def test_temperature_flattens_wrong_class_split():
    logits = np.log([[0.5, 0.4, 0.1]])
    cold = _np(ils_targets([0], logits, method="ils2", epsilon=0.1, temperature=1.0))
    hot = _np(ils_targets([0], logits, method="ils2", epsilon=0.1, temperature=1e6))
    np.testing.assert_allclose(cold, [[0.9, 0.08, 0.02]], rtol=1e-5)
    np.testing.assert_allclose(hot, [[0.9, 0.05, 0.05]], rtol=1e-5)


class TestEdgeCases:
    def test_q_t_one_in_float_gives_exact_wrong_class_split(self):
        # q_t rounds to exactly 1 in float32 and float64, but q_j / (1 - q_t) is still defined:
        # it is the softmax over the wrong classes, exp(2) : exp(0).
        logits = np.array([[1e4, 2.0, 0.0]])
        got = _np(ils_targets([0], logits, method="ils2", epsilon=0.1))
        w = np.exp([2.0, 0.0]) / np.exp([2.0, 0.0]).sum()
        np.testing.assert_allclose(got, [[0.9, 0.1 * w[0], 0.1 * w[1]]], rtol=1e-6)

    def test_no_mass_on_wrong_classes_falls_back_to_uniform(self):
        logits = np.array([[0.0, -np.inf, -np.inf, -np.inf]])
        got = _np(ils_targets([0], logits, method="ils2", epsilon=0.3))
        np.testing.assert_allclose(got, [[0.7, 0.1, 0.1, 0.1]], rtol=1e-6)

    @pytest.mark.parametrize("method", METHODS)
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
    def test_huge_logits_and_half_precision_are_finite(self, method, dtype):
        logits = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [30.0, 29.0, -30.0]])
        labels = np.array([0, 2, 1])
        cast = ops.cast(np.clip(logits, -6e4, 6e4), dtype)
        got = _np(ils_targets(labels, cast, method=method, p1=0.8, p2=2.0, temperature=2.0))
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)

    def test_binary_problem(self):
        logits = np.log([[0.3, 0.7]])
        got = _np(ils_targets([0], logits, method="ils", p1=0.9, p2=1.0))
        eps = min(0.2, (0.3 - 0.9) ** 2)
        np.testing.assert_allclose(got, [[1 - eps, eps]], rtol=1e-6)

    def test_gradient_does_not_flow_into_teacher_logits(self):
        import tensorflow as tf

        logits = tf.Variable([[1.0, 2.0, 0.5]])
        with tf.GradientTape() as tape:
            y = ils_targets([0], logits, method="ils", temperature=2.0)
            s = tf.reduce_sum(y * tf.constant([[1.0, 2.0, 3.0]]))
        assert tape.gradient(s, logits) is None


def test_smoothing_factor_curve():
    p = np.linspace(0, 1, 101)
    got = _np(smoothing_factor(p, p1=0.8, p2=2.0))
    np.testing.assert_allclose(got, np.minimum(0.2, 2.0 * (p - 0.8) ** 2), rtol=1e-6, atol=1e-7)
    got = _np(smoothing_factor(p, p1=0.5, p2=3.0, family="sinusoidal", max_epsilon=0.15))
    np.testing.assert_allclose(got, np.minimum(0.15, 0.1 * (np.sin(3.0 * (p - 0.5)) + 1)), rtol=1e-6, atol=1e-7)


class TestTeacherTargets:
    def test_layout(self, rng):
        labels, logits = _case(rng, n=8, k=4)
        y = _np(teacher_targets(labels, logits))
        assert y.shape == (8, 8)
        np.testing.assert_array_equal(y[:, :4], np.eye(4)[labels])
        np.testing.assert_allclose(y[:, 4:], logits, rtol=1e-6)

    def test_column_labels_and_float_labels(self, rng):
        labels, logits = _case(rng, n=8, k=4)
        a = _np(teacher_targets(labels[:, None], logits))
        b = _np(teacher_targets(labels.astype("float32"), logits))
        np.testing.assert_array_equal(a, b)


class TestBadInput:
    @pytest.mark.parametrize(
        "kwargs, name",
        [
            (dict(p1=0.0), "p1"),
            (dict(p1=1.2), "p1"),
            (dict(p2=-0.1), "p2"),
            (dict(epsilon=1.0), "epsilon"),
            (dict(epsilon=-0.01), "epsilon"),
            (dict(temperature=0.0), "temperature"),
            (dict(temperature=-2.0), "temperature"),
            (dict(max_epsilon=1.0), "max_epsilon"),
            (dict(method="mixup"), "method"),
            (dict(family="cubic"), "family"),
            (dict(p1=float("nan")), "p1"),
        ],
    )
    def test_hyperparameters(self, kwargs, name):
        kwargs = {"method": "ils", **kwargs}
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            ils_targets([0], np.zeros((1, 3)), **kwargs)

    def test_non_numbers(self):
        with pytest.raises(TypeError, match="`epsilon` must be a Python number"):
            ils_targets([0], np.zeros((1, 3)), method="ls", epsilon="0.1")

    def test_labels_out_of_range(self):
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            ils_targets([3], np.zeros((1, 3)), method="ils")
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            teacher_targets([-1], np.zeros((1, 3)))

    def test_class_count_mismatch(self):
        with pytest.raises(ValueError, match="class count"):
            ils_targets([0], np.zeros((1, 3)), method="ils", num_classes=4)

    def test_teacher_required(self):
        with pytest.raises(ValueError, match="`teacher_logits` is required"):
            ils_targets([0], num_classes=3, method="ils2")
        with pytest.raises(ValueError, match="`num_classes` is required"):
            ils_targets([0], method="ls")

    def test_labels_and_teacher_rows_of_different_lengths(self):
        with pytest.raises(ValueError, match="Received: 3 labels and 2 rows of teacher logits"):
            teacher_targets([0, 1, 2], np.zeros((2, 3)))

    def test_fractional_float_labels(self):
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            teacher_targets(np.array([0.0, 1.5]), np.zeros((2, 3)))
