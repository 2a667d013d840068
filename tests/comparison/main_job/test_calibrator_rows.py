"""The main job's calibrator rows: every key of `config.CALIBRATORS` is one `keras_ils.calibrate` map, one row."""

import warnings
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils.calibration import fit_calibrator
from keras_ils.comparison.main_job import config, fitting, report


class _Rows:
    """A `Report` that keeps what `record` is given."""

    def __init__(self):
        self.rows = []

    def record(self, name, fit, model, hyperparameters, **extra):
        self.rows.append((name, fit, model, hyperparameters, extra))


def _model_and_data(seed=0, n=120, k=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5)
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(k)])
    return model, x, y


def test_each_calibrator_is_its_registry_map_in_a_row_named_after_it():
    model, x, y = _model_and_data()
    keys = tuple(config.CALIBRATORS)
    setup = SimpleNamespace(config=SimpleNamespace(calibrators=keys, strategy=tf.distribute.get_strategy()))
    setup.validation = (x[:80], y[:80])
    rows = _Rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitting.record_calibrated(setup, rows, "LS", model, {"epsilon": 0.1}, candidates=3)
    suffixes = [suffix for method, suffix in config.CALIBRATORS.items() if method != "temperature"]
    assert [row[0] for row in rows.rows] == [f"LS + {suffix}" for suffix in suffixes]
    assert {"LS + Histogram", "LS + Isotonic", "LS + Ensemble TS", "LS + Venn-Abers"} <= {row[0] for row in rows.rows}
    validation_logits, test_logits = model.predict(x[:80], verbose=0), model.predict(x[80:], verbose=0)
    methods = [method for method in config.CALIBRATORS if method != "temperature"]
    for (name, fit, mapped, hyperparameters, extra), method in zip(rows.rows, methods, strict=True):
        assert fit.method == method and fit.num_examples == 80 and hyperparameters == {"epsilon": 0.1}
        assert extra == {"candidates": 3}
        with warnings.catch_warnings():  # what a small fit warns is the calibrators' own tests' business
            warnings.simplefilter("ignore")
            layer = fit_calibrator(method, validation_logits, y[:80])
        want = keras.ops.convert_to_numpy(layer(test_logits))
        np.testing.assert_allclose(mapped.predict(x[80:], verbose=0), want, rtol=1e-5, atol=1e-5, err_msg=name)
        row = report.row(name, fit, hyperparameters, {"all": {}})
        assert row["temps"] and row["temperature_status"] == fit.status and row["validation_examples"] == 80


def test_run_config_takes_every_calibrator_and_refuses_others():
    assert config.RunConfig(calibrators=tuple(config.CALIBRATORS)).calibrators == tuple(config.CALIBRATORS)
    with pytest.raises(ValueError, match="Invalid value for argument `calibrators`"):
        config.RunConfig(calibrators=("temperature", "platt"))
    with pytest.raises(ValueError, match="Invalid value for argument `calibrators`"):
        config.RunConfig(calibrators=("ts",))  # the CLI's alias; the API takes the one id set
