"""Keras' compiled steps with the package's losses, metrics and layers: no host callback, no conditional on device data,
and bad input still refused (issue 37 item 1).

The structure is tested, not the time: the jaxpr of Keras' JAX train/test/predict steps, and the graph of TensorFlow's
(`tf.function` of Keras' own `train_step`), hold no callback, conditional or assertion. Before issue 37 both held
them (`cond` + `debug_callback` under JAX, `Assert` + `If` under TensorFlow), one per check. CI runs this file under
TensorFlow and again under JAX (`.ci/run`); torch's Keras steps run eagerly by default, where checks raise at once.

Bad input in `fit` (every kind the package refuses) ends the epoch with the eager check's `ValueError`, read from a
metric's state (`keras_ils._bad_input`); a model compiled with a package loss and no package metric gets a NaN loss
and NaN weights, never a silent training.
"""

import keras
import numpy as np
import pytest

import keras_ils
from keras_ils import baselines, conformal, distillation, metrics
from keras_ils.calibration import LAYERS

K = 3
BACKEND = keras.backend.backend()
COMPILED = BACKEND != "torch"  # Keras' torch steps run eagerly by default: there a check raises at once
LOSSES = {
    "ils": lambda: keras_ils.ILSLoss(method="ils"),
    "ls": lambda: keras_ils.ILSLoss(method="ls"),
    "focal": lambda: keras_ils.FocalLoss(),
    "mbls": lambda: keras_ils.MarginLabelSmoothingLoss(),
    "mmce": lambda: keras_ils.MMCELoss(),
    "mdca": lambda: keras_ils.MDCALoss(),
    "ols": lambda: keras_ils.OnlineLabelSmoothing(K),
    "bootstrap_soft": lambda: baselines.BootstrapSoftLoss(),
    "beta_smoothing": lambda: baselines.BetaSmoothingLoss(),
    "distillation": lambda: distillation.DistillationCrossEntropy(),
    "ils_probabilities": lambda: keras_ils.ILSLoss(method="ils", from_logits=False),
}
FORBIDDEN_PRIMITIVES = {"cond", "while"}  # and any "*callback*"; a `scan` has a fixed trip count (ops.searchsorted)
FORBIDDEN_OPS = {"Assert", "PyFunc", "PyFuncStateless", "EagerPyFunc", "If", "StatelessIf", "Case", "While"}

pytestmark = pytest.mark.filterwarnings("ignore::keras_ils.losses.OnlineLabelSmoothingWarning")


def _every_metric(from_logits):
    """The package's metrics for the model's two outputs: its scores, and prediction sets made from them."""
    scores = [
        metrics.InputCheck(from_logits=from_logits),
        *metrics.calibration_metrics(K, from_logits=from_logits),
        metrics.ClassConditionalECE(K, from_logits=from_logits),
    ]
    sets = [conformal.SetCoverage(), conformal.SizeStratifiedCoverage(K), conformal.ClassConditionalCoverage(K)]
    return {"scores": scores, "sets": sets}


class _Probabilities(keras.layers.Layer):
    """A distribution that no softmax op computes: the probability checks stay in the step."""

    def call(self, z):
        return keras.ops.exp(keras.ops.log_softmax(z, axis=-1))


class _Masks(keras.layers.Layer):
    """0/1 prediction sets from scores (a set metric's input), with no gradient."""

    def call(self, z):
        return keras.ops.stop_gradient(keras.ops.cast(z > 0.5 * keras.ops.max(z, axis=-1, keepdims=True), z.dtype))


def _compiled(name, y_width=None):
    """A model compiled with loss `name` and every package metric, built by one step; `(model, x, y)`."""
    rng = np.random.default_rng(0)
    from_logits = name != "ils_probabilities"
    inputs = keras.Input((4,))
    scores = keras.layers.Dense(K)(inputs)
    outputs = {"scores": scores if from_logits else _Probabilities()(scores), "sets": _Masks()(scores)}
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss={"scores": LOSSES[name]()}, metrics=_every_metric(from_logits))
    x = rng.normal(size=(8, 4)).astype("float32")
    labels = rng.integers(0, K, 8)
    y = keras.ops.convert_to_numpy(keras_ils.teacher_targets(labels, rng.normal(size=(8, K)))) if y_width else labels
    y = {"scores": y.astype("float32"), "sets": labels.astype("float32")}
    model.fit(x, y, epochs=1, verbose=0)
    return model, x, y


def _primitives(jaxpr, found):
    """Every primitive of `jaxpr`, those of its sub-jaxprs (jit, scan, custom_jvp ...) included."""
    for equation in jaxpr.eqns:
        found.add(equation.primitive.name)
        for parameter in equation.params.values():
            for sub in parameter if isinstance(parameter, (list, tuple)) else [parameter]:
                inner = getattr(getattr(sub, "jaxpr", sub), "jaxpr", getattr(sub, "jaxpr", sub))
                if hasattr(inner, "eqns"):
                    _primitives(inner, found)
    return found


def _jax_step_primitives(model, step, data):
    import jax

    state = [[v.value for v in variables] for variables in (model.trainable_variables, model.non_trainable_variables)]
    if step == "train":
        state += [[v.value for v in model.optimizer.variables], [v.value for v in model.metrics_variables]]
    elif step == "test":
        state += [[v.value for v in model.metrics_variables]]
    function = {"train": model.train_step, "test": model.test_step, "predict": model.predict_step}[step]
    return _primitives(jax.make_jaxpr(function)(tuple(state), data).jaxpr, set())


def _forbidden_primitives(found):
    return sorted(p for p in found if p in FORBIDDEN_PRIMITIVES or "callback" in p)


def _tensorflow_op_types(function, data):
    """The op types of `tf.function(function)`'s graph for `data`, its library's functions included."""
    import tensorflow as tf

    graph_def = tf.function(function).get_concrete_function(data).graph.as_graph_def()
    nodes = list(graph_def.node) + [node for f in graph_def.library.function for node in f.node_def]
    return {node.op for node in nodes}


@pytest.mark.skipif(BACKEND != "jax", reason="the jaxpr of Keras' JAX steps")
class TestJaxSteps:
    @pytest.mark.parametrize("name", sorted(LOSSES))
    def test_train_and_test_steps_hold_no_callback_and_no_cond(self, name):
        model, x, y = _compiled(name, y_width=2 * K if name in ("ils", "distillation") else None)
        for step in ("train", "test"):
            found = _jax_step_primitives(model, step, (x, y))
            assert not _forbidden_primitives(found), (step, _forbidden_primitives(found))
            assert "reduce_sum" in found and "dot_general" in found  # the walk reached the loss and the metrics

    @pytest.mark.parametrize("name", sorted(LAYERS))
    def test_a_calibrated_model_predicts_with_no_callback_and_no_cond(self, name):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K), LAYERS[name]()])
        x = np.zeros((8, 4), "float32")
        model.predict(x, verbose=0)
        assert not _forbidden_primitives(_jax_step_primitives(model, "predict", (x,)))

    def test_the_walk_finds_a_cond_where_there_is_one(self):
        """The test's own check: a jaxpr with a `lax.cond` around a callback is caught."""
        import jax

        def checked(v):
            jax.lax.cond(v.sum() > 0, lambda: jax.debug.callback(print, v), lambda: None)
            return v

        assert _forbidden_primitives(_primitives(jax.make_jaxpr(checked)(np.ones(2)).jaxpr, set())) == [
            "cond",
            "debug_callback",
        ]


@pytest.mark.tensorflow_only
class TestTensorFlowSteps:
    @pytest.mark.parametrize("name", ["ils", "ils_probabilities", "mdca", "ols"])
    def test_train_and_test_steps_hold_no_assertion_and_no_branch(self, name):
        import tensorflow as tf

        model, x, y = _compiled(name)
        data = (tf.constant(x), {key: tf.constant(value) for key, value in y.items()})
        for function in (model.train_step, model.test_step):
            found = _tensorflow_op_types(function, data)
            assert not found & FORBIDDEN_OPS, sorted(found & FORBIDDEN_OPS)
            assert "AssignVariableOp" in found  # the metrics' state, and the walk reached it

    def test_the_walk_finds_an_assertion_where_there_is_one(self):
        import tensorflow as tf

        def checked(v):
            tf.debugging.assert_non_negative(v)
            return v

        assert "Assert" in _tensorflow_op_types(checked, tf.constant([1.0]))

    @pytest.mark.parametrize("name", sorted(LAYERS))
    def test_a_calibrated_model_predicts_with_no_assertion_and_no_branch(self, name):
        import tensorflow as tf

        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K), LAYERS[name]()])
        model.predict(np.zeros((8, 4), "float32"), verbose=0)
        found = _tensorflow_op_types(model.predict_step, (tf.zeros((8, 4)),))
        assert not found & FORBIDDEN_OPS, sorted(found & FORBIDDEN_OPS)


def _fit(y, loss=None, fit_metrics=(), validation=None, head=(), jit_compile="auto"):
    """`model.fit` on 32 examples in batches of 8: the history, or the error it raised."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K), *head])
    model.compile(optimizer="sgd", loss=loss or keras_ils.ILSLoss(), metrics=list(fit_metrics), jit_compile=jit_compile)
    x = np.random.default_rng(1).normal(size=(len(y), 4)).astype("float32")
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_data=validation)
    return model, history.history


LABELS = np.random.default_rng(2).integers(0, K, 32)
RANGE = r"Invalid value for argument `labels`\. Expected class indices in \[0, 3\)\."


def _bad(kind):
    """`y` holding one kind of bad input, the start of the error it must raise, and the count a compiled step
    reports (an eager step, torch's, raises at the first bad batch with the values instead)."""
    if kind == "out of range":
        return np.where(np.arange(32) % 16 == 3, K, LABELS), RANGE, "Received: 2 such labels"
    if kind == "fractional":
        y = np.where(np.arange(32) == 5, 1.5, LABELS).astype("float32")
        return y, "float labels must be whole numbers", "Received: 1 such labels"
    if kind == "negative":
        return np.where(np.arange(32) == 0, -1, LABELS), RANGE, "Received: 1 such labels"
    wide = np.eye(2 * K, dtype="float32")[np.where(np.arange(32) == 7, K + 1, LABELS)]  # a 6-class one-hot
    return wide, "its first 3 columns must be one-hot", "Received: 1 such rows"


def _raises(error, count, function, *args, **kwargs):
    with pytest.raises(ValueError, match=error) as info:
        function(*args, **kwargs)
    assert (count in str(info.value)) == COMPILED  # an eager step's error shows the values instead


class TestBadInputInFit:
    """Every kind of bad input the package refuses, in Keras' own compiled `fit` on this backend."""

    @pytest.mark.parametrize("kind", ["out of range", "fractional", "negative", "not one-hot"])
    @pytest.mark.parametrize("reader", ["InputCheck", "ece"])
    def test_labels_end_the_epoch_with_the_error(self, kind, reader):
        y, error, count = _bad(kind)
        fit_metrics = [metrics.InputCheck() if reader == "InputCheck" else metrics.ExpectedCalibrationError(15, True)]
        _raises(error, count, _fit, y, fit_metrics=fit_metrics)

    def test_logits_declared_as_probabilities(self):
        loss = keras_ils.FocalLoss(from_logits=False)
        error = "Pass `from_logits=True` for logits"
        _raises(error, "such rows", _fit, LABELS, loss, [metrics.InputCheck(from_logits=False)])
        with pytest.raises(ValueError, match="Pass `from_logits=True` for logits"):
            _fit(LABELS, keras_ils.ILSLoss(), [metrics.BrierScore()])  # the metric's own declaration
        _, history = _fit(LABELS, loss, [metrics.InputCheck(from_logits=False)], head=[_Probabilities()])
        assert np.isfinite(history["loss"]).all() and history["bad_input"] == [0.0, 0.0]

    def test_a_metric_of_another_width(self):
        with pytest.raises(ValueError, match="was built for num_classes=4 but `y_pred` has 3 classes"):
            _fit(LABELS, fit_metrics=[metrics.ClasswiseExpectedCalibrationError(num_classes=4)])

    def test_bad_validation_labels_end_the_epoch_too(self):
        x = np.zeros((16, 4), "float32")
        validation = (x, np.where(np.arange(16) < 2, 5, 0))
        _raises(
            RANGE, "Received: 2 such labels", _fit, LABELS, fit_metrics=[metrics.InputCheck()], validation=validation
        )

    def test_good_input_trains_and_counts_nothing(self):
        _, history = _fit(LABELS, fit_metrics=[metrics.InputCheck(), *metrics.calibration_metrics(K, 15, True)])
        assert history["bad_input"] == [0.0, 0.0] and np.isfinite(history["loss"]).all()

    @pytest.mark.parametrize("kind", ["out of range", "fractional", "not one-hot"])
    def test_the_loss_alone_is_nan_and_trains_nothing_in_silence(self, kind):
        """No metric to carry a count: the bad batch's loss and gradients are NaN, and so the weights."""
        if not COMPILED:
            with pytest.raises(ValueError, match=_bad(kind)[1]):
                _fit(_bad(kind)[0])
            return
        model, history = _fit(_bad(kind)[0])
        assert np.isnan(history["loss"]).all()
        assert all(np.isnan(w).all() for w in model.get_weights())

    def test_evaluate_raises_at_its_end_and_the_next_evaluate_starts_clean(self):
        model, _ = _fit(LABELS, fit_metrics=[metrics.InputCheck()])
        x = np.zeros((16, 4), "float32")
        _raises(RANGE, "Received: 1 such labels", model.evaluate, x, np.where(np.arange(16) == 4, 7, 0), verbose=0)
        assert model.evaluate(x, np.zeros(16), verbose=0, return_dict=True)["bad_input"] == 0.0

    @pytest.mark.tensorflow_only
    def test_under_xla(self):
        """Keras' TensorFlow default on a GPU: XLA, which dropped the old assertions; the count is state, kept."""
        y, error, count = _bad("out of range")
        _raises(error, count, _fit, y, fit_metrics=[metrics.InputCheck()], jit_compile=True)


def test_an_eager_metric_call_raises_at_once():
    metric = metrics.InputCheck()
    with pytest.raises(ValueError, match=r"Received: labels containing \[3\]"):
        metric.update_state(np.array([0, 3]), np.zeros((2, K), "float32"))
    assert float(metric.result()) == 0.0  # nothing counted: the error was the delivery


def test_input_check_serializes():
    metric = metrics.InputCheck(from_logits=False, name="checks")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert isinstance(restored, metrics.InputCheck) and restored.get_config() == metric.get_config()


_UNCHECKED_PROBE = """
import warnings
import keras, numpy as np
import keras_ils
x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
y = np.arange(32) % 3
for metrics in (list, lambda: [keras_ils.metrics.InputCheck()]):  # no package metric before the first model's fit
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("adam", keras_ils.ILSLoss(method="ls"), metrics=metrics())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, epochs=1, verbose=0)
    print(sum(issubclass(w.category, keras_ils.losses.UncheckedLossWarning) for w in caught) > 0)
"""


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_package_loss_without_a_package_metric_warns_that_it_cannot_raise(backend):
    import os
    import subprocess
    import sys

    environment = {**os.environ, "KERAS_BACKEND": backend}
    result = subprocess.run(
        [sys.executable, "-c", _UNCHECKED_PROBE], capture_output=True, text=True, env=environment, timeout=300
    )
    assert result.stdout.split() == ["True", "False"], result.stderr[-2000:]
