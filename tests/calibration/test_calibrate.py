"""What `calibrate` hands a user works outside the package: one plain input, export and serving, no warnings."""

import warnings

import keras
import numpy as np
import pytest

from keras_ils.calibration import (
    METHODS,
    TemperatureFitWarning,
    calibrate,
    estimate_temperature,
    fit_calibrator,
    fit_temperature,
    fit_temperatures,
)


@pytest.fixture
def data(rng):
    x = rng.normal(size=(300, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.3).astype("int32")
    return x, y


def _dense(weights_rng, inputs, units=3):
    kernel = 3.0 * weights_rng.normal(size=(inputs.shape[-1], units)).astype("float32")
    return keras.layers.Dense(units, kernel_initializer=keras.initializers.Constant(kernel))


def _single_input_models(rng):
    """The three ways a Keras user builds a one-input classifier: Sequential, functional, functional with [input]."""
    sequential = keras.Sequential([keras.Input((4,)), _dense(rng, np.zeros((1, 4)))])
    x = keras.Input((4,))
    functional = keras.Model(x, _dense(rng, x)(x))
    x = keras.Input((4,))
    listed = keras.Model([x], _dense(rng, x)(x))
    return {"sequential": sequential, "functional": functional, "listed": listed}


def _quietly_calibrated(model, data, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fit diagnostics (small sets) are other tests' subject
        return calibrate(model, data, method=method)


# every method on a Sequential model; the other structures with one smooth and one step map (the structure is
# calibrate's, the same for every method)
CASES = [("sequential", m) for m in METHODS] + [
    (k, m) for k in ("functional", "listed") for m in ("temperature", "isotonic")
]


@pytest.mark.parametrize("kind, method", CASES)
def test_single_input_model_takes_a_plain_tensor_without_warnings(rng, data, kind, method):
    model = _single_input_models(rng)[kind]
    calibrated = _quietly_calibrated(model, data, method)
    assert len(calibrated.inputs) == 1 and not isinstance(calibrated.input, (list, tuple, dict))
    # new inputs: on a validation example's own score, the ulp a compiled step may round by can move a step map
    # (Venn-Abers, binning) across that score's step
    x = rng.normal(size=data[0].shape).astype("float32")
    own = model.predict(x, verbose=0)
    want = keras.ops.convert_to_numpy(calibrated.layers[-1](own))  # the fitted layer on the model's own outputs
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The structure of `inputs` doesn't match the expected structure" fails
        predicted = calibrated.predict(x, verbose=0)
        called = keras.ops.convert_to_numpy(calibrated(x))
        on_batch = calibrated.predict_on_batch(x)
    for got in (predicted, called, on_batch):  # a compiled step may round the model's logits by an ulp, which
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # a steep isotonic segment multiplies


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("method", METHODS)
def test_export_serves_a_plain_tensor(rng, data, tmp_path, method):
    import tensorflow as tf

    model = _single_input_models(rng)["sequential"]
    calibrated = _quietly_calibrated(model, data, method)
    x = rng.normal(size=data[0].shape).astype("float32")  # new inputs, as above: none on a step map's own step
    want = calibrated.predict(x, verbose=0)
    calibrated.export(str(tmp_path / "served"), verbose=False)
    served = keras.layers.TFSMLayer(str(tmp_path / "served"), call_endpoint="serve")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(served(x)), want, rtol=1e-5, atol=1e-6)
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    np.testing.assert_allclose(loaded.serve(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    # the calibration is in the artifact: not the raw model's outputs
    assert np.abs(want - model.predict(x, verbose=0)).max() > 1e-3


@pytest.mark.parametrize("method", ["temperature", "dirichlet"])
def test_multi_input_models_keep_their_structure(rng, data, method):
    x, y = data
    a, b = keras.Input((2,), name="a"), keras.Input((2,), name="b")
    merged = keras.layers.Concatenate()([a, b])
    features = {"a": x[:, :2], "b": x[:, 2:]}
    for inputs, feed in (({"a": a, "b": b}, features), ([a, b], [features["a"], features["b"]])):
        model = keras.Model(inputs, _dense(rng, merged)(merged))
        calibrated = _quietly_calibrated(model, (feed, y), method)
        assert type(calibrated.input) is type(inputs)
        want = keras.ops.convert_to_numpy(calibrated.layers[-1](model.predict(feed, verbose=0)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_allclose(calibrated.predict(feed, verbose=0), want, rtol=1e-5, atol=1e-6)


def test_subclassed_model_still_calibrates(rng, data):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    x, y = data
    net = Net()
    net(x[:1])
    calibrated = _quietly_calibrated(net, data, "temperature")
    t = float(keras.ops.convert_to_numpy(calibrated.layers[-1].temperature))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), net.predict(x, verbose=0) / t, rtol=1e-5)


class TestEmpty:
    """No example to fit on: one line naming the argument, never an `UnboundLocalError` or a NaN fit."""

    def test_calibrate_refuses_an_empty_tuple(self, rng):
        model = _single_input_models(rng)["sequential"]
        with pytest.raises(ValueError, match="Invalid value for argument `validation_data`.*0 examples"):
            calibrate(model, (np.zeros((0, 4), "float32"), np.zeros(0, "int32")))

    def test_calibrate_refuses_an_empty_dataset(self, rng, data):
        import tensorflow as tf

        model = _single_input_models(rng)["sequential"]
        empty = tf.data.Dataset.from_tensor_slices(data).take(0).batch(8)
        with pytest.raises(ValueError, match="Invalid value for argument `validation_data`.*yields no batch"):
            calibrate(model, empty, method="vector")

    def test_calibrate_refuses_an_empty_generator(self, rng):
        model = _single_input_models(rng)["sequential"]
        with pytest.raises(ValueError, match="Invalid value for argument `validation_data`.*yields no batch"):
            calibrate(model, (batch for batch in []))

    @pytest.mark.parametrize("method", [m for m in METHODS if m != "temperature"])
    def test_fit_calibrator(self, method):
        with pytest.raises(ValueError, match=r"Argument `outputs` must have shape \[n >= 1, K >= 2\]"):
            fit_calibrator(method, np.zeros((0, 3)), np.zeros(0, "int32"))

    @pytest.mark.parametrize("fit", [fit_temperature, estimate_temperature])
    def test_temperature_fits(self, fit):
        with pytest.raises(ValueError, match=r"Argument `logits` must have shape \[n >= 1, K >= 2\]"):
            fit(np.zeros((0, 3)), np.zeros(0, "int32"))

    def test_vectorised_temperature_fit(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # before: "Mean of empty slice" and T = 86.4 for models that saw nothing
            with pytest.raises(ValueError, match=r"Argument `logits` must have shape \[M >= 1, n >= 1, K >= 2\]"):
                fit_temperatures(np.zeros((2, 0, 3)), np.zeros((2, 0), "int32"))
            with pytest.raises(ValueError, match=r"Argument `labels` must have shape \[M, n\]"):
                fit_temperatures(np.zeros((2, 4, 3)), np.zeros((2, 3), "int32"))
            with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)"):
                fit_temperatures(np.zeros((2, 4, 3)), np.full((2, 4), 3))

    def test_vectorised_fit_still_broadcasts_shared_labels(self, rng):
        labels = rng.integers(0, 3, 400)
        logits = 3.0 * (rng.normal(size=(2, 400, 3)) + 2.0 * np.eye(3)[labels])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TemperatureFitWarning)
            want = [fit_temperature(logits[m], labels) for m in range(2)]
        np.testing.assert_allclose(fit_temperatures(logits, labels[None]), want, rtol=1e-9)


def _softmax_twins(rng, kind):
    """`(logit model, its softmax twin)` of a `kind`: the same weights, the twin ending in a softmax as tutorials do.

    The weights keep every float32 probability above `keras.config.epsilon()`, where the fits clip `p` before
    taking `log p` (below it, a softmax model's outputs no longer hold its logits up to a shift).
    """
    kernel = keras.initializers.Constant(2.0 * rng.normal(size=(4, 3)).astype("float32"))
    hidden = keras.initializers.Constant(rng.normal(size=(4, 4)).astype("float32"))

    def head(**kwargs):
        return keras.layers.Dense(3, kernel_initializer=kernel, **kwargs)

    def features():
        return keras.layers.Dense(4, activation="tanh", kernel_initializer=hidden)

    def sequential(*layers):
        return keras.Sequential([keras.Input((4,)), *layers])

    def functional(**kwargs):
        x = keras.Input((4,))
        return keras.Model(x, head(**kwargs)(features()(x)))

    builders = {
        "dense softmax": lambda **kw: sequential(features(), head(**kw)),
        "softmax layer": lambda **kw: sequential(features(), head(), *([keras.layers.Softmax()] if kw else [])),
        "functional": functional,
        "nested sequential": lambda **kw: sequential(functional(**kw)),
    }
    return builders[kind](), builders[kind](activation="softmax")


def _labels_at_temperature(rng, model, x, temperature=2.5):
    """Labels drawn from `softmax(model's logits / temperature)`: the model is over-confident by `temperature`."""
    p = _softmax(_outputs(model, x) / temperature)
    return (p.cumsum(-1) < rng.uniform(size=(len(x), 1))).sum(-1).astype("int32")


def _outputs(model, x):
    return keras.ops.convert_to_numpy(model(x))


def _nll(probabilities, labels):
    return float(-np.mean(np.log(probabilities[np.arange(len(labels)), labels])))


def _softmax(logits):
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class TestSoftmaxModels:
    """A model ending in a softmax is read as probabilities: the same map as its logit twin (issue 29 item 2)."""

    @pytest.mark.parametrize("kind", ["dense softmax", "softmax layer", "functional", "nested sequential"])
    def test_same_temperature_and_nll_as_the_logit_twin(self, rng, data, kind):
        logit_model, softmax_model = _softmax_twins(rng, kind)
        x = data[0]
        data = (x, y := _labels_at_temperature(rng, logit_model, x))
        np.testing.assert_allclose(  # twins: the softmax of the one is the other
            _softmax(_outputs(logit_model, x)), _outputs(softmax_model, x), rtol=1e-4, atol=1e-6
        )
        fits = {}
        for name, model in (("logits", logit_model), ("softmax", softmax_model)):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                calibrated, fit = calibrate(model, data, return_fit=True)
            fits[name] = (float(keras.ops.convert_to_numpy(calibrated.layers[-1].temperature)), calibrated)
        (t_logits, calibrated_logits), (t_softmax, calibrated_softmax) = fits["logits"], fits["softmax"]
        assert 1.5 < t_logits < 4.0  # labels drawn at T = 2.5: a real fit, not the starting point
        np.testing.assert_allclose(t_softmax, t_logits, rtol=1e-4)
        assert calibrated_softmax.layers[-1].from_logits is False and calibrated_logits.layers[-1].from_logits
        probabilities = _outputs(calibrated_softmax, x)  # the layer returns probabilities
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)
        want = _nll(_softmax(_outputs(calibrated_logits, x)), y)
        np.testing.assert_allclose(_nll(probabilities, y), want, rtol=1e-4)
        assert want < _nll(_softmax(_outputs(logit_model, x)), y)  # calibration helped

    def test_a_confident_softmax_model_gets_its_logit_twins_temperature(self, rng, data):
        """Probabilities far below 1e-7 are read unclipped: `T*` is the logit twin's and scipy's minimiser of the
        NLL on the logits, and the reported NLL is the logits' (issue 38: 1.09959 against 1.10057)."""
        from scipy.optimize import minimize_scalar

        kernel = keras.initializers.Constant(12.0 * rng.normal(size=(4, 3)).astype("float32"))
        twins = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_initializer=kernel, **kw)])
                 for kw in ({}, {"activation": "softmax"})]  # fmt: skip
        x = data[0]
        y = _labels_at_temperature(rng, twins[0], x, temperature=1.3)
        logits = _outputs(twins[0], x).astype(np.float64)
        assert (_outputs(twins[1], x) < 1e-7).mean() > 0.2  # where a 1e-7 clip cut the logit gaps
        (_, fit_logits), (_, fit_softmax) = (calibrate(m, (x, y), estimator="mle", return_fit=True) for m in twins)

        def nll(t):
            z = logits / t
            return float(np.mean(np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1) - z[np.arange(300), y]))

        best = minimize_scalar(nll, bounds=(0.05, 20.0), method="bounded", options={"xatol": 1e-10})
        np.testing.assert_allclose(fit_softmax.temperature, fit_logits.temperature, rtol=1e-5)
        np.testing.assert_allclose(fit_softmax.temperature, best.x, rtol=1e-5)
        np.testing.assert_allclose(fit_softmax.nll, best.fun, rtol=1e-5)

    @pytest.mark.parametrize("method", ["temperature", "vector", "dirichlet", "ensemble_temperature"])
    def test_a_confident_softmax_model_serves_its_logit_twins_calibrated_outputs(self, rng, data, method):
        """The layer serves the map it fitted: no 1e-7 clip in `call` where the fit read log p unclipped."""
        kernel = keras.initializers.Constant(12.0 * rng.normal(size=(4, 3)).astype("float32"))
        twins = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_initializer=kernel, **kw)])
                 for kw in ({}, {"activation": "softmax"})]  # fmt: skip
        x = data[0]
        fitted = (x, _labels_at_temperature(rng, twins[0], x, temperature=1.3))
        assert (_outputs(twins[1], x) < 1e-7).mean() > 0.2
        want = _softmax(_outputs(_quietly_calibrated(twins[0], fitted, method), x))
        got = _outputs(_quietly_calibrated(twins[1], fitted, method), x)
        read = _outputs(twins[1], x) > 1e-30  # where the softmax's float32 output still holds the logit gap
        np.testing.assert_allclose(np.log(got)[read], np.log(want)[read], atol=2e-3)
        np.testing.assert_allclose(got, want, atol=1e-6)

    @pytest.mark.parametrize("method", ["vector"])
    def test_other_methods_read_the_softmax_too(self, rng, data, method):
        logit_model, softmax_model = _softmax_twins(rng, "dense softmax")
        x = data[0]
        data = (x, _labels_at_temperature(rng, logit_model, x))
        got = _outputs(_quietly_calibrated(softmax_model, data, method), x)
        want = _softmax(_outputs(_quietly_calibrated(logit_model, data, method), x))  # from calibrated logits
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)

    def test_a_contradicting_declaration_is_refused(self, rng, data):
        logit_model, softmax_model = _softmax_twins(rng, "dense softmax")
        with pytest.raises(ValueError, match="declared as logits .*Pass `from_logits=False`"):
            calibrate(softmax_model, data, from_logits=True)
        with pytest.raises(ValueError, match="declared as probabilities .*Pass `from_logits=True`"):
            calibrate(logit_model, data, from_logits=False)
