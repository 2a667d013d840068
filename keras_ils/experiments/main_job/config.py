"""The main job's fixed tables: the methods it compares, the calibrators, the defaults of `run(tune=False)`."""

from __future__ import annotations

from keras_ils import tuning
from keras_ils.targets import METHOD_HYPERPARAMETERS, validate_hyperparameters

METHOD_NAMES = {
    "none": "No LS",
    "dis": "Dis",
    "cls": "cLS",
    "bs_soft": "BS_Soft",
    "beta": "Beta",
    "ls": "LS",
    "ils1": "ILS1",
    "ils2": "ILS2",
    "ils": "ILS",
}


STUDENT_METHODS = ("ls", "ils1", "ils2", "ils")


# The paper's comparison (Table 3): every baseline of §6 and every ILS variant, in the paper's order.
ALL_METHODS = ("dis", "cls", "bs_soft", "beta", "ls", "ils1", "ils2", "ils")


BASELINE_SETTINGS = {
    # the paper's self-distillation (appendix): log-loss against the teacher's predictions, both temperatures 1
    "dis": dict(weight=1.0, teacher_temperature=1.0, student_temperature=1.0),
    "bs_soft": dict(beta=0.95),
    "beta": dict(alpha=0.4),
}


# `run(tune=False)`'s fixed values (by default `run` searches the grids): the synthetic values are the paper's
# averages of tuned values (Table 4); the others sit inside its grids for real data.
DEFAULT_HYPERPARAMETERS = {
    "synthetic": dict(epsilon=0.05, p1=0.8, p2=2.0, temperature=1.0),
    "other": dict(epsilon=0.1, p1=0.9, p2=1.5, temperature=1.0),
}


def default_hyperparameters(dataset_name: str, **overrides) -> dict:
    base = DEFAULT_HYPERPARAMETERS["synthetic" if dataset_name == "synthetic" else "other"]
    chosen = {**base, **{k: v for k, v in overrides.items() if v is not None}}
    validate_hyperparameters("ils", **chosen)
    return chosen


def _method_hyperparameters(method: str, chosen: dict) -> dict:
    """The subset of `chosen` that `method` uses (what the table and JSON report)."""
    return {k: chosen[k] for k in METHOD_HYPERPARAMETERS[method]}


# a run's result set (replaced whole on re-runs): tables, figures, and every model as `.keras`
RESULT_FILES = ("results.json", "results.csv", "reliability_*.png", "comparison.png", "model_*.keras")


# `run(calibrators=...)`: the post-hoc calibrations each model gets, as `keras_ils.calibrate` methods and row suffixes
CALIBRATORS = {
    "ts": ("temperature", "TempS"),
    "vs": ("vector", "VS"),
    "ms": ("matrix", "MS"),
    "dir": ("dirichlet", "Dir"),
}


SEARCHES = ("budget", "full")  # run()'s KerasTuner search for models the vectorised engine cannot train


TUNABLE_METHODS = tuple(tuning.METHOD_HYPERPARAMETERS)  # ls, ils1, ils2, ils


ENGINES = ("auto", "keras-tuner")
