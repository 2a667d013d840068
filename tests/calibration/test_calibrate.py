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


@pytest.mark.parametrize("kind", ["sequential", "functional", "listed"])
@pytest.mark.parametrize("method", METHODS)
def test_single_input_model_takes_a_plain_tensor_without_warnings(rng, data, kind, method):
    model = _single_input_models(rng)[kind]
    x, y = data
    calibrated = _quietly_calibrated(model, data, method)
    assert len(calibrated.inputs) == 1 and not isinstance(calibrated.input, (list, tuple, dict))
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
    x, y = data
    calibrated = _quietly_calibrated(model, data, method)
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
