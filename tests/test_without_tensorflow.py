"""The core without TensorFlow (issue 37 item 3): run with `KERAS_ILS_BLOCK_TENSORFLOW=1 KERAS_BACKEND=jax` (or torch).

Under that setting `conftest.py` refuses `import tensorflow` for the whole run, as on a machine where TensorFlow is not
installed (the accelerator machines the package is measured on hold JAX or torch only). `import keras_ils` and the
losses, `ils_targets`/`teacher_targets`, the metrics, the calibration layers, `conformal`, `evaluation`, `plots` and
the distillation losses and the post-hoc fits (`fit_calibrator`, `calibrate`: their passes are `keras.ops`) must work
there, on values checked against numpy. CI runs this file so (`.ci/run`); in any other run it is skipped
(`tests/calibration/test_fits_without_tensorflow.py` checks every fit's values in a subprocess in every run).
"""

import os
import sys

import keras
import numpy as np
import pytest

import reference

pytestmark = pytest.mark.skipif(
    os.environ.get("KERAS_ILS_BLOCK_TENSORFLOW") != "1", reason="run with KERAS_ILS_BLOCK_TENSORFLOW=1 (CI's pass)"
)

K = 3


@pytest.fixture(scope="module")
def data():
    """`(x, labels, teacher logits, model)`: a linear model, trained for one epoch, on 96 separable-ish examples."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, K, 96)
    x = (rng.normal(size=(96, 4)) + 2 * np.eye(4)[labels]).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K)])
    model.compile(optimizer="adam", loss=_keras_ils().ILSLoss())
    model.fit(x, labels, epochs=1, verbose=0)
    return x, labels, rng.normal(size=(96, K)).astype("float32"), model


def _keras_ils():
    import keras_ils

    return keras_ils


def _np(value):
    return keras.ops.convert_to_numpy(value)


def test_tensorflow_cannot_be_imported():
    import importlib.util

    with pytest.raises(ModuleNotFoundError, match="No module named 'tensorflow'"):
        import tensorflow  # noqa: F401
    assert "tensorflow" not in sys.modules and importlib.util.find_spec("tensorflow") is None


def test_import_keras_ils_and_the_tf_data_parts_fail_only_on_use():
    keras_ils = _keras_ils()
    assert keras.backend.backend() != "tensorflow" and "tensorflow" not in sys.modules
    for name in ("with_teacher_targets", "with_hard_labels", "compute_teacher_logits", "TeacherLogits"):
        with pytest.raises(ImportError, match="tensorflow"):
            getattr(keras_ils, name)


@pytest.mark.parametrize("method", ["none", "ls", "ils1", "ils2", "ils"])
def test_targets_and_the_ils_loss_equal_numpy(data, method):
    keras_ils = _keras_ils()
    x, labels, teacher, model = data
    hyperparameters = dict(epsilon=0.1, p1=0.9, p2=1.0, temperature=2.0)
    want = reference.ils_targets(labels, teacher, method, **hyperparameters)
    got = keras_ils.ils_targets(labels, teacher, method=method, **hyperparameters)
    np.testing.assert_allclose(_np(got), want, rtol=1e-5, atol=1e-7)
    logits = model.predict(x, verbose=0)
    loss = keras_ils.ILSLoss(method=method, **hyperparameters)(keras_ils.teacher_targets(labels, teacher), logits)
    np.testing.assert_allclose(float(loss), reference.cross_entropy(want, logits).mean(), rtol=1e-5)


def test_every_loss_trains_under_fit_with_every_metric(data):
    from keras_ils import baselines, distillation, metrics

    keras_ils = _keras_ils()
    x, labels, teacher, _ = data
    losses = [
        keras_ils.ILSLoss(method="ils"),
        keras_ils.FocalLoss(),
        keras_ils.MarginLabelSmoothingLoss(),
        keras_ils.MMCELoss(),
        keras_ils.MDCALoss(),
        baselines.BootstrapSoftLoss(),
        distillation.DistillationCrossEntropy(),
    ]
    y = _np(keras_ils.teacher_targets(labels, teacher))
    for loss in losses:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K)])
        model.compile(
            optimizer="sgd", loss=loss, metrics=[metrics.InputCheck(), *metrics.calibration_metrics(K, 15, True)]
        )
        history = model.fit(x, y, epochs=1, verbose=0, validation_data=(x, labels)).history
        assert np.isfinite(history["loss"]).all() and history["bad_input"] == [0.0], type(loss).__name__


def test_bad_labels_in_fit_raise_the_checks_error():
    from keras_ils import metrics

    keras_ils = _keras_ils()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K)])
    model.compile(optimizer="sgd", loss=keras_ils.ILSLoss(), metrics=[metrics.InputCheck()])
    with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)"):
        model.fit(np.zeros((8, 4), "float32"), np.array([0, 1, 2, 3, 0, 1, 2, 0]), verbose=0)


def test_metrics_equal_numpy(data):
    from keras_ils import metrics

    x, labels, _, model = data
    probabilities = reference.softmax(model.predict(x, verbose=0))
    for metric, want in (
        (metrics.ExpectedCalibrationError(), reference.ece(probabilities, labels)),
        (metrics.ClasswiseExpectedCalibrationError(K), reference.classwise_ece(probabilities, labels)),
        (metrics.NegativeLogLikelihood(), reference.nll(probabilities, labels)),
        (metrics.BrierScore(), reference.brier(probabilities, labels)),
    ):
        metric.update_state(labels, probabilities.astype("float32"))
        np.testing.assert_allclose(float(metric.result()), want, rtol=1e-4, atol=1e-6, err_msg=metric.name)


def test_calibration_layers_predict_and_round_trip(data, tmp_path):
    from keras_ils import calibration

    x, _, _, model = data
    logits = model.predict(x, verbose=0).astype(np.float64)
    layer = calibration.TemperatureScaling(2.0)
    np.testing.assert_allclose(_np(layer(logits.astype("float32"))), logits / 2.0, rtol=1e-6)
    for name, cls in calibration.LAYERS.items():
        calibrated = keras.Sequential([keras.Input((4,)), model.layers[0], cls()])
        path = tmp_path / f"{name}.keras"
        calibrated.save(path)
        loaded = keras.saving.load_model(path)
        np.testing.assert_allclose(loaded.predict(x, verbose=0), calibrated.predict(x, verbose=0), rtol=1e-6)


def test_conformal_sets_and_their_metrics(data):
    from keras_ils import conformal

    keras_ils = _keras_ils()
    x, labels, _, model = data
    conformalized = keras_ils.conformalize(model, (x, labels), alpha=0.2, method="lac")
    probabilities = reference.softmax(model.predict(x, verbose=0))
    scores = np.sort(1.0 - probabilities[np.arange(len(labels)), labels])  # LAC's score
    quantile = scores[int(np.ceil((len(labels) + 1) * 0.8)) - 1]  # the ceil((n + 1)(1 - alpha))-th smallest
    x_new = x + np.random.default_rng(3).normal(scale=0.1, size=x.shape).astype("float32")
    sets = _np(conformalized(x_new))
    margin = quantile - (1.0 - reference.softmax(model.predict(x_new, verbose=0)))
    want = margin >= 0
    assert np.all((sets == want) | (np.abs(margin) < 1e-5)) and 0 < sets.sum() < sets.size
    coverage = conformal.SetCoverage()
    coverage.update_state(labels, sets)  # the new points keep the labels they were drawn around
    assert float(coverage.result()) == pytest.approx(np.mean(sets[np.arange(len(labels)), labels]))


def test_evaluation_and_plots(data, tmp_path):
    from keras_ils import evaluation, plots

    keras_ils = _keras_ils()
    x, labels, _, model = data
    probabilities = reference.softmax(model.predict(x, verbose=0))
    report = keras_ils.evaluate(model, (x, labels))["all"]
    assert report["ece"] == pytest.approx(reference.ece(probabilities, labels), abs=1e-5)
    assert evaluation.scores(probabilities, labels, from_logits=False)["nll"] == pytest.approx(
        reference.nll(probabilities, labels), rel=1e-5
    )
    path = plots.reliability_diagram(probabilities, labels, str(tmp_path / "reliability.png"))
    assert os.path.getsize(path) > 0


def test_distillation_losses(data):
    from keras_ils import distillation

    keras_ils = _keras_ils()
    x, labels, teacher, model = data
    logits = model.predict(x, verbose=0)
    soft = reference.softmax(teacher / 4.0)
    got = distillation.DistillationCrossEntropy(weight=0.7, teacher_temperature=4.0)(
        keras_ils.teacher_targets(labels, teacher), logits
    )
    want = 0.7 * reference.cross_entropy(soft, logits) + 0.3 * reference.cross_entropy(np.eye(K)[labels], logits)
    np.testing.assert_allclose(float(got), want.mean(), rtol=1e-5)
    student = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K)])
    distiller = distillation.distiller(model, student, teacher_temperature=4.0)
    distiller.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert np.isfinite(distiller.fit(x, labels, epochs=1, verbose=0).history["loss"]).all()


def test_online_teacher_trains_and_refuses_bad_labels(data, tmp_path):
    """The teacher inside the step: `ILSLoss` on the teacher targets it builds, against numpy; a `.keras` round trip."""
    keras_ils = _keras_ils()
    x, labels, _, model = data
    student = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K)])
    online = keras_ils.OnlineTeacher(student, model, teacher_temperature=2.0)
    online.compile(optimizer="sgd", loss=keras_ils.ILSLoss(method="ils2", epsilon=0.2))
    got = online.compute_loss(x=x, y=labels, y_pred=online(x), training=True)
    targets = reference.ils_targets(labels, model.predict(x, verbose=0) / 2.0, "ils2", epsilon=0.2)
    np.testing.assert_allclose(float(got), reference.cross_entropy(targets, student.predict(x, verbose=0)).mean(), 1e-5)
    assert online.fit(x, labels, epochs=1, verbose=0).history["bad_labels"] == [0.0]
    online.save(tmp_path / "online.keras")
    loaded = keras.saving.load_model(tmp_path / "online.keras")
    np.testing.assert_allclose(loaded.predict(x, verbose=0), online.predict(x, verbose=0), rtol=1e-6)
    with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)"):
        online.fit(x, np.where(labels == 0, K, labels), epochs=1, verbose=0)


class TestFits:
    """`fit_calibrator` and `calibrate`, every method, with TensorFlow refused."""

    @pytest.mark.parametrize(
        "method",
        ["temperature", "vector", "matrix", "dirichlet", "ensemble_temperature", "histogram", "isotonic", "venn_abers"],
    )
    def test_fit_calibrator(self, data, method):
        keras_ils = _keras_ils()
        x, labels, _, model = data
        layer = keras_ils.fit_calibrator(method, model.predict(x, verbose=0), labels)
        assert layer(model.predict(x, verbose=0)).shape == (len(x), K)

    def test_calibrate(self, data):
        keras_ils = _keras_ils()
        x, labels, _, model = data
        calibrated = keras_ils.calibrate(model, (x, labels))
        assert calibrated.predict(x, verbose=0).shape == (len(x), K)
