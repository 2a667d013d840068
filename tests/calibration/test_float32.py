"""Calibration layers are float32 islands: float32 outputs and the model's own argmax under mixed precision."""

import warnings

import keras
import numpy as np
import pytest
from scipy.special import log_softmax

import keras_ils
from keras_ils.calibration import LAYERS, METHODS, calibrate

AFFINE = {"vector", "matrix", "dirichlet"}


@pytest.fixture(params=["mixed_bfloat16", "mixed_float16"])
def policy(request):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_dtype_policy(previous)


def _overconfident_model(rng, classes=10, features=8):
    """A mixed-precision classifier whose logits are large and close together: bfloat16 rounding ties many of them."""
    kernel = 4.0 * rng.normal(size=(features, classes)).astype("float32")
    return keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(classes, kernel_initializer=keras.initializers.Constant(kernel))]
    )


def _data(rng, model, n):
    x = rng.normal(size=(n, 8)).astype("float32")
    logits = np.asarray(model.predict(x, verbose=0), np.float64)
    y = (rng.random((n, 1)) < np.cumsum(np.exp(log_softmax(logits / 3.0, axis=1)), axis=1)).argmax(axis=1)
    return x, y


def _float64_map(method, layer, outputs):
    """The fitted affine map in float64 numpy, on the model's own (mixed-precision) outputs read as float64."""
    weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    features = log_softmax(outputs, axis=1) if method == "dirichlet" else outputs
    return (features * weights[0] if method == "vector" else features @ weights[0]) + weights[1]


@pytest.mark.parametrize(
    "policy, method",
    [("mixed_bfloat16", method) for method in ["temperature", *sorted(AFFINE)]]
    + [("mixed_float16", "temperature")]
    # the affine maps share one float32 base: under float16 too, but ~7 s more (issue 22: default run <= 5 min)
    + [pytest.param("mixed_float16", method, marks=pytest.mark.slow) for method in sorted(AFFINE)],
    indirect=["policy"],
)
def test_calibrated_model_outputs_float32_and_keeps_the_argmax(rng, policy, method):
    model = _overconfident_model(rng)
    # 1,200 validation examples: at least 10 per parameter of the 10-class matrix and Dirichlet maps (what the
    # small-data rule chooses is tested in test_small_data.py)
    x_val, y_val = _data(rng, model, 1200)
    x_test, _ = _data(rng, model, 3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calibrated = calibrate(model, (x_val, y_val), method=method)
    layer = calibrated.layers[-1]
    assert layer.compute_dtype == "float32" and all(v.dtype == "float32" for v in layer.variables)
    own = model.predict(x_test, verbose=0)
    assert keras.backend.standardize_dtype(own.dtype) == policy.split("_")[1]  # the model itself is mixed
    got = calibrated.predict(x_test, verbose=0)
    assert got.dtype == np.float32
    own = np.asarray(own, np.float64)
    if method == "temperature":
        assert float(keras.ops.convert_to_numpy(layer.temperature)) > 1.5  # far from 1: the scaling rounds
        np.testing.assert_array_equal(got.argmax(axis=1), own.argmax(axis=1))  # exactly: T > 0 keeps the order
    else:
        want = _float64_map(method, layer, own)
        np.testing.assert_array_equal(got.argmax(axis=1), want.argmax(axis=1))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_layers_are_float32_under_any_policy_unless_told(policy, method):
    layer_class = LAYERS[method]
    assert layer_class().compute_dtype == "float32" and layer_class().variable_dtype == "float32"
    assert layer_class(dtype=None).compute_dtype == "float32"
    assert layer_class(dtype=policy).compute_dtype == policy.split("_")[1]  # the user's explicit choice stands


@pytest.mark.parametrize("method", METHODS)
def test_layer_casts_its_input(rng, policy, method):
    layer = LAYERS[method]()
    logits = keras.ops.cast(4.0 * rng.normal(size=(16, 5)), policy.split("_")[1])
    out = layer(logits)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"


def test_keras_file_keeps_the_island(rng, tmp_path, policy):
    model = _overconfident_model(rng)
    x_val, y_val = _data(rng, model, 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calibrated = calibrate(model, (x_val, y_val))
    calibrated.save(tmp_path / "calibrated.keras")
    loaded = keras.saving.load_model(tmp_path / "calibrated.keras")
    assert isinstance(loaded.layers[-1], keras_ils.TemperatureScaling) and loaded.layers[-1].compute_dtype == "float32"
    np.testing.assert_array_equal(loaded.predict(x_val, verbose=0), calibrated.predict(x_val, verbose=0))
