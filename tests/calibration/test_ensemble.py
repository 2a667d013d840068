"""Mix-n-Match ensemble temperature scaling: the layer, the weights' fit against scipy and the authors' code."""

import warnings

import keras
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax

from keras_ils.calibration import CalibratorFitWarning, EnsembleTemperatureScaling, fit_calibrator
from keras_ils.calibration import _temperature_solver as solver
from keras_ils.calibration.ensemble import simplex_least_squares


def _their_data(seed):
    """The authors-style toy set of the pinned literals below (n = 40, K = 4, noisy over-confident logits)."""
    rng = np.random.default_rng(seed)
    s = 1.5 * rng.normal(size=(40, 4))
    labels = (rng.random((40, 1)) < (np.exp(s) / np.exp(s).sum(1, keepdims=True)).cumsum(1)).argmax(1)
    return 2.5 * s + 2.0 * rng.normal(size=(40, 4)), labels


def _components(logits, temperature):
    return np.stack([softmax(logits / temperature, axis=1), softmax(logits, axis=1), np.full(logits.shape, 0.25)])


def _scipy_weights(logits, labels, temperature):
    """The authors' `ensemble_scaling(..., 'mse', t, n_class)`: SLSQP on `mse_w` from (1, 0, 0), rewritten here."""
    p0, p1, p2 = _components(logits, temperature)
    y = np.eye(logits.shape[1])[labels]

    def mse_w(w):
        p = w[0] * p0 + w[1] * p1 + w[2] * p2
        return np.mean((p / p.sum(axis=1)[:, None] - y) ** 2)

    result = minimize(mse_w, (1.0, 0.0, 0.0), method="SLSQP", bounds=[(0, 1)] * 3, tol=1e-12,
                      constraints={"type": "eq", "fun": lambda w: np.sum(w) - 1})  # fmt: skip
    return result.x, result.fun


def test_weights_match_the_authors_code_at_their_temperature():
    # Literals: zhang64-llnl/Mix-n-Match-Calibration util_calibration.py (temperature_scaling(logit, label, 'mse')
    # then ensemble_scaling(logit, label, 'mse', t, 4), as ets_calibrate does), run once on _their_data(2) with
    # numpy 2 / scipy 1.17: `t = temperature_scaling(logits, onehot, "mse"); w = ensemble_scaling(...)`.
    their_t = 2.939837053119589
    their_w = [0.31322647529319203, 0.4221626876059104, 0.2646108371008975]
    logits, labels = _their_data(2)
    weights, value = simplex_least_squares(_components(logits, their_t), np.eye(4)[labels])
    np.testing.assert_allclose(weights, their_w, atol=1e-5)
    assert value <= _scipy_weights(logits, labels, their_t)[1] + 1e-12


@pytest.mark.parametrize("passes", ["host", "device"])
@pytest.mark.parametrize("seed", range(6))
def test_fit_is_temperature_scaling_then_the_mse_weights(seed, passes, monkeypatch):
    if passes == "device":  # the passes on the backend's device, in blocks of 16 rows (the last padded)
        monkeypatch.setattr(solver, "CPU_CACHE", 64)
    logits, labels = _their_data(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibratorFitWarning)
        layer, fit = fit_calibrator("ensemble_temperature", logits, labels, return_fit=True)
        _, scaling = fit_calibrator("temperature", logits, labels, return_fit=True)  # the NLL temperature (MAP)
    temperature = scaling.temperature  # the package's, not their MSE one
    assert layer.initial_temperature == fit.temperature == temperature and fit.estimator == "map"
    want, optimum = _scipy_weights(logits, labels, temperature)
    # the fit's sums are float32 per row (float64 across rows), the reference float64 throughout
    assert fit.objective == pytest.approx(optimum, rel=1e-7) and fit.objective <= optimum * (1 + 1e-7)
    np.testing.assert_allclose(layer.ensemble_weights, want, atol=2e-4)  # SLSQP stops near the exact optimum
    assert min(layer.ensemble_weights) >= 0 and sum(layer.ensemble_weights) == pytest.approx(1.0, abs=1e-12)
    q = np.tensordot(layer.ensemble_weights, _components(logits, temperature), axes=1)
    assert fit.nll == pytest.approx(-np.mean(np.log(q[np.arange(40), labels])), rel=1e-6)


def test_simplex_least_squares_against_a_dense_grid(rng):
    components, targets = rng.random((3, 50, 4)), np.eye(4)[rng.integers(0, 4, 50)]
    weights, value = simplex_least_squares(components, targets)
    grid = [(a, b, 1 - a - b) for a in np.linspace(0, 1, 201) for b in np.linspace(0, 1, 201) if a + b <= 1 + 1e-12]
    values = [np.mean((np.tensordot(w, components, axes=1) - targets) ** 2) for w in grid]
    assert value <= min(values) + 1e-15
    assert value == pytest.approx(np.mean((np.tensordot(weights, components, axes=1) - targets) ** 2), rel=1e-12)


class TestLayer:
    @pytest.mark.parametrize("from_logits", [True, False])
    def test_call_is_the_mixture(self, rng, from_logits):
        layer = EnsembleTemperatureScaling(2.5, (0.6, 0.3, 0.1), from_logits=from_logits)
        z = 4.0 * rng.normal(size=(7, 5))
        if not from_logits:  # probabilities are read as log(p), clipped at keras.config.epsilon() like the others
            z = np.log(np.clip(softmax(z, axis=1), keras.config.epsilon(), 1.0))
        q = 0.6 * softmax(z / 2.5, axis=1) + 0.3 * softmax(z, axis=1) + 0.1 / 5
        got = keras.ops.convert_to_numpy(layer(z if from_logits else softmax(z, axis=1)))
        np.testing.assert_allclose(got, np.log(q) if from_logits else q, rtol=1e-5, atol=1e-6)

    def test_zero_weights_stay_finite(self):
        layer = EnsembleTemperatureScaling(1.0, (1.0, 0.0, 0.0))
        z = np.array([[200.0, -200.0, 0.0]])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(z)), log_softmax(z, axis=1), rtol=1e-5)

    @pytest.mark.parametrize(
        "kwargs, name",
        [
            (dict(temperature=0.0), "temperature"),
            (dict(ensemble_weights=(0.5, 0.5, 0.5)), "ensemble_weights"),
            (dict(ensemble_weights=(1.2, -0.2, 0.0)), "ensemble_weights"),
            (dict(ensemble_weights=(1.0, 0.0)), "ensemble_weights"),
            (dict(ensemble_weights="abc"), "ensemble_weights"),
        ],
    )
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            EnsembleTemperatureScaling(**kwargs)


def test_small_sets_warn_and_relay_the_temperature_fit(rng):
    logits, labels = 3.0 * rng.normal(size=(30, 6)), rng.integers(0, 6, 30)
    with pytest.warns(CalibratorFitWarning, match=r"\(ensemble_temperature\): it rests on too few examples") as got:
        _, fit = fit_calibrator("ensemble_temperature", logits, labels, return_fit=True)
    assert fit.status == "few_examples" and "its temperature: Temperature scaling:" in str(got[0].message)
