import warnings

import keras
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax, logsumexp, softmax

import keras_ils
from keras_ils import (
    CalibratorFitWarning,
    DirichletCalibration,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    calibrate,
    fit_calibrator,
    fit_temperature,
)

LAYERS = {"vector": VectorScaling, "matrix": MatrixScaling, "dirichlet": DirichletCalibration}


# --- the objective, written from Kull et al. (2019) §4 for scipy, independently of the package -------------


def _features(method, logits):
    return log_softmax(logits, axis=1) if method == "dirichlet" else logits


def _map(method, params, x):
    k = x.shape[1]
    if method == "vector":
        return x * params[:k] + params[k:]
    return x @ params[: k * k].reshape(k, k) + params[k * k :]


def _objective(params, method, x, labels, lam, mu):
    n, k = x.shape
    z = _map(method, params, x)
    nll = np.mean(logsumexp(z, axis=1) - z[np.arange(n), labels])
    residual = (softmax(z, axis=1) - np.eye(k)[labels]) / n
    if method == "vector":
        return nll, np.concatenate([(x * residual).sum(0), residual.sum(0)])
    w, b = params[: k * k].reshape(k, k), params[k * k :]
    off = w - np.diag(np.diag(w))
    value = nll + lam / (k * (k - 1)) * (off**2).sum() + mu / k * (b**2).sum()
    grad_w = x.T @ residual + 2 * lam / (k * (k - 1)) * off
    return value, np.concatenate([grad_w.ravel(), residual.sum(0) + 2 * mu / k * b])


def _scipy_fit(method, x, labels, lam=0.0, mu=0.0, start=None):
    """scipy's L-BFGS-B on the objective above, from the identity map (or `start`), to a gradient of 1e-11."""
    k = x.shape[1]
    if start is None:
        start = np.concatenate([np.ones(k) if method == "vector" else np.eye(k).ravel(), np.zeros(k)])
    result = minimize(_objective, start, args=(method, x, labels, lam, mu), jac=True, method="L-BFGS-B",
                      options=dict(maxiter=20000, maxfun=40000, ftol=1e-15, gtol=1e-11))  # fmt: skip
    return result.x, result.fun


def _weights(layer):
    return np.concatenate([np.ravel(w) for w in layer.get_weights()])


def _centred(method, params, k):
    """The map with the softmax's free shifts removed: each kernel row and the bias centred."""
    if method == "vector":
        return np.concatenate([params[:k], params[k:] - params[k:].mean()])
    w, b = params[: k * k].reshape(k, k), params[k * k :]
    return np.concatenate([(w - w.mean(axis=1, keepdims=True)).ravel(), b - b.mean()])


# --- synthetic data whose calibration map is known ----------------------------------------------------------


def _calibrated_task(rng, n, k):
    """True log-posteriors `s` and labels drawn from `softmax(s)`."""
    s = 1.5 * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return s, labels


def _miscalibrated(method, rng, s):
    """Logits `z` that the true map `(weights, bias)` of `method` sends back to `s` (up to a shift per row)."""
    k = s.shape[1]
    bias = rng.normal(scale=0.5, size=k)
    if method == "vector":
        scale = rng.uniform(0.4, 2.5, size=k)
        return (s - bias) / scale, np.concatenate([scale, bias])
    kernel = 1.3 * np.eye(k) + 0.25 * rng.normal(size=(k, k))
    if method == "dirichlet":  # equal column sums: log_softmax(z) = z - c, and (z - c) @ kernel = z @ kernel - c * sum
        kernel -= (kernel.sum(axis=0) - kernel.sum(axis=0).mean()) / k
    return (s - bias) @ np.linalg.inv(kernel), np.concatenate([kernel.ravel(), bias])


@pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
def test_recovers_the_known_map(method):
    rng = np.random.default_rng(7)
    k = 4
    s, labels = _calibrated_task(rng, 20000, k)
    z, truth = _miscalibrated(method, rng, s)
    odir = {} if method == "vector" else dict(off_diagonal_l2=1e-4, intercept_l2=1e-4)
    layer, fit = fit_calibrator(method, z, labels, return_fit=True, **odir)
    # vector scaling: the default fit, its prior's precision cross-validated; matrix/Dirichlet: ODIR's plain fit
    assert fit.status == ("regularised" if method == "vector" else "fitted") and fit.num_examples == 20000
    # the true map, up to sampling noise (20000 examples) and the prior's or ODIR's pull
    np.testing.assert_allclose(_centred(method, _weights(layer), k), _centred(method, truth, k), atol=0.15)
    calibrated = softmax(keras.ops.convert_to_numpy(layer(z)).astype(np.float64), axis=1)
    assert np.abs(calibrated - softmax(s, axis=1)).mean() < 0.01


ODIR = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (2.0, 1.0)]


@pytest.mark.parametrize(
    "method, lam, mu", [("vector", 0.0, 0.0)] + [(m, lam, mu) for m in ("matrix", "dirichlet") for lam, mu in ODIR]
)
def test_objective_matches_scipy(method, lam, mu):
    rng = np.random.default_rng(3)
    k = 5
    s, labels = _calibrated_task(rng, 3000, k)
    z, truth = _miscalibrated(method, rng, s)
    odir = dict(prior_precision=0) if method == "vector" else dict(off_diagonal_l2=lam, intercept_l2=mu)
    layer, fit = fit_calibrator(method, z, labels, return_fit=True, **odir)
    want, optimum = _scipy_fit(method, _features(method, z), labels, lam, mu)
    got = _weights(layer).astype(np.float64)
    assert fit.objective <= optimum + 1e-9 and fit.objective == pytest.approx(optimum, abs=1e-8)
    assert _objective(got, method, _features(method, z), labels, lam, mu)[0] == pytest.approx(optimum, abs=1e-6)
    if lam > 0 and mu > 0:  # strictly convex: one optimum
        np.testing.assert_allclose(got, want, atol=2e-3)
    else:  # the softmax's free shifts are flat: the same map up to them
        np.testing.assert_allclose(_centred(method, got, k), _centred(method, want, k), atol=2e-3)
    calibrated = _map(method, got, _features(method, z))
    nll = np.mean(logsumexp(calibrated, axis=1) - calibrated[np.arange(len(labels)), labels])
    assert fit.nll == pytest.approx(nll, rel=1e-5)


@pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
def test_probabilities_in_and_out(method):
    rng = np.random.default_rng(5)
    s, labels = _calibrated_task(rng, 2000, 3)
    z = 2.0 * s
    probabilities = softmax(z, axis=1)
    on_probabilities = fit_calibrator(method, probabilities, labels, from_logits=False)
    got = keras.ops.convert_to_numpy(on_probabilities(probabilities))
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    # the map of log(p): the logits' map for Dirichlet calibration, which removes the shift per row
    logits = z if method == "dirichlet" else np.log(probabilities)
    on_logits = fit_calibrator(method, logits, labels)
    np.testing.assert_allclose(got, softmax(keras.ops.convert_to_numpy(on_logits(logits)), axis=1), atol=2e-4)


def test_binary_problem():
    rng = np.random.default_rng(2)
    s, labels = _calibrated_task(rng, 4000, 2)
    for method in ("vector", "matrix", "dirichlet"):
        layer, fit = fit_calibrator(method, 3.0 * s, labels, return_fit=True, prior_precision=0)
        _, optimum = _scipy_fit(
            method, _features(method, 3.0 * s), labels, *((0, 0) if method == "vector" else (0.01, 0.01))
        )
        assert fit.status == "fitted" and fit.objective == pytest.approx(optimum, abs=1e-8)


class TestLayers:
    @pytest.mark.parametrize("from_logits", [True, False])
    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_call_is_the_documented_map(self, rng, method, from_logits):
        k = 4
        z = 3.0 * rng.normal(size=(6, k))
        layer = LAYERS[method](from_logits=from_logits)
        layer.build((None, k))
        params = [rng.uniform(0.5, 2.0, size=k) if method == "vector" else rng.normal(size=(k, k)), rng.normal(size=k)]
        layer.set_weights(params)
        flat = np.concatenate([np.ravel(p) for p in params])
        if from_logits:
            want = _map(method, flat, _features(method, z))
            got = layer(z)
        else:  # probabilities in, probabilities out, through log(p)
            want = softmax(_map(method, flat, np.log(softmax(z, axis=1))), axis=1)
            got = layer(softmax(z, axis=1))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_starts_as_the_identity_map(self, rng, method):
        z = rng.normal(size=(5, 3))
        got = keras.ops.convert_to_numpy(LAYERS[method]()(z))
        want = log_softmax(z, axis=1) if method == "dirichlet" else z
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("layer_class", [MatrixScaling, DirichletCalibration])
    def test_layer_losses_are_the_odir_terms(self, rng, layer_class):
        k = 4
        layer = layer_class(off_diagonal_l2=0.3, intercept_l2=0.2)
        layer.build((None, k))
        w, b = rng.normal(size=(k, k)), rng.normal(size=k)
        layer.set_weights([w, b])
        off = w - np.diag(np.diag(w))
        want = 0.3 / (k * (k - 1)) * (off**2).sum() + 0.2 / k * (b**2).sum()
        assert float(sum(keras.ops.convert_to_numpy(loss) for loss in layer.losses)) == pytest.approx(want, rel=1e-5)
        assert not layer_class(off_diagonal_l2=0.0, intercept_l2=0.0, trainable=False).losses

    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_config_and_keras_file_round_trip(self, tmp_path, rng, method):
        options = {} if method == "vector" else dict(off_diagonal_l2=0.5, intercept_l2=0.25)
        layer = LAYERS[method](**options, from_logits=False, name="cal")
        config = layer.get_config()
        assert type(layer).from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(restored) is type(layer) and restored.get_config() == config

        x = rng.normal(size=(200, 3)).astype("float32")
        y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
        calibrated = calibrate(model, (x, y), method=method)
        path = tmp_path / "calibrated.keras"
        calibrated.save(path)
        loaded = keras.saving.load_model(path)
        assert type(loaded.layers[-1]) is LAYERS[method] and not loaded.layers[-1].trainable
        np.testing.assert_allclose(loaded.predict(x, verbose=0), calibrated.predict(x, verbose=0), rtol=1e-6)

    @pytest.mark.parametrize(
        "method", ["vector"] + [pytest.param(m, marks=pytest.mark.slow) for m in ("matrix", "dirichlet")]
    )  # ~4 s each on 2 cores; the three layers share their float32 code (_float32)
    def test_trains_in_a_model_under_jit_compile_and_mixed_precision(self, rng, method):
        s, labels = _calibrated_task(rng, 256, 3)
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            layer = LAYERS[method]()
            model = keras.Sequential([keras.Input((3,)), layer, keras.layers.Activation("linear", dtype="float32")])
            model.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras_ils.ILSLoss(method="none"), jit_compile=True)
            history = model.fit(3.0 * s, labels, epochs=3, batch_size=256, verbose=0).history["loss"]
        finally:
            keras.mixed_precision.set_global_policy("float32")
        assert np.isfinite(history).all() and history[-1] < history[0]  # 3x over-confident: the map cools it
        assert keras.backend.standardize_dtype(layer.variables[0].dtype) == "float32"

    def test_unknown_class_count(self):
        with pytest.raises(ValueError, match="known number of classes K >= 2"):
            VectorScaling().build((None, 1))


class TestCalibrate:
    def _model_and_data(self, rng, n=400):
        x = rng.normal(size=(n, 4)).astype("float32")
        y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.3).astype("int32")
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        return model, x, y

    def test_default_is_temperature_scaling_as_before(self, rng):
        model, x, y = self._model_and_data(rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", keras_ils.TemperatureFitWarning)  # 400 examples: regularised, said
            calibrated = calibrate(model, (x, y))
            want = fit_temperature(model.predict(x, verbose=0), y)
        assert isinstance(calibrated.layers[-1], TemperatureScaling)
        assert float(calibrated.layers[-1].temperature) == pytest.approx(want, rel=1e-6)

    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_each_method_appends_its_fitted_layer(self, rng, method):
        model, x, y = self._model_and_data(rng)
        calibrated, fit = calibrate(model, (x, y), method=method, return_fit=True)
        layer = calibrated.layers[-1]
        assert isinstance(layer, LAYERS[method]) and not layer.trainable and fit.method == method
        direct = fit_calibrator(method, model.predict(x, verbose=0), y)
        np.testing.assert_allclose(_weights(layer), _weights(direct), rtol=1e-5, atol=1e-6)
        want = keras.ops.convert_to_numpy(layer(model.predict(x, verbose=0)))
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)

    def test_odir_options_reach_the_fit(self, rng):
        model, x, y = self._model_and_data(rng)
        calibrated = calibrate(model, (x, y), method="dirichlet", off_diagonal_l2=5.0, intercept_l2=0.0)
        layer = calibrated.layers[-1]
        assert (layer.off_diagonal_l2, layer.intercept_l2) == (5.0, 0.0)
        direct = fit_calibrator("dirichlet", model.predict(x, verbose=0), y, off_diagonal_l2=5.0, intercept_l2=0)
        np.testing.assert_allclose(_weights(layer), _weights(direct), rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("method", ["temperature", "vector"])
    def test_odir_options_refused_where_they_mean_nothing(self, rng, method):
        model, x, y = self._model_and_data(rng, n=10)
        with pytest.raises(ValueError, match="`off_diagonal_l2` and `intercept_l2` are ODIR's"):
            calibrate(model, (x, y), method=method, off_diagonal_l2=0.1)

    def test_unknown_method(self, rng):
        model, x, y = self._model_and_data(rng, n=10)
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            calibrate(model, (x, y), method="platt")


class TestDiagnosis:
    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_separated_validation_set_is_said(self, rng, method):
        labels = rng.integers(0, 3, 600)
        z = rng.normal(size=(600, 3)) + 6 * np.eye(3)[labels]
        with pytest.warns(CalibratorFitWarning, match="classifies all 600 validation examples correctly"):
            _, fit = fit_calibrator(method, z, labels, return_fit=True, prior_precision=0)
        assert fit.status == "separated"

    def test_not_converged_is_said(self, rng):
        s, labels = _calibrated_task(rng, 500, 4)
        with pytest.warns(CalibratorFitWarning, match="did not converge in 2 iterations"):
            _, fit = fit_calibrator("matrix", 4.0 * s, labels, max_iterations=2, return_fit=True, prior_precision=0)
        assert fit.status == "not_converged" and fit.iterations == 2

    def test_well_determined_fit_is_quiet(self, rng):
        s, labels = _calibrated_task(rng, 2000, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit_calibrator("dirichlet", 2.0 * s, labels)


class TestBadInput:
    @pytest.mark.parametrize(
        "kwargs, name",
        [
            (dict(method="platt"), "method"),
            (dict(method="matrix", off_diagonal_l2=-1.0), "off_diagonal_l2"),
            (dict(method="dirichlet", intercept_l2=float("nan")), "intercept_l2"),
            (dict(method="vector", max_iterations=0), "max_iterations"),
            (dict(method="vector", tolerance=0.0), "tolerance"),
        ],
    )
    def test_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            fit_calibrator(outputs=np.zeros((4, 3)), labels=[0, 1, 2, 0], **kwargs)

    def test_layer_arguments(self):
        with pytest.raises(ValueError, match="Invalid value for argument `off_diagonal_l2`"):
            MatrixScaling(off_diagonal_l2=-0.1)

    @pytest.mark.parametrize(
        "outputs, labels, match",
        [
            (np.zeros(4), [0, 1, 0, 1], "must have shape"),
            (np.full((2, 3), np.nan), [0, 1], "must be finite"),
            (np.zeros((3, 3)), [0, 1], "same length"),
            (np.zeros((2, 3)), [0, 3], "Invalid value for argument `labels`"),
        ],
    )
    def test_outputs_and_labels(self, outputs, labels, match):
        with pytest.raises(ValueError, match=match):
            fit_calibrator("vector", outputs, labels)

    def test_logits_passed_as_probabilities(self):
        with pytest.raises(ValueError, match="Invalid value for argument `(outputs|y_pred)`"):
            fit_calibrator("dirichlet", np.array([[2.0, -1.0], [0.5, 0.1]]), [0, 1], from_logits=False)


def test_exported_at_top_level():
    for name in ("VectorScaling", "MatrixScaling", "DirichletCalibration", "fit_calibrator", "CalibratorFit"):
        assert getattr(keras_ils, name) is getattr(keras_ils.calibration, name)
