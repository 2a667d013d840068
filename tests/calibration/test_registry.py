"""The one table of calibration methods: every layer registered and saved, options checked, calibrate's dispatch."""

import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

import keras_ils
from keras_ils.calibration import (
    LAYERS,
    METHODS,
    CalibratorFit,
    CalibratorFitWarning,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    TemperatureFitWarning,
    VennAbersCalibration,
    calibrate,
    fit_calibrator,
)

CONFIGURED = {  # a layer of each class with every constructor argument away from its default
    "temperature": lambda: LAYERS["temperature"](1.7, from_logits=False, name="t"),
    "vector": lambda: LAYERS["vector"](from_logits=False, name="v"),
    "matrix": lambda: LAYERS["matrix"](off_diagonal_l2=0.5, intercept_l2=0.25, from_logits=False, name="m"),
    "dirichlet": lambda: LAYERS["dirichlet"](off_diagonal_l2=0.5, intercept_l2=0.25, from_logits=False, name="d"),
    "histogram": lambda: HistogramBinning(num_bins=7, floor=0.01, from_logits=False, model_weight=0.1, name="h"),
    "isotonic": lambda: IsotonicCalibration(
        num_thresholds=9, floor=0.02, from_logits=False, model_weight=0.2, name="i"
    ),
    "ensemble_temperature": lambda: EnsembleTemperatureScaling(2.0, (0.5, 0.3, 0.2), from_logits=False, name="e"),
    "venn_abers": lambda: VennAbersCalibration(num_points=3, from_logits=False, name="va"),
}


def _data(rng, n=300):
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.3).astype("int32")
    return x, y


def _model(k=3):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(k)])


def test_the_table():
    assert METHODS == (
        "temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "ensemble_temperature", "venn_abers"
    )  # fmt: skip
    assert tuple(LAYERS) == METHODS and set(CONFIGURED) == set(METHODS)
    assert keras_ils.calibration.LAYERS is LAYERS


@pytest.mark.parametrize("method", METHODS)
def test_config_round_trip_and_registration(method):
    layer = CONFIGURED[method]()
    config = layer.get_config()
    assert type(layer).from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer) and restored.get_config() == config
    assert keras.saving.get_registered_name(type(layer)) == f"keras_ils>{type(layer).__name__}"


@pytest.mark.parametrize("method", METHODS)
def test_calibrate_appends_the_fitted_layer_and_it_saves(rng, tmp_path, method):
    x, y = _data(rng)
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calibrated, fit = calibrate(model, (x, y), method=method, return_fit=True)
        direct = fit_calibrator(method, model.predict(x, verbose=0), y)
    layer = calibrated.layers[-1]
    assert type(layer) is LAYERS[method] and not layer.trainable and fit.num_examples == 300
    for got, want in zip(layer.get_weights(), direct.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    path = tmp_path / "calibrated.keras"
    calibrated.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), calibrated.predict(x, verbose=0), rtol=1e-6, atol=1e-7)
    assert type(loaded.layers[-1]) is LAYERS[method] and loaded.layers[-1].get_config() == layer.get_config()


@pytest.mark.slow
def test_keras_file_loads_after_a_bare_import(rng, tmp_path):
    x, y = _data(rng)
    paths = []
    for method in ("histogram", "isotonic", "ensemble_temperature"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            calibrated = calibrate(_model(), (x, y), method=method)
        calibrated.save(tmp_path / f"{method}.keras")
        np.save(tmp_path / f"{method}.npy", calibrated.predict(x, verbose=0))
        paths.append(method)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, keras, keras_ils\n"
        "d = sys.argv[1]; x = np.load(d + '/x.npy')\n"
        "for m in sys.argv[2:]:\n"
        "    got = keras.saving.load_model(f'{d}/{m}.keras').predict(x, verbose=0)\n"
        "    np.testing.assert_allclose(got, np.load(f'{d}/{m}.npy'), rtol=1e-6, atol=1e-7)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path), *paths], check=True, capture_output=True)


class TestOptions:
    def test_unknown_method(self, rng):
        x, y = _data(rng, n=20)
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            calibrate(_model(), (x, y), method="platt")
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            fit_calibrator("beta", np.zeros((4, 3)), [0, 1, 2, 0])

    @pytest.mark.parametrize(
        "method, options, error, match",
        [
            (
                "histogram",
                dict(estimator="mle"),
                ValueError,
                "option of method='temperature' or 'ensemble_temperature'",
            ),
            ("isotonic", dict(num_bins=10), ValueError, r"option of method='histogram', not of method='isotonic'"),
            ("isotonic", dict(off_diagonal_l2=0.1), ValueError, "are ODIR's"),
            ("temperature", dict(max_iterations=10), ValueError, "option of method='vector' or"),
            ("vector", dict(bins=3), TypeError, "Unknown calibration option `bins`"),
        ],
    )
    def test_options_a_method_does_not_take(self, rng, method, options, error, match):
        with pytest.raises(error, match=match):
            fit_calibrator(method, np.zeros((4, 3)), [0, 1, 2, 0], **options)
        x, y = _data(rng, n=20)
        with pytest.raises(error, match=match):
            calibrate(_model(), (x, y), method=method, **options)

    def test_ensemble_takes_the_temperature_options(self, rng):
        logits, labels = 3.0 * rng.normal(size=(400, 3)), rng.integers(0, 3, 400)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            authors = fit_calibrator("ensemble_temperature", logits, labels, estimator="authors")
            _, scaling = fit_calibrator("temperature", logits, labels, estimator="authors", return_fit=True)
            want = scaling.temperature
        assert authors.initial_temperature == pytest.approx(want, rel=1e-12) and 0.8 <= want <= 3.0

    @pytest.mark.parametrize(
        "method, category", [("temperature", TemperatureFitWarning), ("isotonic", CalibratorFitWarning)]
    )
    def test_warnings_point_at_the_caller(self, rng, method, category):
        labels = rng.integers(0, 3, 12)
        logits = rng.normal(size=(12, 3)) + 6 * np.eye(3)[labels]
        with pytest.warns(category) as record:
            fit_calibrator(method, logits, labels)
        assert record[0].filename == __file__
        model = keras.Sequential([keras.Input((3,)), keras.layers.Identity()])
        with pytest.warns(category) as record:
            calibrate(model, (logits.astype("float32"), labels), method=method)
        assert record[0].filename == __file__


class TestDoor:
    """What `fit_calibrator` (and `calibrate`, through `registry.fit`) checks for every method before fitting."""

    @pytest.mark.parametrize("method", METHODS)
    def test_probabilities_declared_as_logits_are_refused_with_the_fix(self, rng, method):
        probabilities = rng.dirichlet(np.ones(3), size=40)
        with pytest.raises(ValueError, match=r"`outputs`: it was declared as logits.*Pass `from_logits=False`"):
            fit_calibrator(method, probabilities, rng.integers(0, 3, 40))

    @pytest.mark.parametrize("method", METHODS)
    def test_logits_declared_as_probabilities_are_refused_with_the_fix(self, rng, method):
        logits = 3.0 * rng.normal(size=(40, 3))  # the case: a temperature fit read T = 7.99 off such logits
        with pytest.raises(ValueError, match=r"`outputs`: it was declared as probabilities.*Pass `from_logits=True`"):
            fit_calibrator(method, logits, rng.integers(0, 3, 40), from_logits=False)

    def test_from_logits_must_be_a_bool(self):
        with pytest.raises(TypeError, match="`from_logits` must be True or False"):
            fit_calibrator("temperature", np.zeros((4, 3)), [0, 1, 2, 0], from_logits=None)

    @pytest.mark.parametrize("method", METHODS)
    def test_a_class_absent_from_the_validation_set_is_warned_about(self, rng, method):
        labels = rng.integers(0, 2, 300)  # classes 0 and 1 only, of 3
        logits = 2.0 * rng.normal(size=(300, 3)) + 3.0 * np.eye(3)[labels]
        with pytest.warns(CalibratorFitWarning) as caught:
            _, fit = fit_calibrator(method, logits, labels, return_fit=True)
        said = [str(w.message) for w in caught if "class 2 (of 3) has no example among the 300" in str(w.message)]
        assert len(said) == 1 and fit.warning == said[0]
        assert type(fit) is CalibratorFit and fit.method == method and fit.num_examples == 300  # one report type
        assert (fit.temperature is not None) == (method in ("temperature", "ensemble_temperature"))

    def test_no_clause_when_every_class_is_present(self, rng):
        labels = np.r_[rng.integers(0, 2, 299), 2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, fit = fit_calibrator("isotonic", rng.normal(size=(300, 3)), labels, return_fit=True)
        assert fit.warning is not None and "has no example" not in fit.warning  # class 2's one example: warned as rare

    def test_absent_classes_are_listed(self, rng):
        labels = rng.choice([0, 3], 200)
        with pytest.warns(CalibratorFitWarning, match=r"3 classes, 1, 2, 4 \(of 5\) have no example among the 200"):
            fit_calibrator("temperature", rng.normal(size=(200, 5)) + 4.0 * np.eye(5)[labels], labels)
