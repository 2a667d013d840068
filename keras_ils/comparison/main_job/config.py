"""The main job's settings: one frozen `RunConfig`, built once (the command builds it from its flags).

`run` and `tune` (`keras_ils.comparison.main_job.pipeline`) take the data
and a `RunConfig`; every stage below them reads the same object. Everything
that can be checked without the data is checked when the config is made, so
a bad setting fails before any data is read or model trained.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal

import keras

from keras_ils import methods
from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.calibration import ESTIMATORS
from keras_ils.comparison.engine import students
from keras_ils.comparison.networks import CUSTOM_RECIPE

__all__ = [
    "CALIBRATORS",
    "CALIBRATOR_ALIASES",
    "CUSTOM_RECIPE",
    "DEFAULT_HYPERPARAMETERS",
    "DEFAULT_METHODS",
    "ENGINES",
    "RESULT_FILES",
    "SEARCHES",
    "RunConfig",
    "default_hyperparameters",
]

# `run`'s default comparison: the ILS family (LS, ILS1, ILS2, ILS); `keras-ils run --methods all` is every
# selectable method of the registry (`keras_ils.methods.ids(selectable=True)`).
DEFAULT_METHODS = ("ls", "ils1", "ils2", "ils")

# `run(tune=False)`'s fixed values (by default `run` searches the grids): the synthetic values are the paper's
# averages of tuned values (Table 4); the others sit inside its grids for real data. A registered method's other
# hyperparameters take the first value of their grid.
DEFAULT_HYPERPARAMETERS = {
    "synthetic": dict(epsilon=0.05, p1=0.8, p2=2.0, temperature=1.0),
    "other": dict(epsilon=0.1, p1=0.9, p2=1.5, temperature=1.0),
}

# a run's result set (replaced whole on re-runs): tables, figures, and every model as `.keras`
RESULT_FILES = (
    "results.json", "results.csv", "test_nll.npz", "reliability_*.png", "comparison.png", "model_*.keras",
    "verdict.json", "verdict.md", "test_set_sizes.npz",
)  # fmt: skip

# `RunConfig.calibrators`: the post-hoc calibrations each model can get, by their one id, the calibration
# registry's (`keras_ils.calibration.METHODS`), with the display name that ends their rows ("ILS + Isotonic")
CALIBRATORS = {
    "temperature": "TempS",
    "vector": "VS",
    "matrix": "MS",
    "dirichlet": "Dir",
    "histogram": "Histogram",
    "isotonic": "Isotonic",
    "ensemble_temperature": "Ensemble TS",
    "venn_abers": "Venn-Abers",
}
# the short names the command's `--calibrators` also takes (the API takes the ids alone); `keras_ils_cli` writes
# them out again so that parsing imports no TensorFlow, and a test holds the two equal
CALIBRATOR_ALIASES = {"ts": "temperature", "vs": "vector", "ms": "matrix", "dir": "dirichlet"}


SEARCHES = ("budget", "full")  # run's KerasTuner search for models the vectorised engine cannot train
ENGINES = ("auto", "keras-tuner")  # tune's


def default_hyperparameters(dataset_name: str, **overrides) -> dict:
    """The ILS family's values of `run(tune=False)` for a dataset, `overrides` (not `None`) replacing them.

    Example:

    >>> default_hyperparameters("synthetic", p1=0.85)
    {'epsilon': 0.05, 'p1': 0.85, 'p2': 2.0, 'temperature': 1.0}
    """
    base = DEFAULT_HYPERPARAMETERS["synthetic" if dataset_name == "synthetic" else "other"]
    return students.checked_fixed({**base, **{k: v for k, v in overrides.items() if v is not None}})


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one `run` or `tune` does, apart from the data: the methods, the search, the training, the outputs.

    Attributes:
        model_name: a registered network name (`keras_ils.comparison.networks`).
            Defaults to `None`: `"mlp"` for vectors, `"cnn"` for images
            (with `build_model`: the name the results give the network,
            default the builder's `__name__`).
        build_model: your network instead of a named one: a function
            `build_model(num_classes) -> keras.Model` returning a new,
            uncompiled model that takes the data's examples and outputs
            `num_classes` logits (no softmax). It is called once per network
            trained (each candidate of a KerasTuner search too), after the
            seed is set. Its networks train by `model.fit` and KerasTuner
            with `CUSTOM_RECIPE` unless `recipe` is given.
        output_dir: where `results.json`, `results.csv`, the diagrams and
            the models go (written only when everything succeeded).
        methods: registered ids (`keras_ils.methods.ids(selectable=True)`);
            duplicates are dropped. The teacher itself is the No LS model,
            always there. `tune` takes tunable ids only. Defaults to
            `DEFAULT_METHODS` (LS, ILS1, ILS2, ILS).
        hyperparameters: `{name: value}` to fix instead of searching (every
            method tuning that name uses it), e.g. `{"epsilon": 0.1}`.
        tune: `False` fixes every hyperparameter (`hyperparameters`, else
            `default_hyperparameters`, else the first value of the method's
            grid) and trains one student per method. Defaults to `True`.
        search: run's search for models the vectorised engine cannot train:
            `"budget"` (KerasTuner's Hyperband) or `"full"` (the whole grid).
        search_space: `"paper"`, `"synthetic"` or `{hyperparameter: values}`.
            Defaults to `None`: `"synthetic"` on the synthetic task, else `"paper"`.
        recipe: a `keras_ils.comparison.networks.Recipe`. Defaults to
            `None`: `networks.recipe_for(model_name, dataset, epochs=epochs,
            batch_size=batch_size)`, the network's recipe.
        epochs, batch_size: replace the default recipe's (`None`: the paper's).
        strategy: a `tf.distribute` strategy. Defaults to `None`: the current one.
        seed: seeds model initialisation, shuffling and KerasTuner's oracle.
        teacher_cache: optional `.npz` path of the teacher-logits cache.
        verbose: Keras `fit` verbosity (0, 1 or 2).
        temperature_estimator: how every `T*` is fitted on validation
            (`fit_calibrator("temperature")`'s `estimator`): `"map"`, `"mle"` or `"authors"`.
        teacher_folds: `k >= 2` makes the targets from `k` cross-fitted
            teachers' out-of-fold logits (the vectorised engine only).
        calibrators: calibration methods (`keras_ils.calibration.METHODS`,
            the keys of `CALIBRATORS`): every model gets the "+ TempS" rows
            (`"temperature"`) and one row per other method, named by
            `CALIBRATORS` ("+ VS", "+ Dir", "+ Isotonic", ...). Defaults
            to `("temperature",)`.
        conformal: `alpha`, in `(0, 1)`, to give every row split conformal
            prediction sets (LAC and APS, `keras_ils.conformal`) at coverage
            `1 - alpha`, scored on the test split (coverage, mean set size);
            `None` (default): none. They are calibrated on half of the
            validation split, carved before anything trains and seen by no
            search, early stop or calibrator (`conformal_split`).
        directory: the KerasTuner searches' directory (resumable). Defaults
            to `None`: `OUTPUT_DIR/search`.
        log: a function taking each line of progress (e.g. `print`), or
            `None`: the stages are printed, the rest dropped.
        algorithm: tune's KerasTuner algorithm (`keras_ils.tuning.ALGORITHMS`).
        max_trials: tune's trials per method. Defaults to `None` (the whole grid).
        engine: tune's `"auto"` (a whole-grid search of a plain MLP on
            vectors by the vectorised engine) or `"keras-tuner"`.

    Example:

    >>> config = RunConfig("mlp", "runs/demo", methods=("ls", "ils", "ls"), hyperparameters={"p1": 0.9})
    >>> config.methods, dict(config.hyperparameters)
    (('ls', 'ils'), {'p1': 0.9})
    >>> RunConfig("mlp", "runs/demo", methods=("mixup",))
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `methods`. Expected some of ('dis', 'cls', ...). Received: \
methods=('mixup',)
    """

    model_name: str | None = None
    output_dir: str | None = None
    methods: tuple[str, ...] = DEFAULT_METHODS
    hyperparameters: Mapping[str, float] = dataclasses.field(default_factory=dict)
    tune: bool = True
    search: Literal["budget", "full"] = "budget"
    search_space: Literal["paper", "synthetic"] | Mapping | None = None
    recipe: Any = None
    epochs: int | None = None
    batch_size: int | None = None
    strategy: Any = None
    seed: int = 0
    teacher_cache: str | None = None
    verbose: int = 0
    temperature_estimator: Literal["map", "mle", "authors"] = "map"
    teacher_folds: int = 1
    calibrators: tuple[str, ...] = ("temperature",)
    directory: str | None = None
    log: Callable[[str], Any] | None = None
    algorithm: Literal["grid", "random", "bayesian", "hyperband"] = "grid"
    max_trials: int | None = None
    engine: Literal["auto", "keras-tuner"] = "auto"
    build_model: Callable[[int], Any] | None = None  # these two last: the fields before them keep their positions
    conformal: float | None = None

    def __post_init__(self):
        if isinstance(self.build_model, keras.layers.Layer):  # a model is callable, but it is one network
            raise TypeError(
                "Argument `build_model` must be a function `build_model(num_classes) -> keras.Model` that returns a "
                "new model on every call (each row trains its own network), not a model. Received: a "
                f"{type(self.build_model).__name__} named {self.build_model.name!r}. Wrap it, e.g. "
                "`build_model=lambda num_classes: keras.models.clone_model(model)` (new weights each call)."
            )
        if self.build_model is not None and not callable(self.build_model):
            raise TypeError(
                "Argument `build_model` must be a function `build_model(num_classes) -> keras.Model` or None. "
                f"Received: build_model={self.build_model!r}"
            )
        chosen = tuple(dict.fromkeys(self.methods))
        if any(m not in methods.ids(selectable=True) for m in chosen):
            raise invalid("methods", f"some of {methods.ids(selectable=True)}", tuple(self.methods))
        object.__setattr__(self, "methods", chosen)
        fixed = {k: v for k, v in dict(self.hyperparameters or {}).items() if v is not None}
        object.__setattr__(self, "hyperparameters", types.MappingProxyType(students.checked_fixed(fixed)))
        if self.search not in SEARCHES:
            raise invalid("search", f"one of {SEARCHES}", self.search)
        integer_at_least("teacher_folds", self.teacher_folds, 1)
        if self.temperature_estimator not in ESTIMATORS:
            raise invalid("temperature_estimator", f"one of {ESTIMATORS}", self.temperature_estimator)
        calibrators = tuple(dict.fromkeys(self.calibrators))
        if not calibrators or any(c not in CALIBRATORS for c in calibrators):
            raise invalid("calibrators", f"a non-empty subset of {tuple(CALIBRATORS)}", self.calibrators)
        object.__setattr__(self, "calibrators", calibrators)
        if self.conformal is not None:
            number_in("conformal", self.conformal, 0, 1, low_open=True, high_open=True)
        if self.engine not in ENGINES:
            raise invalid("engine", f"one of {ENGINES}", self.engine)
        for name in ("epochs", "batch_size"):
            if getattr(self, name) is not None:
                integer_at_least(name, getattr(self, name), 1)
        if self.teacher_folds > 1 and self.teacher_cache is not None:
            raise ValueError(
                "Arguments `teacher_cache` and `teacher_folds` > 1 exclude each other: the cache holds one "
                "teacher's logits."
            )

    def check_examples(self, splits, argument: str) -> None:
        """Refuses examples that the package's default networks cannot take (vectors and images), when no
        network is named or built; `argument` is the data's argument in the message (`x`, `--dataset`)."""
        if self.build_model is None and self.model_name is None and len(splits.input_shape) not in (1, 3):
            raise ValueError(
                f"Invalid value for argument `{argument}`. Expected vectors [n, features] or images [n, height, "
                "width] / [n, height, width, channels], which the package's networks (MLP, CNN) take; pass "
                "`build_model`, a network of yours, for examples of other shapes. Received: examples of shape "
                f"{tuple(splits.input_shape)} ({splits.name})"
            )

    def model_for(self, splits) -> str:
        """The network's name for these data: `model_name`, else the builder's name, else `"cnn"` for images
        and `"mlp"` for vectors."""
        if self.model_name:
            return self.model_name
        if self.build_model is not None:
            name = getattr(self.build_model, "__name__", "")
            return name if name.isidentifier() else "custom"
        return "cnn" if splits.is_image else "mlp"
