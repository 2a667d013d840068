"""The losses' functional forms (`keras_ils.losses.functional_form`): a leading models axis, settings per model.

Each form's functions on `y_pred` `[M, m, K]` with a setting per model (`[M, 1, 1]`) give, model by model, the
papers' formulas written in numpy (test_calibration_losses.py's references); the batch terms are each model's own
batch's; the loss classes still take every example they are given as one batch.
"""

import keras
import numpy as np
import pytest
from keras import ops
from test_calibration_losses import _ce, ref_focal, ref_mbls, ref_mdca, ref_mmce

from keras_ils import losses

pytestmark = pytest.mark.filterwarnings("ignore::keras_ils.losses.OnlineLabelSmoothingWarning")

M, N, K = 3, 9, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


@pytest.fixture
def models_batch(rng):
    """`(one-hot [M, N, K], logits [M, N, K])`: one batch per model."""
    labels = rng.integers(0, K, size=(M, N))
    return np.eye(K, dtype="float32")[labels], (3.0 * rng.normal(size=(M, N, K))).astype("float32")


def _value(form, y, z, **per_model):
    """Each model's loss on its batch as a trainer computes it: the mean of `function`, plus the batch term."""
    arguments = {**form.arguments, **{k: np.reshape(v, (M, 1, 1)).astype("float32") for k, v in per_model.items()}}
    value = ops.mean(form.function(y, z, **{k: v for k, v in arguments.items() if k in form.arguments}), axis=-1)
    if form.batch_term is not None:
        term, term_arguments = form.batch_term
        term_arguments = {**term_arguments, **{k: v for k, v in arguments.items() if k in term_arguments}}
        value = value + ops.squeeze(term(y, z, **term_arguments), axis=-1)
    return _np(value)


CASES = {
    "focal": (losses.FocalLoss(), "gamma", (0.0, 1.5, 3.0), ref_focal),
    "mbls": (losses.MarginLabelSmoothingLoss(), "margin", (0.5, 1.0, 4.0), lambda y, z, margin: ref_mbls(y, z, margin)),
    "mmce": (losses.MMCELoss(), "weight", (0.0, 1.0, 8.0), ref_mmce),
    "mdca": (losses.MDCALoss(), "beta", (0.0, 1.0, 20.0), ref_mdca),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_setting_per_model_is_each_models_formula(name, models_batch):
    loss, setting, values, reference = CASES[name]
    y, z = models_batch
    got = _value(losses.functional_form(loss), y, z, **{setting: values})
    want = [reference(y[i], z[i], values[i]).mean() for i in range(M)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_flsd53_and_alpha_per_model(models_batch):
    y, z = models_batch
    np.testing.assert_allclose(
        _value(losses.functional_form(losses.FocalLoss(gamma="flsd53")), y, z),
        [ref_focal(y[i], z[i], "flsd53").mean() for i in range(M)],
        rtol=1e-5,
    )
    alphas = (0.0, 0.1, 0.5)
    got = _value(losses.functional_form(losses.MarginLabelSmoothingLoss(margin=1.0)), y, z, alpha=alphas)
    np.testing.assert_allclose(got, [ref_mbls(y[i], z[i], 1.0, alphas[i]).mean() for i in range(M)], rtol=1e-5)


def test_ols_with_a_soft_label_matrix_per_model(models_batch, rng):
    y, z = models_batch
    soft_labels = rng.dirichlet(np.ones(K), size=(M, K)).astype("float32")
    alphas = (0.25, 0.5, 1.0)
    form = losses.functional_form(losses.OnlineLabelSmoothing(K))
    np.testing.assert_array_equal(form.state.initial["soft_labels"], np.full((K, K), 1 / K, np.float32))
    got = _np(form.function(y, z, soft_labels=soft_labels, alpha=np.reshape(alphas, (M, 1, 1)).astype("float32"))).mean(
        -1
    )
    rows = np.take_along_axis(soft_labels, y.argmax(-1)[..., None], axis=1)  # S[label] per example
    want = [(alphas[i] * _ce(y[i], z[i]) + (1 - alphas[i]) * _ce(rows[i], z[i])).mean() for i in range(M)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    sums, counts = (_np(s) for s in form.state.statistics(y, z))
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    for i in range(M):
        right = p[i].argmax(-1) == y[i].argmax(-1)
        members = y[i] * right[:, None]
        np.testing.assert_allclose(sums[i], members.T @ p[i], rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(counts[i], members.sum(0))


def test_the_classes_take_every_example_as_one_batch(models_batch):
    """`MMCELoss` and `MDCALoss` on `[M, m, K]`: one penalty over all `M * m` examples, as before the models axis."""
    y, z = models_batch
    flat_y, flat_z = y.reshape(M * N, K), z.reshape(M * N, K)
    np.testing.assert_allclose(
        _np(losses.MMCELoss(weight=2.0, reduction=None)(y, z)), ref_mmce(flat_y, flat_z, 2.0).reshape(M, N), rtol=1e-5
    )
    np.testing.assert_allclose(
        _np(losses.MDCALoss(beta=3.0, reduction=None)(y, z)), ref_mdca(flat_y, flat_z, 3.0).reshape(M, N), rtol=1e-5
    )


class TestFunctionalForm:
    def test_keras_function_losses_are_their_function_and_config(self):
        form = losses.functional_form(keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1))
        assert form.function is keras.losses.categorical_crossentropy
        assert form.arguments == {"from_logits": True, "label_smoothing": 0.1, "axis": -1}

    def test_a_loss_without_one_is_refused(self):
        class Own(keras.losses.Loss):
            def call(self, y_true, y_pred):
                return ops.sum(y_pred, axis=-1)

        with pytest.raises(TypeError, match="must have a functional form"):
            losses.functional_form(Own())

    def test_settings_per_model_are_not_checked_numbers_are(self):
        with pytest.raises(ValueError, match="Invalid value for argument `gamma`"):
            losses.focal_crossentropy([0], [[1.0, 0.0]], gamma=-1.0)
        values = losses.focal_crossentropy(np.eye(2)[[[0], [1]]], np.zeros((2, 1, 2)), gamma=np.ones((2, 1, 1)))
        np.testing.assert_allclose(_np(values), 0.5 * np.log(2) * np.ones((2, 1)), rtol=1e-6)
