"""The protocol's training and tuning settings: the package's defaults, the authors' code's, and their checks."""

from __future__ import annotations

import dataclasses
from typing import Literal

from keras_ils import calibration
from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.comparison.engine import vectorised

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


@dataclasses.dataclass(frozen=True)
class ProtocolOptions:
    """How `run_replicates` runs the protocol: its size, and the training and tuning settings, checked when made.

    The settings from `init` to `validation_loss` default to `None`, the
    preset's (`PRESETS[preset]`); any of them given overrides the preset's,
    and `settings` holds them resolved. Every value is checked here, so a bad
    one fails before any training.

    Attributes:
        replicates: datasets, seeds `seed, seed + 1, ...`. Defaults to `100`.
        seed: the first replicate's seed. Defaults to `0`.
        quick: small grids (`run.grids(quick=True)`). Defaults to `False`.
        n_test: test points per class. Defaults to `5000` (the paper's).
        epochs: maximum epochs. Defaults to `500` (the paper's).
        group: replicates whose ILS models are trained together in one call
            of the trainer (the No LS and LS models of all replicates train
            first, in one call). Defaults to `25`.
        pool_size: the trainer's `pool_size`. Defaults to `256`.
        preset: `"package"` (the package's settings, below) or `"authors"`
            (the habits of the authors' public code: PyTorch initialisation,
            one seed per model, T in [0.8, 3], teacher temperatures
            {1, 2, 4, 8, 16} on raw logits, batch 128, weight decay 1e-4,
            eps / (K - 1) per wrong class for ILS1, batch-mean validation
            loss). Defaults to `"package"`.
        init: the models' initialisation, `"keras"` (the package's) or
            `"pytorch"` (`keras_ils.comparison.engine.vectorised.initial_weights`).
            Package default `"keras"`.
        shared_seeds: all models of a replicate start from the same weights
            and see the same batch order (common random numbers), so they
            differ only in their targets; `False` gives every model its own
            seed, so that selecting the best of a grid also selects a lucky
            initialisation (more so for larger grids). Package default `True`.
        temperature_estimator: every model's temperature fit,
            `fit_calibrator("temperature")`'s `estimator`: `"map"`
            (the package's), `"mle"` (Guo et al., what the tables of
            docs/results/synthetic-protocol.md were made with) or `"authors"`
            (T in [0.8, 3], the paper's code). Package default `"map"`.
        teacher_grid: ILS2's and ILS's teacher temperatures: `"paper"`, the
            appendix's {1, 2, 4, 6} dividing the calibrated teacher's logits
            (the package's convention, `keras_ils.targets`), or `"authors"`,
            {1, 2, 4, 8, 16} dividing the teacher's raw logits (the authors'
            code). Package default `"paper"`.
        batch_size: mini-batch size. Package default `32`.
        weight_decay: coupled (L2, added to the gradient as PyTorch's Adam
            does) weight decay; `0` for none. Package default `0.0`.
        smoothing_mass: how ILS1 spreads its smoothing mass `eps_x`:
            `"all_classes"` (the paper's Eq. 3, `eps_x / K` on every class,
            as LS) or `"wrong_classes"` (the authors' code, `1 - eps_x` on the
            true class and `eps_x / (K - 1)` on each wrong one). LS keeps
            `eps / K` in both (the authors' LS loss does too), and ILS2 / ILS
            put all of `eps` on the wrong classes in both. Package default
            `"all_classes"`.
        validation_loss: the early-stopping loss, `"example_mean"` (the mean
            over validation points) or `"batch_mean"` (a mean of per-batch
            means in batches of `batch_size`, the authors' code; a short last
            batch weighs its points more). Model selection uses the mean
            over points in both. Package default `"example_mean"`.

    Example:

    >>> options = ProtocolOptions(replicates=5, preset="authors", batch_size=32)
    >>> options.settings["batch_size"], options.settings["init"], options.training().batch_size
    (32, 'pytorch', 32)
    >>> ProtocolOptions(group=0)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `group`. Expected an int >= 1. Received: group=0
    """

    replicates: int = 100
    seed: int = 0
    quick: bool = False
    n_test: int = 5000
    epochs: int = 500
    group: int = 25
    pool_size: int = 256
    preset: Literal["package", "authors"] = "package"
    init: Literal["keras", "pytorch"] | None = None
    shared_seeds: bool | None = None
    temperature_estimator: Literal["map", "mle", "authors"] | None = None
    teacher_grid: Literal["paper", "authors"] | None = None
    batch_size: int | None = None
    weight_decay: float | None = None
    smoothing_mass: Literal["all_classes", "wrong_classes"] | None = None
    validation_loss: Literal["example_mean", "batch_mean"] | None = None

    def __post_init__(self):
        for name in ("replicates", "n_test", "epochs", "group", "pool_size"):
            integer_at_least(name, getattr(self, name), 1)
        integer_at_least("seed", self.seed, 0)
        if not isinstance(self.quick, bool):
            raise invalid("quick", "True or False", self.quick)
        self.training()  # checks the settings, the preset's and the engine's

    @property
    def settings(self) -> dict:
        """The training and tuning settings: the preset's, with the ones given here instead (`resolve_options`)."""
        return resolve_options(self.preset, **{name: getattr(self, name) for name in OPTIONS})

    def training(self) -> vectorised.MLPTraining:
        """The trainer's settings (`keras_ils.comparison.engine.vectorised.MLPTraining`) for every model."""
        settings = self.settings
        return vectorised.MLPTraining(
            epochs=self.epochs,
            pool_size=self.pool_size,
            batch_size=settings["batch_size"],
            weight_decay=settings["weight_decay"],
            validation_loss="mean" if settings["validation_loss"] == "example_mean" else "batch_mean",
        )


__all__ = [
    "AUTHORS_TEACHER_TEMPERATURES",
    "OPTIONS",
    "PRESETS",
    "SMOOTHING_MASSES",
    "TEACHER_GRIDS",
    "VALIDATION_LOSSES",
    "ProtocolOptions",
    "resolve_options",
]
