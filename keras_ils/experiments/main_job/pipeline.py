"""The whole method on one dataset: teacher -> T* -> cached teacher logits -> students -> TempS -> table.

`run` is what `keras-ils run` calls; it is plain Keras underneath (`fit`,
callbacks, `tf.distribute` scopes) and writes its results atomically: files
are staged in a temporary directory beside the output directory and moved in
only when everything succeeded.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from keras_ils import baselines, data, distillation, evaluation, plots, tuning
from keras_ils import metrics as _metrics
from keras_ils._checks import integer_at_least, invalid
from keras_ils._files import atomic_write, staged_directory
from keras_ils.calibration import ESTIMATORS, TemperatureScaling, calibrate, estimate_temperature
from keras_ils.experiments.engine import students, training
from keras_ils.experiments.zoo import models
from keras_ils.losses import ILSLoss
from keras_ils.targets import METHOD_HYPERPARAMETERS, validate_hyperparameters
from keras_ils.teacher import compute_teacher_logits, read_cache

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


def _student_setup(method, splits, teacher_logits, train_with_teacher, hyperparameters):
    """`(loss, training dataset, reported settings)` of one student method."""
    if method in STUDENT_METHODS:
        used = _method_hyperparameters(method, hyperparameters)
        return ILSLoss(method=method, **used), train_with_teacher, used
    if method == "dis":
        settings = BASELINE_SETTINGS["dis"]
        return distillation.DistillationCrossEntropy(**settings), train_with_teacher, settings
    if method == "cls":
        rows = baselines.class_similarity_logits(splits.train, splits.num_classes)
        class_rows = teacher_logits._replace(logits=rows[teacher_logits.labels])  # keeps the label check
        train_set = data.with_teacher_targets(splits.train, class_rows)
        used = {"epsilon": hyperparameters["epsilon"]}
        return ILSLoss(method="ils2", **used), train_set, used
    if method == "bs_soft":
        settings = BASELINE_SETTINGS["bs_soft"]
        return baselines.BootstrapSoftLoss(**settings), splits.train, settings
    alpha = BASELINE_SETTINGS["beta"]["alpha"]
    a = baselines.beta_shape_for_epsilon(hyperparameters["epsilon"], splits.num_classes, alpha)
    settings = {"alpha": alpha, "a": round(a, 4), "epsilon": hyperparameters["epsilon"]}
    return baselines.BetaSmoothingLoss(alpha=alpha, a=a), splits.train, settings


# a run's result set (replaced whole on re-runs): tables, figures, and every model as `.keras`
RESULT_FILES = ("results.json", "results.csv", "reliability_*.png", "comparison.png", "model_*.keras")
# `run(calibrators=...)`: the post-hoc calibrations each model gets, as `keras_ils.calibrate` methods and row suffixes
CALIBRATORS = {
    "ts": ("temperature", "TempS"),
    "vs": ("vector", "VS"),
    "ms": ("matrix", "MS"),
    "dir": ("dirichlet", "Dir"),
}


def _row(name, fit, hyperparameters, result):
    """One table row; `fit` is the row's calibration fit (`TemperatureFit`, `CalibratorFit`) or `None` (as trained)."""
    temperature = {"temperature": 1.0, "temperature_status": None, "validation_examples": None}
    if fit is not None:
        temperature = {
            "temperature": getattr(fit, "temperature", None),
            "temperature_status": fit.status,
            "validation_examples": fit.num_examples,
        }
    return {"model": name, "temps": fit is not None, **temperature, "hyperparameters": hyperparameters, **result}


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every model of one `run` or `tune` shares."""

    splits: object  # a keras_ils.experiments.data.datasets.Splits
    model_name: str
    recipe: training.Recipe
    strategy: tf.distribute.Strategy
    validation: tf.data.Dataset  # batched: the early-stopping monitor of searches, and where TempS is fitted
    seed: int
    verbose: int
    temperature_estimator: str  # keras_ils.calibration.fit_temperature's `estimator`, for every "+ TempS" row
    calibrators: tuple = ("ts",)  # keys of CALIBRATORS: the calibrated rows each model gets

    @classmethod
    def make(
        cls, splits, model_name, recipe, strategy, seed, verbose, temperature_estimator="map", calibrators=("ts",)
    ):
        """Fills in the defaults: the paper's recipe for the model and data, the current strategy."""
        if temperature_estimator not in ESTIMATORS:
            raise invalid("temperature_estimator", f"one of {ESTIMATORS}", temperature_estimator)
        if not calibrators or any(c not in CALIBRATORS for c in calibrators):
            raise invalid("calibrators", f"a non-empty subset of {tuple(CALIBRATORS)}", calibrators)
        return cls(
            splits,
            model_name,
            recipe or training.recipe_for(model_name, splits.name),
            strategy or tf.distribute.get_strategy(),
            training.evaluation_pipeline(splits.validation),
            seed,
            verbose,
            temperature_estimator,
            tuple(dict.fromkeys(calibrators)),
        )

    def header(self, teacher_fit, **settings) -> dict:
        """The head of `results.json`: what ran, the teacher's `T*` and its fit, `settings`, then the recipe."""
        recipe = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self.recipe).items()}
        head = {"dataset": self.splits.name, "model": self.model_name, "seed": self.seed}
        teacher = {
            "teacher_temperature": teacher_fit.temperature,
            "teacher_temperature_status": teacher_fit.status,
            "temperature_estimator": teacher_fit.estimator,
            "validation_examples": teacher_fit.num_examples,
        }
        return {**head, **teacher, **settings, "recipe": recipe}


@dataclasses.dataclass(frozen=True)
class _SearchSpec:
    """The searches of one `tune`: one KerasTuner project per method in `directory`, all alike but the loss."""

    setup: _Setup
    search_space: object  # "paper", "synthetic" or a dict (keras_ils.tuning.make_search_space)
    algorithm: str
    max_trials: int | None
    directory: str


SEARCHES = ("budget", "full")  # run()'s KerasTuner search for models the vectorised engine cannot train
HYPERBAND_FACTOR = 3


def run(
    splits,
    *,
    model_name: str,
    methods=STUDENT_METHODS,
    hyperparameters: dict | None = None,
    tune: bool = True,
    search: str = "budget",
    search_space=None,
    recipe: training.Recipe | None = None,
    output_dir: str,
    strategy: tf.distribute.Strategy | None = None,
    seed: int = 0,
    teacher_cache: str | None = None,
    verbose: int = 0,
    temperature_estimator: str = "map",
    teacher_folds: int = 1,
    calibrators=("ts",),
    directory: str | None = None,
    log=None,
) -> dict:
    """The paper's method on one dataset: teacher, `T*`, every student tuned on validation NLL, TempS, the table.

    Every method with hyperparameters (LS, ILS1, ILS2, ILS) is selected on
    the validation cross-entropy against hard labels over the paper's grids
    (`search_space`); cLS and Beta take LS's chosen epsilon, as the paper does.
    A method's "+ TempS" row is its candidate with the lowest validation NLL
    after its own temperature scaling. How the candidates train:

    - a plain MLP on vector data (`model_name="mlp"` with the MLP recipe):
      all of them at once by `keras_ils.experiments.engine.students.search_students`
      (the paper's 180 students in about a minute on 2 CPU cores); BS_Soft
      and Beta, whose targets depend on the student, by `model.fit`;
    - any other model: one KerasTuner search per method, in `directory`
      (resumable): `search="budget"` (default) is Hyperband (successive
      halving, factor 3, up to the recipe's epochs), `"full"` the whole grid.
      Its cost is logged before anything trains.

    Args:
        splits: a `keras_ils.experiments.data.datasets.Splits`.
        model_name: a name for `keras_ils.experiments.zoo.models.build`.
        methods: the student methods, from `ALL_METHODS` (`"dis"`, `"cls"`,
            `"bs_soft"`, `"beta"`, `"ls"`, `"ils1"`, `"ils2"`, `"ils"`); the
            teacher itself is the No LS model.
        hyperparameters: `{epsilon, p1, p2, temperature}` values to fix
            instead of searching them (every method reading one uses it).
        tune: `False` fixes every hyperparameter (`hyperparameters`, the rest
            from `default_hyperparameters`) and trains one student per method.
        search: `"budget"` or `"full"`, for models the engine cannot train.
        search_space: `"paper"`, `"synthetic"` or `{hyperparameter: values}`.
            Defaults to `"synthetic"` on the synthetic task, else `"paper"`.
        recipe: training recipe; defaults to `training.recipe_for(model_name, splits.name)`.
        output_dir: where `results.json`, `results.csv` and the reliability
            diagrams go (written only when everything succeeded).
        strategy: a `tf.distribute` strategy; defaults to the current one.
        seed: seeds model initialisation and shuffling.
        teacher_cache: optional `.npz` path of the teacher-logits cache.
        verbose: Keras `fit` verbosity.
        temperature_estimator: how every `T*` is fitted on the validation
            set (`keras_ils.calibration.fit_temperature`'s `estimator`):
            `"map"` (default), `"mle"` or `"authors"`.
        teacher_folds: `k >= 2` makes ILS's targets from `k` cross-fitted
            teachers' out-of-fold logits (MLP on vector data only; see
            `keras_ils.experiments.engine.students`). Defaults to `1`, the paper's.
        calibrators: post-hoc calibrations of every model, from `CALIBRATORS`:
            `"ts"` (temperature scaling: every model's "+ TempS" row, always
            there), `"vs"` (vector scaling), `"ms"` (matrix scaling, ODIR) and
            `"dir"` (Dirichlet calibration, ODIR), each fitted on validation
            by `keras_ils.calibrate(method=...)` and applied to the model as
            trained ("ILS + Dir"). Defaults to `("ts",)`.
        directory: the KerasTuner searches' directory. Defaults to
            `OUTPUT_DIR/search`. The teacher and every student trained by one
            `model.fit` (Dis, cLS, BS_Soft, Beta, and every `tune=False`
            student) are kept there too, so a killed run resumes without
            training them again.
        log: a function taking each line of progress (e.g. `print`): the
            stages of `verbose=0` and a search's cost. `None` prints the
            stages and drops the rest.

    Returns:
        The results dict that `results.json` holds.
    """
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise ValueError(f"Invalid value for argument `methods`. Expected some of {ALL_METHODS}. Received: {unknown}")
    if search not in SEARCHES:
        raise invalid("search", f"one of {SEARCHES}", search)
    integer_at_least("teacher_folds", teacher_folds, 1)
    if teacher_cache is not None and os.path.exists(teacher_cache):
        read_cache(teacher_cache)  # an unreadable file fails now, not after the teacher has trained
    calibrators = tuple(calibrators)
    fixed = {k: v for k, v in (hyperparameters or {}).items() if v is not None}
    if not tune:
        fixed = default_hyperparameters(splits.name, **fixed)
    search_space = search_space or ("synthetic" if splits.name == "synthetic" else "paper")
    setup = _Setup.make(splits, model_name, recipe, strategy, seed, verbose, temperature_estimator, calibrators)
    for method in TUNABLE_METHODS:  # a bad grid or fixed value fails before anything trains
        if method in methods:
            students.candidate_grid((method,), search_space, fixed)
    engine = uses_engine(setup)
    if teacher_folds > 1 and not engine:
        raise ValueError(
            f"Argument `teacher_folds` > 1 needs a plain MLP on vector data (the vectorised engine); "
            f"received model {model_name!r} on {splits.name}."
        )
    if tune and search == "budget" and not engine and setup.recipe.epochs < 2:
        raise ValueError(
            "The budgeted search (Hyperband) needs at least 2 epochs; received epochs="
            f"{setup.recipe.epochs}. Give more epochs, or use --search full (search='full') or --no-tune (tune=False)."
        )
    if teacher_folds > 1 and teacher_cache is not None:
        raise ValueError(
            "Arguments `teacher_cache` and `teacher_folds` > 1 exclude each other: the cache holds one "
            "teacher's logits."
        )
    if engine:  # the engine trains every candidate in one go; BS_Soft and Beta by model.fit
        progress = _Progress(sum(m not in students.METHODS for m in methods), verbose, log or print)
    else:
        algorithm = "hyperband" if search == "budget" else "grid"
        order = _search_order(methods)
        planned = [_planned_fits(_fixed_space(m, search_space, fixed), algorithm, setup.recipe.epochs) for m in order]
        progress = _Progress(1 + sum(planned), verbose, log or print)
    with staged_directory(output_dir, RESULT_FILES) as staging:
        report = _Report(splits, staging, progress)
        settings = dict(tuned=tune, search_space=search_space if isinstance(search_space, str) else "custom")
        if engine:
            header = _run_engine(setup, report, methods, fixed, search_space, teacher_folds, teacher_cache, log)
        else:
            directory = directory or os.path.join(output_dir, "search")
            header = _run_keras(setup, report, methods, fixed, search_space, search, directory, teacher_cache, log)
        return report.write(setup.header(header.pop("teacher_fit"), **settings, **header))


def uses_engine(setup) -> bool:
    """Whether `run` trains `setup`'s students with the vectorised engine: a plain MLP (`mlp`, `mlp-D-W`) on
    vectors by the Adam MLP recipe. The engine runs on one device (TensorFlow's default, a GPU when there is
    one), whatever `setup.strategy` is: its models are small and many, not large."""
    recipe = setup.recipe
    return (
        models.mlp_shape(setup.model_name) is not None
        and len(setup.splits.input_shape) == 1
        and recipe.optimizer == "adam"
        and not recipe.weight_decay
        and not recipe.decay_at
        and recipe.patience is not None
    )


def _arrays(dataset):
    """`(features, labels)` numpy arrays of an unbatched `(x, y)` dataset, in order."""
    x, y = dataset.batch(1 << 30).get_single_element()
    return x.numpy(), y.numpy()


def _run_engine(setup, report, methods, fixed, search_space, teacher_folds, teacher_cache, log):
    """Every student by `students.search_students`; BS_Soft and Beta by `model.fit`. Returns header items."""
    splits, recipe = setup.splits, setup.recipe
    engine_methods = tuple(m for m in methods if m in students.METHODS)
    keras_methods = tuple(m for m in methods if m not in students.METHODS)
    searched = engine_methods + (("ls",) if keras_methods and "ls" not in engine_methods else ())
    (x_train, y_train), (x_val, y_val) = _arrays(splits.train), _arrays(splits.validation)
    if log:
        log("Training every candidate side by side (vectorised engine)")
    found = students.search_students(
        x_train,
        y_train,
        x_val,
        y_val,
        num_classes=splits.num_classes,
        methods=searched,
        search_space=search_space,
        fixed=fixed,
        hidden_layers=models.mlp_shape(setup.model_name)[0],
        units=models.mlp_shape(setup.model_name)[1],
        learning_rate=recipe.learning_rate,
        batch_size=recipe.batch_size,
        epochs=recipe.epochs,
        patience=recipe.patience,
        seed=setup.seed,
        teacher_folds=teacher_folds,
        temperature_estimator=setup.temperature_estimator,
    )
    if log:
        log(f"{len(found.candidates)} models trained in {found.seconds:.1f} s (vectorised engine)")
    trained = {}
    for method in keras_methods:  # from the seed's initial weights, like every candidate of the search
        epsilon = found.candidates[found.best("ls")][1]["epsilon"]
        loss, train_set, used = _student_setup(method, splits, None, None, {"epsilon": epsilon})
        fits = [report.progress.fits(METHOD_NAMES[method], 1)]
        trained[method] = _train_model(setup, loss, train_set, setup.seed, fits), used
    report.progress.rows((1 + len(methods)) * (1 + len(set(setup.calibrators) | {"ts"})))  # as trained, TempS, maps
    teacher = found.keras_model(0)
    report.record("No LS", None, teacher, {})
    report.record("No LS + TempS", found.teacher_fit, _scaled(teacher, found.teacher_fit.temperature), {})
    _record_calibrated(setup, report, "No LS", teacher, {})
    for method in engine_methods:
        _record_engine_method(setup, report, found, method, (x_val, y_val))
    for method, (student, used) in trained.items():
        _record_student(setup, report, METHOD_NAMES[method], student, used)
    if teacher_cache is not None:  # the calibrated teacher's logits, kept (or checked against the file) for reuse
        compute_teacher_logits(
            found.keras_model(0), splits.train, temperature=found.teacher_fit.temperature, cache_path=teacher_cache
        )
    header = dict(teacher_fit=found.teacher_fit, engine="vectorised", models_trained=len(found.candidates))
    header.update(search_seconds=round(found.seconds, 2), teacher_folds=teacher_folds)
    if found.folds_fit is not None:
        header.update(folds_temperature=found.folds_fit.temperature, folds_temperature_status=found.folds_fit.status)
    return header


def _record_engine_method(setup, report, found, method, validation):
    """A searched method's rows: its best candidate as trained, its best after temperature scaling, and the
    other calibrators' rows of the first."""
    x_val, y_val = validation
    name, count = METHOD_NAMES[method], len(found.indices(method))
    for temps in (False, True):
        index = found.best(method, temps=temps)
        extra = {
            "candidates": count,
            "search_val_nll": float((found.val_nll_scaled if temps else found.val_nll)[index]),
        }
        hyperparameters, model = found.candidates[index][1], found.keras_model(index)
        if not temps:
            report.record(name, None, model, hyperparameters, **extra)
            chosen = (model, hyperparameters, extra)
            continue
        fit = estimate_temperature(found.logits(x_val, index), y_val, estimator=setup.temperature_estimator)
        report.record(f"{name} + TempS", fit, _scaled(model, fit.temperature), hyperparameters, **extra)
    model, hyperparameters, extra = chosen
    _record_calibrated(setup, report, name, model, hyperparameters, **extra)


def _scaled(model, temperature):
    """`model` followed by a fixed `TemperatureScaling(temperature)`."""
    return keras.Sequential(
        [keras.Input(model.input_shape[1:]), model, TemperatureScaling(temperature, trainable=False)],
        name=f"{model.name}_temps",
    )


def _record_calibrated(setup, report, name, model, hyperparameters_used, **extra):
    """The rows of `setup.calibrators` beyond temperature scaling: `model` calibrated on validation, each map."""
    for key in setup.calibrators:
        method, suffix = CALIBRATORS[key]
        if method == "temperature":  # every model has its "+ TempS" row already
            continue
        with setup.strategy.scope():
            calibrated, fit = calibrate(model, setup.validation, method=method, return_fit=True)
        report.record(f"{name} + {suffix}", fit, calibrated, hyperparameters_used, **extra)


def _run_keras(setup, report, methods, fixed, search_space, search, directory, teacher_cache, log):
    """The teacher and each single-fit student by `model.fit`, each searched method by a KerasTuner search, all kept
    in `directory` (a rerun resumes). Returns header items."""
    splits = setup.splits
    os.makedirs(directory, exist_ok=True)
    _same_search_settings(directory, setup)
    teacher_scaled, teacher_fit = _teacher_stage(setup, report, saved_at=os.path.join(directory, "teacher.keras"))
    teacher_logits = compute_teacher_logits(
        teacher_scaled, splits.train, cache_path=teacher_cache or os.path.join(directory, "teacher_logits.npz")
    )
    train_with_teacher = data.with_teacher_targets(splits.train, teacher_logits)
    algorithm = "hyperband" if search == "budget" else "grid"
    chosen = dict(fixed)
    for method in _search_order(methods):
        space = _fixed_space(method, search_space, fixed)
        fits = report.progress.fits(METHOD_NAMES[method], _planned_fits(space, algorithm, setup.recipe.epochs))
        if method in TUNABLE_METHODS and _grid_size(space) > 1:
            if log:
                log(_search_cost(method, space, algorithm, setup.recipe.epochs))
            spec = _SearchSpec(setup, space, algorithm, None, directory)
            tuner = _search(spec, method, teacher_scaled, [fits])
            best_trial = tuner.oracle.get_best_trials(1)[0]
            used = {name: best_trial.hyperparameters.get(name) for name in tuner.hypermodel.space}
            found = {
                "candidates": _grid_size(space),
                "trials": len(tuner.oracle.trials),
                "search_val_nll": best_trial.score,
            }
            student = tuning.best_student(tuner)
        else:
            values = {name: values[0] for name, values in space.items()}
            loss, train_set, used = _student_setup(
                method, splits, teacher_logits, train_with_teacher, {**chosen, **values}
            )
            settings = _student_settings(setup, method, used, teacher_logits)
            saved_at = os.path.join(directory, f"student_{method}.keras")
            found, student = {}, _single_fit_student(setup, loss, train_set, [fits], saved_at, settings)
        report.progress.stage_done()
        if method == "ls":
            chosen.setdefault("epsilon", used["epsilon"])
        if method in methods:
            _record_student(setup, report, METHOD_NAMES[method], student, used, **found)
    return dict(
        teacher_fit=teacher_fit,
        engine="keras-tuner",
        algorithm=algorithm if any(m in TUNABLE_METHODS for m in methods) else None,
    )


def _student_settings(setup, method, hyperparameters_used, teacher_logits) -> dict:
    """What a single-fit student depends on, as JSON reads it back: its search directory's settings
    (`_run_settings`), its method and values, and the teacher and training data (the teacher-logits cache's
    fingerprint)."""
    settings = {"method": method, "hyperparameters": hyperparameters_used, "teacher_logits": teacher_logits.fingerprint}
    return {**_run_settings(setup), **json.loads(json.dumps(settings))}


def _run_settings(setup) -> dict:
    """What a search directory's teacher, targets and trials depend on, as JSON reads it back (tuples as lists): the
    temperature fit, the data, the model, the seed and the recipe."""
    splits = setup.splits
    settings = {
        "temperature_fit": setup.temperature_estimator,
        "dataset": splits.name,
        "num_classes": splits.num_classes,
        "input_shape": splits.input_shape,
        "model": setup.model_name,
        "seed": setup.seed,
        "recipe": vars(setup.recipe),
    }
    return json.loads(json.dumps(settings))


def _single_fit_student(setup, loss, train_set, callbacks, saved_at, settings):
    """A student trained by one `model.fit`, or loaded from `saved_at` when it was saved there with `settings`.

    The settings are kept beside the model (`student_METHOD.json`); a student
    saved with other settings is trained again and replaced.
    """
    settings_path = saved_at.removesuffix(".keras") + ".json"
    if os.path.exists(saved_at) and os.path.exists(settings_path):
        with open(settings_path) as file:
            if json.load(file) == settings:
                return _load_model(saved_at, setup.strategy)
    if os.path.exists(settings_path):  # a kill after the new model is saved must not pair it with these settings
        os.remove(settings_path)
    student = _train_model(setup, loss, train_set, setup.seed, callbacks)
    _save_model(student, saved_at)
    atomic_write(settings_path, lambda file: file.write(json.dumps(settings, indent=2).encode()))
    return student


def _search_order(methods) -> list:
    """The order `run` trains `methods` in by KerasTuner: LS first (cLS and Beta take its epsilon), added if they
    need it and it is not asked for."""
    order = sorted(methods, key=lambda m: m != "ls")
    if any(m in ("cls", "beta") for m in methods) and "ls" not in methods:
        order = ["ls"] + order
    return order


def _fixed_space(method, search_space, fixed) -> dict:
    """`{hyperparameter: values}` that `method` tries: the grid's, one value where `fixed` has it."""
    if method not in TUNABLE_METHODS:
        return {}
    space = (
        tuning.make_search_space(method, search_space)
        if isinstance(search_space, str)
        else {name: tuple(search_space[name]) for name in tuning.METHOD_HYPERPARAMETERS[method]}
    )
    return {name: (fixed[name],) if name in fixed else values for name, values in space.items()}


def _grid_size(space) -> int:
    return int(np.prod([len(values) for values in space.values()])) if space else 1


def hyperband_epochs(max_epochs: int, factor: int = HYPERBAND_FACTOR) -> tuple[int, int]:
    """`(models, epochs)` at most that one iteration of KerasTuner's Hyperband trains for `max_epochs`.

    KerasTuner's `HyperbandOracle` runs brackets `b = B-1, ..., 0` (`B` the
    number of times `max_epochs` divides by `factor` down to 1), each with
    rounds `r = 0..b` of `ceil(ceil(1 + log_factor(max_epochs)) / (b + 1) * factor^(b - r))`
    models trained to `ceil(max_epochs / factor^(b - r))` epochs; a model
    carried into the next round resumes from its checkpoint, so a round costs
    only its extra epochs. Early stopping makes the real cost lower.

    Example:

    >>> hyperband_epochs(9)   # brackets of 9 models (1, 3, 9 epochs), 5 (3, 9) and 3 (9): 21 + 27 + 27 epochs
    (17, 75)
    """
    models_total = epochs_total = 0
    for round_, size, extra_epochs in _hyperband_rounds(max_epochs, factor):
        models_total += size if round_ == 0 else 0
        epochs_total += size * extra_epochs
    return models_total, epochs_total


def _hyperband_rounds(max_epochs, factor=HYPERBAND_FACTOR):
    """`(round, trials, extra epochs per trial)` of every round of every bracket of one Hyperband iteration."""
    brackets, epochs = 0, float(max_epochs)
    while epochs >= 1:
        epochs, brackets = epochs / factor, brackets + 1
    end_size = math.ceil(1 + math.log(max_epochs, factor))
    for bracket in range(brackets):
        done = 0
        for round_ in range(bracket + 1):
            size = math.ceil(end_size / (bracket + 1) * factor ** (bracket - round_))
            target = math.ceil(max_epochs / factor ** (bracket - round_))
            yield round_, size, target - done
            done = target


def _planned_fits(space, algorithm, max_epochs, max_trials=None) -> int:
    """How many `fit`s (KerasTuner trials) a search of `space` plans: the progress bar's share of it."""
    if _grid_size(space) <= 1:
        return 1
    if algorithm == "hyperband":
        return sum(size for _, size, _ in _hyperband_rounds(max_epochs))
    return min(max_trials or _grid_size(space), _grid_size(space))


def _search_cost(method, space, algorithm, max_epochs) -> str:
    """The line `run` logs before a KerasTuner search: what it will train at most."""
    candidates = _grid_size(space)
    if algorithm == "grid":
        return (
            f"{METHOD_NAMES[method]}: the full grid, {candidates} models of up to {max_epochs} epochs "
            f"(at most {candidates * max_epochs} epochs)"
        )
    models_total, epochs_total = hyperband_epochs(max_epochs)
    return (
        f"{METHOD_NAMES[method]}: Hyperband over {candidates} candidates, at most {models_total} models and "
        f"{epochs_total} epochs (= {epochs_total / max_epochs:.1f} full trainings; --search full: {candidates})"
    )


def _teacher_stage(setup, report, saved_at=None):
    """The No LS teacher, its rows ("No LS", "No LS + TempS") and its fit: `(calibrated teacher, TemperatureFit)`.

    With `saved_at`, the teacher is loaded from there when it exists (and
    calibrated again: the same fit on the same data gives the same `T*`),
    else saved there once trained and calibrated.
    """
    if saved_at is not None and os.path.exists(saved_at):
        teacher = _load_model(saved_at, setup.strategy).layers[-2]  # calibrate() puts it before TemperatureScaling
        teacher_scaled, fit = _calibrated(teacher, setup)
    else:
        fits = [report.progress.fits("No LS (teacher)", 1)]
        teacher = _train_model(setup, ILSLoss(method="none"), setup.splits.train, setup.seed, fits)
        teacher_scaled, fit = _calibrated(teacher, setup)
        if saved_at is not None:
            _save_model(teacher_scaled, saved_at)
    report.progress.stage_done()  # also when loaded
    report.record("No LS", None, teacher, {})
    report.record("No LS + TempS", fit, teacher_scaled, {})
    _record_calibrated(setup, report, "No LS", teacher, {})
    return teacher_scaled, fit


def _record_student(setup, report, name, student, hyperparameters_used, **extra):
    """The student's rows: as trained, and temperature-scaled on the validation set ("+ TempS")."""
    report.record(name, None, student, hyperparameters_used, **extra)
    student_scaled, fit = _calibrated(student, setup)
    report.record(f"{name} + TempS", fit, student_scaled, hyperparameters_used, **extra)
    _record_calibrated(setup, report, name, student, hyperparameters_used, **extra)


TUNABLE_METHODS = tuple(tuning.METHOD_HYPERPARAMETERS)  # ls, ils1, ils2, ils
ENGINES = ("auto", "keras-tuner")


def tune(
    splits,
    *,
    model_name: str,
    methods=("ls", "ils"),
    search_space="paper",
    algorithm: str = "grid",
    max_trials: int | None = None,
    recipe: training.Recipe | None = None,
    directory: str,
    output_dir: str,
    strategy: tf.distribute.Strategy | None = None,
    seed: int = 0,
    verbose: int = 0,
    temperature_estimator: str = "map",
    engine: str = "auto",
) -> dict:
    """The paper's tuning protocol: one teacher, then a KerasTuner search per method, then the best students.

    With `engine="auto"` a whole-grid search (`algorithm="grid"`, no
    `max_trials`) of a plain MLP on vector data outside KerasTuner's
    distributed mode is `run`'s: every candidate at once by the vectorised
    engine (`keras_ils.experiments.engine.students`), in seconds, nothing kept in
    `directory`. `engine="keras-tuner"` always searches with KerasTuner.

    The teacher is trained, temperature-scaled and kept in `directory`
    (`teacher.keras`, `teacher_logits.npz`) with one KerasTuner project per
    method beside it, so running `tune` again on the same `directory` resumes:
    the teacher is loaded, the cached logits are reused, completed trials are
    not run again. Every method gets the same budget (`algorithm`,
    `max_trials`) and the same seeds (every trial starts from the weights of
    `seed`), so they differ only in their loss. The best trial of each method
    (lowest validation cross-entropy against hard labels) is evaluated on the
    test set as trained and temperature-scaled ("+TempS").

    Args:
        splits: a `keras_ils.experiments.data.datasets.Splits`.
        model_name: a name for `keras_ils.experiments.zoo.models.build`.
        methods: from `TUNABLE_METHODS`. Defaults to `("ls", "ils")`.
        search_space: `"paper"` or `"synthetic"` (`keras_ils.tuning.GRIDS`).
        algorithm: `"grid"`, `"random"`, `"bayesian"` or `"hyperband"`.
        max_trials: trials per method. Defaults to `None` (the whole grid).
        recipe: training recipe; defaults to `training.recipe_for(model_name, splits.name)`.
        directory: KerasTuner's directory (teacher, cache and trials).
        output_dir: where `results.json`, `results.csv` and the reliability
            diagrams go (written only when everything succeeded).
        strategy: a `tf.distribute` strategy for every model.
        seed: seeds the teacher, every trial's initial weights, shuffling and the oracle.
        verbose: KerasTuner/Keras verbosity.
        temperature_estimator: as in `run`. Defaults to `"map"`.
        engine: `"auto"` or `"keras-tuner"` (see above). Defaults to `"auto"`.

    Returns:
        The results dict that `results.json` holds.
    """
    role = _check_tune_arguments(methods, search_space, algorithm)
    if engine not in ENGINES:
        raise invalid("engine", f"one of {ENGINES}", engine)
    setup = _Setup.make(splits, model_name, recipe, strategy, seed, verbose, temperature_estimator)
    if engine == "auto" and role is None and algorithm == "grid" and max_trials is None and uses_engine(setup):
        return run(
            splits,
            model_name=model_name,
            methods=methods,
            search_space=search_space,
            recipe=setup.recipe,
            output_dir=output_dir,
            strategy=setup.strategy,
            seed=seed,
            verbose=verbose,
            temperature_estimator=temperature_estimator,
        )
    spec = _SearchSpec(setup, search_space, algorithm, max_trials, directory)
    os.makedirs(directory, exist_ok=True)
    _same_search_settings(directory, setup)
    teacher_path = os.path.join(directory, "teacher.keras")
    if role == "worker":  # trains trials for the chief's oracle; the chief makes the teacher and the report
        _search(spec, methods[0], _wait_for(teacher_path, setup.strategy))
        return {"role": "worker", "method": methods[0], "directory": directory}

    planned = {
        m: _planned_fits(_fixed_space(m, search_space, {}), algorithm, setup.recipe.epochs, max_trials) for m in methods
    }
    progress = _Progress(1 + sum(planned.values()), verbose)
    with staged_directory(output_dir, RESULT_FILES) as staging:
        report = _Report(splits, staging, progress)
        teacher_scaled, teacher_fit = _teacher_stage(setup, report, saved_at=teacher_path)
        for method in methods:
            tuner = _search(spec, method, teacher_scaled, [progress.fits(METHOD_NAMES[method], planned[method])])
            progress.stage_done()
            best_trial = tuner.oracle.get_best_trials(1)[0]
            chosen = {name: best_trial.hyperparameters.get(name) for name in tuner.hypermodel.space}
            found = {"trials": len(tuner.oracle.trials), "search_val_nll": best_trial.score}
            _record_student(setup, report, METHOD_NAMES[method], tuning.best_student(tuner), chosen, **found)
        settings = {"algorithm": algorithm, "search_space": search_space, "max_trials": max_trials}
        return report.write(setup.header(teacher_fit, **settings))


def _same_search_settings(directory, setup):
    """A search directory keeps the settings it was made with (`search_settings.json`): its teacher, cached targets
    and trials depend on the data, the model, the seed, the recipe and the temperature fit (`_run_settings`), so
    resuming it with others is a `ValueError` naming the first that differs, never a silent mix."""
    settings = _run_settings(setup)
    path = os.path.join(directory, "search_settings.json")
    if not os.path.exists(path):
        atomic_write(path, lambda file: file.write(json.dumps(settings, indent=2).encode()))
        return
    with open(path) as file:
        made_with = json.load(file)
    for name, value in settings.items():
        if made_with.get(name) != value:
            raise ValueError(
                f"The search in {directory} was made with {name} {made_with.get(name)!r}, not {value!r}: its "
                "teacher, targets and trials depend on it. Resume with the same settings, or use another directory."
            )


def _check_tune_arguments(methods, search_space, algorithm):
    """`tune`'s arguments checked before anything trains; returns the KerasTuner role (`_keras_tuner_role`)."""
    if not methods or any(m not in TUNABLE_METHODS for m in methods):
        raise ValueError(
            f"Invalid value for argument `methods`. Expected some of {TUNABLE_METHODS}. Received: {methods}"
        )
    for method in methods:
        tuning.make_search_space(method, search_space)
    if algorithm not in tuning.ALGORITHMS:
        raise ValueError(
            f"Invalid value for argument `algorithm`. Expected one of {tuning.ALGORITHMS}. Received: {algorithm!r}"
        )
    role = _keras_tuner_role()
    if role is not None and len(methods) != 1:
        raise ValueError(
            "KerasTuner's distributed mode (KERASTUNER_* variables are set) runs one search per launch: "
            f"pass one method. Received: methods={tuple(methods)}"
        )
    return role


def _search(spec, method, teacher_scaled, callbacks=()):
    """One method's KerasTuner search on the calibrated teacher's cached targets; returns the tuner."""
    setup = spec.setup
    cache = os.path.join(spec.directory, "teacher_logits.npz")
    teacher_logits = compute_teacher_logits(teacher_scaled, setup.splits.train, cache_path=cache)
    train_with_teacher = data.with_teacher_targets(setup.splits.train, teacher_logits)
    # made anew in every trial (after the trial's seed is set): a resumed trial sees the batches it saw uninterrupted
    make_train = lambda: training.training_pipeline(train_with_teacher, setup.recipe, setup.seed)  # noqa: E731

    hypermodel = tuning.ILSHyperModel(
        lambda hp: _compiled_model(setup),
        setup.splits.num_classes,
        method=method,
        search_space=spec.search_space,
        patience=setup.recipe.patience,
        seed=setup.seed,
    )
    tuner = tuning.tuner_for(
        spec.algorithm,
        hypermodel,
        directory=spec.directory,
        project_name=method,
        max_trials=spec.max_trials,
        max_epochs=setup.recipe.epochs,
        seed=setup.seed,
        distribution_strategy=setup.strategy,
    )
    recipe = setup.recipe
    callbacks = list(callbacks)
    if recipe.decay_at:
        callbacks.append(keras.callbacks.LearningRateScheduler(lambda epoch, lr: recipe.learning_rate_at(epoch)))
    tuner.search(
        make_train, validation_data=setup.validation, epochs=recipe.epochs, callbacks=callbacks, verbose=setup.verbose
    )
    return tuner


def _keras_tuner_role():
    """`None` outside KerasTuner's distributed mode, else `"chief"` or `"worker"`."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return None
    return "chief" if os.environ.get("KERASTUNER_TUNER_ID") == "chief" else "worker"


def _load_model(path, strategy):
    with strategy.scope():
        return keras.saving.load_model(path)


def _wait_for(teacher_path, strategy, timeout=3600.0):
    """A worker waits (like KerasTuner's own client, up to an hour) for the chief's saved teacher."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(teacher_path):
        if time.monotonic() > deadline:
            raise ValueError(f"No teacher appeared at {teacher_path} within {timeout:.0f} s; is the chief running?")
        time.sleep(1.0)
    return _load_model(teacher_path, strategy)


def _save_model(model, path):
    """`model.save(path)` through a temporary file, so a crash leaves no half-written model."""
    temporary = os.path.join(os.path.dirname(path), f".{os.getpid()}.{os.path.basename(path)}")
    try:
        model.save(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


class _Progress:
    """`run`'s and `tune`'s progress on stderr, in Keras' `fit` style: a line naming each stage ("ILS: 10 models,
    about 2:10 left in all"), then Keras' `Progbar` over that stage's models, with its own ETA.

    A stage counts fits (`fits`: a search's trials, one `model.fit` each; a
    search that stops early or resumes finished trials jumps to its end) or
    the table's rows scored (`rows`, after the vectorised engine has trained
    everything at once). The overall estimate is the mean time per fit so far.
    """

    def __init__(self, planned_fits: int, verbose: int, say=print):
        self.planned, self.shown, self.done, self.started = planned_fits, verbose == 0, 0, time.monotonic()
        self.say = say  # takes each stage line
        self.bar, self.count, self.position, self.counts_rows = None, 0, 0, False

    def fits(self, name: str, count: int) -> keras.callbacks.Callback:
        """Opens the stage of the next `count` fits of `name`; returns the callback that advances it as each ends
        (KerasTuner deep-copies callbacks into every trial: the state lives in a closure, which deep copies share)."""
        self._open(name, count, "model", counts_rows=False)

        def end():
            if self.position < count:
                self.position += 1
                self.bar.update(self.position)

        return _FitEnd(end)

    def rows(self, count: int):
        """Opens the stage of scoring the table's `count` rows (`scored` advances it)."""
        self._open("scoring the table's rows", count, "row", counts_rows=True)

    def scored(self):
        if self.counts_rows and self.position < self.count:
            self.position += 1
            self.bar.update(self.position)

    def stage_done(self):
        if self.position < self.count:
            self.position = self.count
            self.bar.update(self.count)

    def _open(self, name, count, unit, counts_rows):
        if self.bar is not None and not self.counts_rows:
            self.done += self.count
        left = ""
        elapsed = time.monotonic() - self.started
        if self.done and self.planned > self.done:
            seconds = round(elapsed / self.done * (self.planned - self.done))
            left = f", about {seconds // 60}:{seconds % 60:02d} left in all"
        if self.shown:
            self.say(f"{name}: {count} {unit}{'s' if count != 1 else ''}{left}")
        self.bar = keras.utils.Progbar(count, unit_name=unit, verbose=_bar_verbosity(self.shown))
        self.count, self.position, self.counts_rows = count, 0, counts_rows


def _bar_verbosity(shown: bool) -> int:
    """Keras' `Progbar` verbosity: 1 (the live bar) on a terminal, 2 (one line as each stage ends) when the
    progress goes to a file or a pipe, where the bar's carriage returns and colours would garble the log.
    `Progbar` writes to `sys.stdout`, which `keras-ils` points at stderr."""
    if not shown:
        return 0
    return 1 if getattr(sys.stdout, "isatty", lambda: False)() else 2


class _FitEnd(keras.callbacks.Callback):
    def __init__(self, on_end):
        super().__init__()
        self.on_end = on_end

    def on_train_end(self, logs=None):
        self.on_end()


class _Report:
    """Scores models on the test set; keeps their rows and reliability diagrams in the staging directory."""

    def __init__(self, splits, staging, progress):
        self.splits, self.staging, self.progress = splits, staging, progress
        self.test = training.evaluation_pipeline(splits.test)
        self.rows, self.curves = [], {}

    def record(self, name, fit, model, hyperparameters_used, **extra):
        """A model's row: test scores, reliability diagram, the model saved as `.keras`, progress."""
        outputs, labels = data.predict_with_labels(model, self.test)
        result = evaluation.evaluate_outputs(outputs, labels, groups=self.splits.test_groups)
        probabilities, _ = evaluation.probabilities(outputs)
        slug = name.lower().replace(" ", "_").replace("+", "plus")
        plots.reliability_diagram(
            probabilities, labels, os.path.join(self.staging, f"reliability_{slug}.png"), title=name
        )
        model.save(os.path.join(self.staging, f"model_{slug}.keras"))
        self.curves[name] = evaluation.top_label_bins(probabilities, labels)
        self.rows.append({**_row(name, fit, hyperparameters_used, result), **extra})
        self.progress.scored()

    def write(self, header: dict) -> dict:
        """`results.json` (header + rows) and `results.csv`; returns the results."""
        bins = {
            name: dict(zip(("counts", "correct", "confidence"), np.asarray(b).tolist(), strict=True))
            for name, b in self.curves.items()
        }
        results = {**header, "rows": self.rows, "reliability_bins": bins}  # the comparison figure's, to redraw
        with open(os.path.join(self.staging, "results.json"), "w") as file:
            json.dump(results, file, indent=2)
        _write_csv(self.rows, os.path.join(self.staging, "results.csv"))
        scores = {row["model"]: {c: row["all"][c] for c in ("nll", "ece", "cwece")} for row in self.rows}
        title = f"{header['dataset']} / {header['model']}"
        plots.comparison(self.curves, scores, os.path.join(self.staging, "comparison.png"), title=title)
        return results


def _compiled_model(setup, loss=None):
    """`setup`'s network with the recipe's weight decay on its kernels, compiled with the recipe's optimizer."""
    splits, recipe = setup.splits, setup.recipe
    with setup.strategy.scope():
        model = models.build(setup.model_name, splits.num_classes, splits.input_shape, recipe.weight_decay)
        model.compile(
            optimizer=recipe.build_optimizer(),
            loss=loss,
            metrics=[_metrics.TopLabelAccuracy(from_logits=True), _metrics.NegativeLogLikelihood(from_logits=True)],
        )
    return model


def train_model(splits, model_name: str, loss, train_set, *, recipe=None, seed: int = 0, strategy=None, verbose=0):
    """One network trained as `run` trains each student: `model_name`'s recipe, early stopping on validation NLL.

    Args:
        splits: a `keras_ils.experiments.data.datasets.Splits` (its validation split is monitored).
        model_name: a name for `keras_ils.experiments.zoo.models.build`.
        loss: the Keras loss, e.g. `keras_ils.ILSLoss(method="ls", epsilon=0.1)` or
            `keras_ils.distillation.DistillationCrossEntropy()`.
        train_set: unbatched `(x, y)` (or `(x, (y, teacher_logits))`) training dataset matching `loss`.
        recipe: training recipe; defaults to `training.recipe_for(model_name, splits.name)`.
        seed: seeds the initial weights and the shuffling.
        strategy: a `tf.distribute` strategy; defaults to the current one.
        verbose: Keras `fit` verbosity.

    Returns:
        The compiled, trained Keras model (logits out), at its best validation epoch.
    """
    setup = _Setup.make(splits, model_name, recipe, strategy, seed, verbose)
    return _train_model(setup, loss, train_set, seed)


def _train_model(setup, loss, train_set, model_seed, callbacks=()):
    keras.utils.set_random_seed(model_seed)
    model = _compiled_model(setup, loss)
    validation, verbose = setup.splits.validation, setup.verbose
    training.fit(
        model,
        train_set,
        validation,
        setup.recipe,
        monitor="val_nll",
        seed=model_seed,
        verbose=verbose,
        callbacks=callbacks,
    )
    return model


def _calibrated(model, setup):
    """`(model followed by its fitted TemperatureScaling, the TemperatureFit)`."""
    with setup.strategy.scope():
        return calibrate(model, setup.validation, estimator=setup.temperature_estimator, return_fit=True)


def _write_csv(rows, path):
    groups = [g for g in rows[0] if isinstance(rows[0][g], dict) and g != "hyperparameters"]
    header = ["model", "temps", "temperature", "temperature_status", "validation_examples", "hyperparameters"]
    header += [f"{g}_{c}" if g != "all" else c for g in groups for c in (*evaluation.COLUMNS, "count")]
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for row in rows:
            temperature = "" if row["temperature"] is None else f"{row['temperature']:.6g}"
            values = [row["model"], row["temps"], temperature, row["temperature_status"] or ""]
            values += [row["validation_examples"] or "", json.dumps(row["hyperparameters"])]
            values += [row[g][c] for g in groups for c in (*evaluation.COLUMNS, "count")]
            writer.writerow(values)


SUMMARY_FILES = ("summary.json", "comparison.png")
SUMMARY_METRICS = ("accuracy", "nll", "ece", "cwece")


def summarise_seeds(results: list, output_dir: str) -> dict:
    """Each row's mean, standard deviation and range over several seeds' `run` results; writes `summary.json` and
    a `comparison.png` that draws the spread (`keras_ils.plots.comparison` with every seed's bins and scores).

    Args:
        results: the dicts `run` returned (or their `results.json`), one per seed, with the same rows.
        output_dir: where `summary.json` and `comparison.png` go (each written atomically).

    Returns:
        `{"dataset", "model", "seeds", "rows": [{"model", metric: {"mean", "std", "min", "max", "values"}}]}`.
    """
    names = [row["model"] for row in results[0]["rows"]]
    if any([row["model"] for row in r["rows"]] != names for r in results):
        raise ValueError("Argument `results`: every seed's results must have the same rows.")
    rows = []
    for i, name in enumerate(names):
        row = {"model": name}
        for metric in SUMMARY_METRICS:
            values = np.array([r["rows"][i]["all"][metric] for r in results], dtype=np.float64)
            spread = dict(mean=values.mean(), std=values.std(ddof=1) if len(values) > 1 else 0.0)
            row[metric] = {**spread, "min": values.min(), "max": values.max(), "values": values.tolist()}
        rows.append(row)
    summary = {
        "dataset": results[0]["dataset"],
        "model": results[0]["model"],
        "seeds": [r["seed"] for r in results],
        "rows": rows,
    }
    os.makedirs(output_dir, exist_ok=True)
    atomic_write(os.path.join(output_dir, "summary.json"), lambda f: f.write(json.dumps(summary, indent=2).encode()))
    curves = {
        name: [tuple(r["reliability_bins"][name][k] for k in ("counts", "correct", "confidence")) for r in results]
        for name in names
    }
    scores = {row["model"]: {m: row[m]["values"] for m in ("nll", "ece", "cwece")} for row in rows}
    title = f"{summary['dataset']} / {summary['model']}"
    plots.comparison(curves, scores, os.path.join(output_dir, "comparison.png"), title=title)
    return summary


def format_summary(summary: dict) -> str:
    """The table `keras-ils run --seeds N` prints: every row's mean ± standard deviation over the seeds."""
    seeds = summary["seeds"]
    header = f"{'model':<16}" + "".join(f"{name:>20}" for name in ("accuracy", "NLL", "ECE", "cwECE"))
    lines = [
        f"{summary['dataset']} / {summary['model']}: mean ± standard deviation over {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))})",
        header,
        "-" * len(header),
    ]
    for row in summary["rows"]:
        cells = [f"{100 * row['accuracy']['mean']:.2f} ± {100 * row['accuracy']['std']:.2f}%"]
        cells += [f"{row[m]['mean']:.4f} ± {row[m]['std']:.4f}" for m in ("nll", "ece", "cwece")]
        lines.append(f"{row['model']:<16}" + "".join(f"{cell:>20}" for cell in cells))
    return "\n".join(lines)


def format_table(results: dict) -> str:
    """The comparison table printed by `keras-ils run`."""
    groups = [
        g for g in results["rows"][0] if isinstance(results["rows"][0][g], dict) and g not in ("all", "hyperparameters")
    ]
    header = f"{'model':<16}{'T':>7}{'T fit':>13}{'accuracy':>10}" + "".join(f"{'acc ' + g:>12}" for g in groups)
    header += f"{'NLL':>9}{'ECE':>9}{'cwECE':>9}{'paper-cwECE':>13}  hyperparameters"
    lines = [
        f"{results['dataset']} / {results['model']}: teacher T* = {results['teacher_temperature']:.4f} "
        f"({results['teacher_temperature_status']}; {results['temperature_estimator']} fit on "
        f"{results['validation_examples']} validation examples)",
        "cwECE = classwise-ECE (paper Eq. 2); paper-cwECE = the authors' code's variant printed in the paper",
        header,
        "-" * len(header),
    ]
    for row in results["rows"]:
        a = row["all"]
        temperature = "-" if row["temperature"] is None else f"{row['temperature']:.3f}"
        line = f"{row['model']:<16}{temperature:>7}{row['temperature_status'] or '-':>13}"
        line += f"{100 * a['accuracy']:>9.2f}%"
        line += "".join(f"{100 * row[g]['accuracy']:>11.2f}%" for g in groups)
        line += f"{a['nll']:>9.4f}{a['ece']:>9.4f}{a['cwece']:>9.4f}{a['class_conditional_ece']:>13.4f}  "
        line += ", ".join(f"{k}={v:g}" for k, v in row["hyperparameters"].items())
        if row.get("candidates", 1) > 1:
            line += f" (best of {row['candidates']})"
        lines.append(line)
    if results.get("tuned") is False:
        lines.append("Hyperparameters fixed (not tuned): the paper's method selects them on validation NLL.")
    return "\n".join(lines)
