"""What must hold on every Keras backend: the loss, metrics, layers, fits, `calibrate` and `evaluate`.

Backend-independent: the backend is whatever `KERAS_BACKEND` fixed at import,
and every expected number comes from numpy (`reference`, scipy) in the test.
The default run checks TensorFlow; CI runs this file again under JAX
(`.ci/run`: `KERAS_BACKEND=jax python -m pytest tests/test_backends.py`);
`KERAS_BACKEND=torch` runs it under torch. Keras' JAX steps are always
compiled (`jax.jit`), torch's run eagerly by default, TensorFlow's are
`tf.function`s (XLA only on accelerators), so the label checks are
exercised in each backend's own compiled path (where they count, and a
metric raises at the end of the epoch: `keras_ils._bad_input`).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize_scalar

import keras_ils
from keras_ils import metrics

import reference

K = 3
N = 120
METHODS = ("none", "ls", "ils1", "ils2", "ils")
RANGE_ERROR = r"Invalid value for argument `labels`\. Expected class indices in \[0, 3\)"


@pytest.fixture
def data(rng):
    """`(x, labels, teacher logits, kernel, bias)`: a linear classifier's logits are `x @ kernel + bias`."""
    labels = rng.integers(0, K, N)
    x = (rng.normal(size=(N, 4)) + np.eye(4)[labels]).astype("float32")
    kernel, bias = rng.normal(size=(4, K)).astype("float32"), rng.normal(size=K).astype("float32")
    return x, labels, rng.normal(size=(N, K)).astype("float32"), kernel, bias


def _linear(kernel, bias):
    model = keras.Sequential([keras.Input((kernel.shape[0],)), keras.layers.Dense(kernel.shape[1])])
    model.set_weights([kernel, bias])
    return model


def _identity(k=K):
    """A model whose outputs are its inputs: what a compiled step computes on known logits."""
    inputs = keras.Input((k,))
    return keras.Model(inputs, keras.layers.Identity()(inputs))


def _generator(x, y, batch=32):
    for start in range(0, len(x), batch):
        yield x[start : start + batch], y[start : start + batch]


class _Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch=32):
        super().__init__()
        self.x, self.y, self.batch = x, y, batch

    @property
    def num_batches(self):
        return -(-len(self.x) // self.batch)

    def __getitem__(self, index):
        rows = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[rows], self.y[rows]


def _sources(x, y):
    """Every input form `calibrate` and `evaluate` read, by name."""
    return {
        "arrays": lambda: (x, y),
        "generator": lambda: _generator(x, y),
        "pydataset": lambda: _Batches(x, y),
        "tf.data": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(32),
    }


class TestLoss:
    @pytest.mark.parametrize("method", METHODS)
    def test_per_example_values(self, data, method):
        _, labels, teacher, *_ = data
        logits = teacher[::-1].copy()
        loss = keras_ils.ILSLoss(method=method, epsilon=0.1, p1=0.9, p2=1.5, temperature=2.0, reduction=None)
        expected = reference.cross_entropy(
            reference.ils_targets(labels, teacher, method, 0.1, 0.9, 1.5, 2.0, num_classes=K), logits
        )
        y_true = keras_ils.teacher_targets(labels, teacher) if method != "none" else labels
        got = keras.ops.convert_to_numpy(loss(y_true, logits))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    def test_compiled_step_equals_reference(self, data):
        """`evaluate` runs the backend's compiled test step: loss and every metric against numpy."""
        _, labels, teacher, *_ = data
        logits = teacher[::-1].copy()
        model = _identity()
        names = ("ece", "cwece", "nll", "brier")
        model.compile(
            loss=keras_ils.ILSLoss(method="ils", p1=0.9, p2=1.5, temperature=2.0),
            metrics=[
                metrics.ExpectedCalibrationError(from_logits=True, name="ece"),
                metrics.ClasswiseExpectedCalibrationError(K, from_logits=True, name="cwece"),
                metrics.NegativeLogLikelihood(from_logits=True, name="nll"),
                metrics.BrierScore(from_logits=True, name="brier"),
            ],
        )
        got = model.evaluate(
            logits, keras_ils.teacher_targets(labels, teacher), batch_size=32, return_dict=True, verbose=0
        )
        probs = reference.softmax(logits)
        targets = reference.ils_targets(labels, teacher, "ils", p1=0.9, p2=1.5, temperature=2.0)
        expected = {
            "loss": reference.cross_entropy(targets, logits).mean(),
            "ece": reference.ece(probs, labels),
            "cwece": reference.classwise_ece(probs, labels),
            "nll": reference.nll(probs, labels),
            "brier": reference.brier(probs, labels),
        }
        for name in ("loss", *names):
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


class TestLabelChecks:
    """An out-of-range label is an error on every backend, eager and in the compiled step."""

    def test_eager_loss_and_metric(self):
        logits = np.zeros((2, K), "float32")
        with pytest.raises(ValueError, match=RANGE_ERROR):
            keras_ils.ILSLoss()(np.array([0, 3]), logits)
        with pytest.raises(ValueError, match=RANGE_ERROR):
            metrics.ExpectedCalibrationError(from_logits=True).update_state(np.array([-1, 0]), logits)

    def test_wide_integers_are_checked_before_any_cast(self):
        # JAX without x64 makes int32 of int64 values: 2**32 + 1 must not pass as class 1
        with pytest.raises(ValueError, match=RANGE_ERROR):
            keras_ils.ILSLoss()(np.array([2**32 + 1]), np.zeros((1, K), "float32"))

    @pytest.mark.parametrize("labels", [[0, 3], [-1, 0]])
    def test_in_the_compiled_train_step(self, labels):
        """Counted in the step (no callback, no conditional), raised from the metric's state when the epoch ends;
        the loss alone is NaN."""
        model = _identity()
        model.compile("sgd", loss=keras_ils.ILSLoss())
        if keras.backend.backend() != "torch":  # torch's step runs eagerly: the loss itself raises
            assert np.isnan(model.fit(np.zeros((2, K), "float32"), np.array(labels), verbose=0).history["loss"][0])
        model.compile("sgd", loss=keras_ils.ILSLoss(), metrics=[metrics.InputCheck()])
        with pytest.raises(ValueError, match=RANGE_ERROR):
            model.fit(np.zeros((2, K), "float32"), np.array(labels), verbose=0)

    def test_fractional_labels_in_the_compiled_step(self):
        model = _identity()
        model.compile("sgd", loss=keras_ils.ILSLoss(), metrics=[metrics.ExpectedCalibrationError(from_logits=True)])
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            model.fit(np.zeros((2, K), "float32"), np.array([0.0, 1.5]), verbose=0)

    def test_logits_as_probabilities_in_the_compiled_step(self):
        model = _identity()
        model.compile(loss=keras_ils.ILSLoss(), metrics=[metrics.ExpectedCalibrationError()])
        with pytest.raises(ValueError, match="Pass `from_logits=True` for logits"):
            model.evaluate(np.full((2, K), 3.0, "float32"), np.array([0, 1]), verbose=0)

    def test_passing_labels_leave_the_step_unchanged(self):
        model = _identity()
        model.compile(loss=keras_ils.ILSLoss(), metrics=[metrics.ExpectedCalibrationError(from_logits=True)])
        loss = model.evaluate(np.zeros((2, K), "float32"), np.array([0, 2]), verbose=0, return_dict=True)["loss"]
        np.testing.assert_allclose(loss, np.log(K), rtol=1e-6)

    def test_calibrate_and_evaluate(self, data):
        x, labels, _, kernel, bias = data
        bad = np.where(labels == 0, K, labels)
        for source in _sources(x, bad).values():
            with pytest.raises(ValueError, match=RANGE_ERROR):
                keras_ils.calibrate(_linear(kernel, bias), source())
            with pytest.raises(ValueError, match=RANGE_ERROR):
                keras_ils.evaluate(_linear(kernel, bias), source())


@pytest.mark.parametrize("name", ["temperature", "vector", "matrix", "dirichlet"])
def test_calibration_layer_call_equals_numpy(data, rng, name):
    z = data[2].astype(np.float64)
    scale, kernel, bias = rng.uniform(0.5, 2.0, K), rng.normal(size=(K, K)), rng.normal(size=K)
    layer, weights, expected = {
        "temperature": (keras_ils.TemperatureScaling(2.0), None, z / 2.0),
        "vector": (keras_ils.VectorScaling(), [scale, bias], z * scale + bias),
        "matrix": (keras_ils.MatrixScaling(), [kernel, bias], z @ kernel + bias),
        "dirichlet": (keras_ils.DirichletCalibration(), [kernel, bias], np.log(reference.softmax(z)) @ kernel + bias),
    }[name]
    layer.build((None, K))
    if weights is not None:
        layer.set_weights(weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(data[2])), expected, rtol=1e-5, atol=1e-5)


def test_a_student_with_every_layer_trains_and_saves(data, tmp_path):
    """`ILSLoss` on teacher targets and a metric in `fit`, the four layers inside the model, a `.keras` round trip."""
    x, labels, teacher, *_ = data
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(K)(inputs)
    for layer in (
        keras_ils.VectorScaling(),
        keras_ils.MatrixScaling(),
        keras_ils.DirichletCalibration(),
        keras_ils.TemperatureScaling(),
    ):
        outputs = layer(outputs)
    model = keras.Model(inputs, outputs)
    model.compile(
        "adam", loss=keras_ils.ILSLoss(method="ils"), metrics=[metrics.ExpectedCalibrationError(from_logits=True)]
    )
    y = keras_ils.teacher_targets(labels, teacher)
    history = model.fit(x, y, epochs=4, batch_size=32, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0]
    path = tmp_path / "student.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    assert loaded.loss.get_config() == model.loss.get_config()


def _scipy_temperature(logits, labels):
    """The maximum-likelihood T by scipy on the numpy NLL (log T searched)."""
    logits = np.asarray(logits, np.float64)

    def nll(log_t):
        return reference.nll(reference.softmax(logits / np.exp(log_t)), labels)

    return float(np.exp(minimize_scalar(nll, bounds=(-3, 3), method="bounded", options={"xatol": 1e-10}).x))


class TestFitsAndCalibrate:
    def test_fits_read_backend_tensors(self, data):
        _, labels, logits, *_ = data
        logits = 3.0 * logits + 2.0 * np.eye(K)[labels]
        tensor_logits, tensor_labels = keras.ops.convert_to_tensor(logits), keras.ops.convert_to_tensor(labels)
        _, fit = keras_ils.fit_calibrator("temperature", tensor_logits, tensor_labels, estimator="mle", return_fit=True)
        temperature = fit.temperature
        np.testing.assert_allclose(temperature, _scipy_temperature(logits, labels), rtol=1e-5)
        fitted = keras_ils.fit_calibrator("vector", tensor_logits, tensor_labels)
        np.testing.assert_allclose(
            [keras.ops.convert_to_numpy(w) for w in fitted.get_weights()],
            keras_ils.fit_calibrator("vector", logits, labels).get_weights(),
            rtol=1e-6,
        )

    @pytest.mark.parametrize("source", ["arrays", "generator", "pydataset", "tf.data"])
    def test_calibrate_every_input(self, data, source):
        x, labels, _, kernel, bias = data
        logits = x @ kernel + bias
        calibrated = keras_ils.calibrate(_linear(kernel, bias), _sources(x, labels)[source](), estimator="mle")
        temperature = float(keras.ops.convert_to_numpy(calibrated.layers[-1].temperature))
        np.testing.assert_allclose(temperature, _scipy_temperature(logits, labels), rtol=1e-5)
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), logits / temperature, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("method", ["vector", "matrix", "dirichlet"])
    def test_calibrate_with_a_calibrator(self, data, method):
        x, labels, _, kernel, bias = data
        calibrated = keras_ils.calibrate(_linear(kernel, bias), _generator(x, labels), method=method)
        expected = keras_ils.fit_calibrator(method, x @ kernel + bias, labels)
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), expected(x @ kernel + bias), rtol=1e-4, atol=1e-4)

    def test_teacher_logits(self, data):
        x, labels, _, kernel, bias = data
        computed = keras_ils.compute_teacher_logits(_linear(kernel, bias), (x, labels), temperature=2.0)
        np.testing.assert_allclose(computed.logits, (x @ kernel + bias) / 2.0, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(computed.labels, labels)


class TestEvaluate:
    @pytest.mark.parametrize("source", ["arrays", "generator", "pydataset", "tf.data"])
    def test_every_input_equals_reference(self, data, source):
        x, labels, _, kernel, bias = data
        probs = reference.softmax(x @ kernel + bias)
        got = keras_ils.evaluate(_linear(kernel, bias), _sources(x, labels)[source]())["all"]
        expected = {
            "accuracy": np.mean(probs.argmax(1) == labels),
            "nll": reference.nll(probs, labels),
            "ece": reference.ece(probs, labels),
            "cwece": reference.classwise_ece(probs, labels),
            "brier": reference.brier(probs, labels),
            "adaptive_ece": reference.adaptive_ece(probs, labels),
        }
        assert got["count"] == N
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)

    def test_infinite_or_unreadable_data_is_refused(self, data):
        x, labels, _, kernel, bias = data

        class Endless(_Batches):
            num_batches = None

        with pytest.raises(ValueError, match="must be finite"):
            keras_ils.evaluate(_linear(kernel, bias), Endless(x, labels))
        with pytest.raises(TypeError, match="Argument `data` must be"):
            keras_ils.evaluate(_linear(kernel, bias), x)
        with pytest.raises(ValueError, match="must yield \\(x, y\\)"):
            keras_ils.evaluate(_linear(kernel, bias), iter([x]))
