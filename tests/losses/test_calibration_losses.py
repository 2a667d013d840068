"""What every calibration loss of keras_ils.losses must do, each against a numpy implementation of its paper's formula.

The numpy references below are written from the papers' formulas (per example,
then the mean over the batch for the batch-level terms of MMCE and MDCA),
independently of the package's code.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_ils import teacher_targets
from keras_ils.losses import (
    FocalLoss,
    MarginLabelSmoothingLoss,
    MDCALoss,
    MMCELoss,
    OnlineLabelSmoothing,
)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


def _log_softmax(z):
    z = np.asarray(z, np.float64)
    shifted = z - z.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _ce(y, z):
    return -(y * _log_softmax(z)).sum(-1)


def ref_focal(y, z, gamma=3.0):
    """Mukhoti et al.: -(1 - p_t)^gamma log p_t (per class, weighted by y); FLSD-53: gamma 5 where p_t < 0.2, else 3."""
    log_p = _log_softmax(z)
    p = np.exp(log_p)
    if gamma == "flsd53":
        p_t = (y * p).sum(-1, keepdims=True)
        gamma = np.where(p_t < 0.2, 5.0, 3.0)
    return -(y * (1 - p) ** gamma * log_p).sum(-1)


def ref_mbls(y, z, margin=10.0, alpha=0.1):
    """Liu et al.: CE + alpha * mean_j max(0, max_k z_k - z_j - margin)."""
    z = np.asarray(z, np.float64)
    return _ce(y, z) + alpha * np.maximum(z.max(-1, keepdims=True) - z - margin, 0).mean(-1)


def ref_mmce_value(p, labels):
    """Kumar et al.: sqrt((1/m^2) sum_ij (c_i - r_i)(c_j - r_j) exp(-|r_i - r_j| / 0.4)), a double loop."""
    r, c = p.max(-1), (p.argmax(-1) == labels).astype(float)
    m = len(r)
    total = sum((c[i] - r[i]) * (c[j] - r[j]) * np.exp(-abs(r[i] - r[j]) / 0.4) for i in range(m) for j in range(m))
    return np.sqrt(max(total / m**2, 0.0))


def ref_mmce(y, z, weight=2.0):
    return _ce(y, z) + weight * ref_mmce_value(np.exp(_log_softmax(z)), y.argmax(-1))


def ref_mdca(y, z, beta=1.0):
    """Hebbalaguppe et al.: CE + beta * (1/K) sum_j |mean_i p_ij - mean_i y_ij|."""
    p = np.exp(_log_softmax(z))
    return _ce(y, z) + beta * np.abs(p.mean(0) - y.mean(0)).mean()


def ref_ols(y, z, alpha=0.5):
    """Zhang et al. with the matrix at its start (uniform): alpha CE(y) + (1 - alpha) CE(1/K)."""
    k = y.shape[-1]
    return alpha * _ce(y, z) + (1 - alpha) * _ce(np.full_like(y, 1 / k), z)


# OLS's loss used without its callback warns (tested in test_online.py); here it is used so on purpose
pytestmark = pytest.mark.filterwarnings("ignore::keras_ils.losses.OnlineLabelSmoothingWarning")

K = 4
CASES = {
    "focal": (lambda **kw: FocalLoss(gamma=2.0, **kw), lambda y, z: ref_focal(y, z, 2.0)),
    "flsd53": (lambda **kw: FocalLoss(gamma="flsd53", **kw), lambda y, z: ref_focal(y, z, "flsd53")),
    "mbls": (lambda **kw: MarginLabelSmoothingLoss(margin=2.0, alpha=0.3, **kw), lambda y, z: ref_mbls(y, z, 2.0, 0.3)),
    "mmce": (lambda **kw: MMCELoss(weight=3.0, **kw), lambda y, z: ref_mmce(y, z, 3.0)),
    "mdca": (lambda **kw: MDCALoss(beta=5.0, **kw), lambda y, z: ref_mdca(y, z, 5.0)),
    "ols": (lambda **kw: OnlineLabelSmoothing(K, alpha=0.25, **kw), lambda y, z: ref_ols(y, z, 0.25)),
}
NAMES = list(CASES)


@pytest.fixture
def batch(rng):
    n = 24
    labels = rng.integers(0, K, n)
    logits = (3.0 * rng.normal(size=(n, K))).astype("float32")
    return labels, logits


@pytest.mark.parametrize("name", NAMES)
class TestAgainstThePapersFormula:
    def test_every_label_form(self, name, batch, rng):
        make, reference = CASES[name]
        labels, logits = batch
        want = reference(np.eye(K)[labels], logits)
        teacher = teacher_targets(labels, rng.normal(size=(len(labels), K)))
        for y in (labels, labels[:, None], np.eye(K)[labels].astype("float32"), teacher):
            np.testing.assert_allclose(_np(make(reduction=None)(y, logits)), want, rtol=1e-5, atol=1e-6)

    def test_probabilities_input(self, name, batch):
        make, reference = CASES[name]
        labels, logits = batch
        logits = logits / 3.0  # probabilities off the 1e-7 clip of Keras' probability losses
        probs = _np(ops.softmax(logits)).astype("float32")
        got = _np(make(from_logits=False, reduction=None)(labels, probs))
        np.testing.assert_allclose(got, reference(np.eye(K)[labels], logits), rtol=1e-4, atol=1e-5)

    def test_reductions_and_sample_weights(self, name, batch, rng):
        make, reference = CASES[name]
        labels, logits = batch
        per_example = reference(np.eye(K)[labels], logits)
        w = rng.random(len(labels))
        np.testing.assert_allclose(_np(make()(labels, logits)), per_example.mean(), rtol=1e-5)
        np.testing.assert_allclose(_np(make(reduction="sum")(labels, logits)), per_example.sum(), rtol=1e-5)
        weighted = _np(make()(labels, logits, sample_weight=w))
        np.testing.assert_allclose(weighted, (w * per_example).sum() / len(w), rtol=1e-5)
        assert _np(make()(labels, logits, sample_weight=np.zeros(len(labels)))) == 0.0

    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    def test_half_precision_dtype(self, name, batch, dtype):
        make, reference = CASES[name]
        labels, logits = batch
        got = make(dtype=dtype)(labels, logits)
        assert keras.backend.standardize_dtype(got.dtype) == dtype
        want = reference(np.eye(K)[labels], _np(ops.cast(ops.cast(logits, dtype), "float32"))).mean()
        np.testing.assert_allclose(_np(ops.cast(got, "float32")), want, rtol=3e-2)


def _gradient(fn, x):
    """d fn(x) / dx on the active backend (TensorFlow's tape or jax.grad)."""
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.grad(lambda v: fn(v))(ops.convert_to_tensor(x)))
    import tensorflow as tf

    variable = tf.Variable(x)
    with tf.GradientTape() as tape:
        value = fn(variable)
    return tape.gradient(value, variable).numpy()


@pytest.mark.parametrize("name", NAMES)
class TestGradients:
    def test_finite_with_huge_logits(self, name):
        make, _ = CASES[name]
        labels = np.array([0, 1, 2, 3, 0])
        logits = np.array(
            [[1e4, -1e4, 0, 0], [0, 1e4, 0, -1e4], [-1e4, 1e4, 0, 0], [0, 0, 0, 0], [50.0, 0, 0, 0]], np.float32
        )
        grad = _gradient(lambda z: make()(labels, z), logits)
        assert np.isfinite(grad).all()

    def test_against_central_differences(self, name, batch):
        make, reference = CASES[name]
        labels, logits = batch
        logits, labels = logits[:6], labels[:6]  # the loss in float32, the differences in float64
        grad = _gradient(lambda z: make()(labels, z), logits)
        logits = logits.astype(np.float64)
        numeric = np.zeros_like(logits)
        h = 1e-6
        for index in np.ndindex(*logits.shape):
            up, down = logits.copy(), logits.copy()
            up[index] += h
            down[index] -= h
            numeric[index] = (reference(np.eye(K)[labels], up).mean() - reference(np.eye(K)[labels], down).mean()) / (
                2 * h
            )
        np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-5)


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(K)])


def _data(rng, n=48):
    x = rng.normal(size=(n, 5)).astype("float32")
    return x, ((x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0.3)).astype("int32")


@pytest.mark.parametrize("name", NAMES)
class TestInAModel:
    def test_fit_and_evaluate_against_the_formula(self, name, rng):
        make, reference = CASES[name]
        x, y = _data(rng)
        model = _model()
        model.compile(optimizer="adam", loss=make())
        history = model.fit(x, y, epochs=2, batch_size=48, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        want = reference(np.eye(K)[y], model.predict(x, verbose=0)).mean()
        np.testing.assert_allclose(model.evaluate(x, y, batch_size=48, verbose=0), want, rtol=1e-4)

    def test_mixed_bfloat16(self, name, rng):
        make, _ = CASES[name]
        x, y = _data(rng)
        model = _model()
        model.compile(loss=make())
        full = model.evaluate(x, y, batch_size=48, verbose=0)
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        try:
            mixed = _model()
            mixed.set_weights(model.get_weights())
            mixed.compile(optimizer="sgd", loss=make())
            got = mixed.evaluate(x, y, batch_size=48, verbose=0)
            history = mixed.fit(x, y, epochs=1, batch_size=16, verbose=0)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        np.testing.assert_allclose(got, full, rtol=2e-2)
        assert np.isfinite(history.history["loss"]).all()

    def test_keras_file_round_trip(self, name, rng, tmp_path):
        make, _ = CASES[name]
        x, y = _data(rng, 16)
        model = _model()
        model.compile(optimizer="sgd", loss=make())
        model.fit(x, y, epochs=1, verbose=0)
        model.save(tmp_path / "m.keras")
        loaded = keras.saving.load_model(tmp_path / "m.keras")
        assert type(loaded.loss) is type(model.loss) and loaded.loss.get_config() == model.loss.get_config()
        np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0), rtol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip(name):
    make, _ = CASES[name]
    loss = make(from_logits=False, name="custom", reduction="sum")
    config = loss.get_config()
    assert type(loss).from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == config


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: FocalLoss(gamma=-1.0), "gamma"),
        (lambda: FocalLoss(gamma="flsd35"), "gamma"),
        (lambda: FocalLoss(gamma=float("nan")), "gamma"),
        (lambda: MarginLabelSmoothingLoss(margin=-1.0), "margin"),
        (lambda: MarginLabelSmoothingLoss(alpha=-0.1), "alpha"),
        (lambda: MMCELoss(weight=-2.0), "weight"),
        (lambda: MDCALoss(beta=-1.0), "beta"),
        (lambda: OnlineLabelSmoothing(3, alpha=1.5), "alpha"),
        (lambda: OnlineLabelSmoothing(1), "num_classes"),
        (lambda: OnlineLabelSmoothing(3.0), "num_classes"),
    ],
)
def test_bad_arguments_fail_at_construction(make, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        make()
