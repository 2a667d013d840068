"""The main job's rows: each model scored on the test set, its reliability diagram and `.keras` file.

Beside `results.json`, `test_nll.npz` holds every row's per-example test NLL (`-log p_y`, float64, the test
set's order; one array per row, keyed by the row's name): what the paired verdict compares; and, under
`reporting.examples.FINGERPRINT_KEY`, the test set's fingerprint, from which the verdict tells whether seeds
scored the same examples. With
`RunConfig.conformal = alpha`, every row also gets split conformal prediction sets (LAC and APS,
`keras_ils.conformal`) calibrated on `splits.calibration`, the validation examples that no selection or fit saw
(`conformal_split`): its `"conformal"` entry holds their test coverage and mean size, and `test_set_sizes.npz` each
test example's set size, keyed `"lac:ROW"` and `"aps:ROW"`.
"""

from __future__ import annotations

import os

import keras
import numpy as np

from keras_ils import conformal, data, evaluation, plots
from keras_ils.comparison.data.splits import taking_stored_features
from keras_ils.comparison.engine import training
from keras_ils.comparison.reporting import examples
from keras_ils.comparison.reporting import results as result_files

__all__ = [
    "CONFORMAL_METHODS",
    "TEST_NLL_FILE",
    "TEST_SET_SIZES_FILE",
    "Report",
    "model_file",
    "row",
    "slug",
]

TEST_NLL_FILE = "test_nll.npz"  # {row name: [n_test] per-example test NLL}
TEST_SET_SIZES_FILE = "test_set_sizes.npz"  # {"lac:ROW" / "aps:ROW": [n_test] per-example set size}
CONFORMAL_METHODS = ("lac", "aps")  # the prediction sets every row gets with `RunConfig.conformal`


def slug(name: str) -> str:
    """A row's name in its files' names: `"ILS + TempS"` -> `"ils_plus_temps"`."""
    return name.lower().replace(" ", "_").replace("+", "plus")


def model_file(name: str) -> str:
    """The file a row's model is saved in, e.g. `model_ils_plus_temps.keras`."""
    return f"model_{slug(name)}.keras"


def row(name, fit, hyperparameters, result):
    """One table row; `fit` is the row's calibration fit (a `CalibratorFit`) or `None` (as trained)."""
    temperature = {"temperature": 1.0, "temperature_status": None, "validation_examples": None}
    if fit is not None:
        temperature = {
            "temperature": getattr(fit, "temperature", None),
            "temperature_status": fit.status,
            "validation_examples": fit.num_examples,
        }
    return {"model": name, "temps": fit is not None, **temperature, "hyperparameters": hyperparameters, **result}


class Report:
    """Scores models on the test set; keeps their rows and reliability diagrams in the staging directory."""

    def __init__(self, splits, staging, progress, conformal=None):
        self.splits, self.staging, self.progress, self.conformal = splits, staging, progress, conformal
        self.test = training.evaluation_pipeline(splits.test)
        self.calibration = None if conformal is None else training.evaluation_pipeline(splits.calibration)
        self.rows, self.curves, self.example_nll, self.set_sizes = [], {}, {}, {}

    def record(self, name, fit, model, hyperparameters_used, **extra):
        """A model's row: test scores, reliability diagram, the model saved as `.keras`, progress."""
        outputs, labels = data.predict_with_labels(model, self.test)
        result = evaluation.evaluate_outputs(outputs, labels, groups=self.splits.test_groups)
        probabilities, log_probabilities = evaluation.probabilities(outputs)
        labels = np.asarray(labels)
        self.example_nll[name] = -log_probabilities[np.arange(len(labels)), labels].astype(np.float64)
        plots.reliability_diagram(
            probabilities, labels, os.path.join(self.staging, f"reliability_{slug(name)}.png"), title=name
        )
        taking_stored_features(model, self.splits).save(os.path.join(self.staging, model_file(name)))
        self.curves[name] = evaluation.top_label_bins(probabilities, labels)
        if self.conformal is not None:
            extra = {**extra, "conformal": self._prediction_sets(name, model, outputs, labels)}
        self.rows.append({**row(name, fit, hyperparameters_used, result), **extra})
        self.progress.scored()

    def _prediction_sets(self, name, model, test_outputs, test_labels) -> dict:
        """`{"alpha", method: {"coverage", "mean_set_size"}}` of LAC and APS sets calibrated on the calibration
        split, scored on the test split; each test example's set size kept for `test_set_sizes.npz`."""
        outputs, labels = data.predict_with_labels(model, self.calibration)
        found = {"alpha": self.conformal}
        for method in CONFORMAL_METHODS:
            layer = conformal.fit_conformal(method, outputs, labels, alpha=self.conformal)
            sets = keras.ops.convert_to_numpy(layer(test_outputs))
            found[method] = {
                "coverage": conformal.coverage(sets, test_labels),
                "mean_set_size": conformal.mean_set_size(sets),
            }
            self.set_sizes[f"{method}:{name}"] = sets.sum(axis=-1).astype(np.float64)
        return found

    def write(self, header: dict) -> dict:
        """`results.json` (header + rows) and `results.csv`; returns the results."""
        bins = {
            name: dict(zip(("counts", "correct", "confidence"), np.asarray(b).tolist(), strict=True))
            for name, b in self.curves.items()
        }
        # the stored features' preprocessing that every saved model starts with; the comparison figure's bins
        preprocessing = self.splits.preprocessing
        results = {**header, "preprocessing": preprocessing, "rows": self.rows, "reliability_bins": bins}
        result_files.write(results, self.staging)
        fingerprint = examples.fingerprint(self.splits.test.batch(4096).as_numpy_iterator)  # the verdict's unit
        np.savez(
            os.path.join(self.staging, TEST_NLL_FILE), **self.example_nll, **{examples.FINGERPRINT_KEY: fingerprint}
        )
        if self.set_sizes:
            np.savez(os.path.join(self.staging, TEST_SET_SIZES_FILE), **self.set_sizes)
        scores = {row["model"]: {c: row["all"][c] for c in result_files.FIGURE_SCORES} for row in self.rows}
        title = f"{header['dataset']} / {header['model']}"
        plots.comparison(self.curves, scores, os.path.join(self.staging, "comparison.png"), title=title)
        return results
