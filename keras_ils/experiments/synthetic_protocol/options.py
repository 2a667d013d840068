"""The protocol's training and tuning settings: the package's defaults, the authors' code's, and their checks."""

from __future__ import annotations

from keras_ils import calibration
from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.experiments.engine import vectorised

# The teacher temperatures of the authors' code (main.py), which divide the teacher's raw logits.
AUTHORS_TEACHER_TEMPERATURES = (1.0, 2.0, 4.0, 8.0, 16.0)
TEACHER_GRIDS = ("paper", "authors")
SMOOTHING_MASSES = ("all_classes", "wrong_classes")
VALIDATION_LOSSES = ("example_mean", "batch_mean")

# The settings `run_replicates` reads from a preset; the package's defaults first.
OPTIONS = dict(
    init="keras",
    shared_seeds=True,
    temperature_estimator="map",
    teacher_grid="paper",
    batch_size=32,
    weight_decay=0.0,
    smoothing_mass="all_classes",
    validation_loss="example_mean",
)
# The habits of the authors' public code (github.com/mmaher22/Instance-based-label-smoothing) that the paper does not
# state: PyTorch's initialisation, one seed per model, T in [0.8, 3], teacher temperatures {1, 2, 4, 8, 16} on raw
# logits, batch 128 (its default; its README says 512), coupled weight decay 1e-4, eps / (K - 1) on each wrong class
# for ILS1, and the validation loss as a mean of per-batch means.
PRESETS = {
    "package": dict(OPTIONS),
    "authors": dict(
        init="pytorch",
        shared_seeds=False,
        temperature_estimator="authors",
        teacher_grid="authors",
        batch_size=128,
        weight_decay=1e-4,
        smoothing_mass="wrong_classes",
        validation_loss="batch_mean",
    ),
}


def resolve_options(preset: str = "package", **overrides) -> dict:
    """The preset's settings (`PRESETS`) with every override that is not `None`, each checked.

    Example:

    >>> resolve_options("authors", batch_size=32)["batch_size"], resolve_options()["init"]
    (32, 'keras')
    """
    if preset not in PRESETS:
        raise invalid("preset", f"one of {tuple(PRESETS)}", preset)
    unknown = set(overrides) - set(OPTIONS)
    if unknown:
        raise TypeError(f"Unknown options: {sorted(unknown)}. Expected some of {sorted(OPTIONS)}.")
    options = dict(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None})
    if options["init"] not in vectorised.INITIALISATIONS:
        raise invalid("init", f"one of {vectorised.INITIALISATIONS}", options["init"])
    if not isinstance(options["shared_seeds"], bool):
        raise invalid("shared_seeds", "True or False", options["shared_seeds"])
    if options["temperature_estimator"] not in calibration.ESTIMATORS:
        raise invalid("temperature_estimator", f"one of {calibration.ESTIMATORS}", options["temperature_estimator"])
    if options["teacher_grid"] not in TEACHER_GRIDS:
        raise invalid("teacher_grid", f"one of {TEACHER_GRIDS}", options["teacher_grid"])
    integer_at_least("batch_size", options["batch_size"], 1)
    options["weight_decay"] = number_in("weight_decay", options["weight_decay"], 0.0, expected="a float >= 0")
    if options["smoothing_mass"] not in SMOOTHING_MASSES:
        raise invalid("smoothing_mass", f"one of {SMOOTHING_MASSES}", options["smoothing_mass"])
    if options["validation_loss"] not in VALIDATION_LOSSES:
        raise invalid("validation_loss", f"one of {VALIDATION_LOSSES}", options["validation_loss"])
    return options


__all__ = [
    "AUTHORS_TEACHER_TEMPERATURES",
    "OPTIONS",
    "PRESETS",
    "SMOOTHING_MASSES",
    "TEACHER_GRIDS",
    "VALIDATION_LOSSES",
    "resolve_options",
]
