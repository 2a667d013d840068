"""`run` and `tune` by KerasTuner: the teacher, one search per method, the single-fit students."""

from __future__ import annotations

import dataclasses
import os

import keras

from keras_ils import data, tuning
from keras_ils.experiments.engine import training
from keras_ils.experiments.main_job import fitting
from keras_ils.experiments.main_job.budget import _fixed_space, _grid_size, _planned_fits, _search_cost
from keras_ils.experiments.main_job.config import METHOD_NAMES, TUNABLE_METHODS
from keras_ils.experiments.main_job.fitting import (
    _calibrated,
    _compiled_model,
    _load_model,
    _save_model,
    _Setup,
    _student_setup,
)
from keras_ils.experiments.main_job.report import _record_calibrated, _record_student
from keras_ils.experiments.main_job.resume import _same_search_settings, _single_fit_student, _student_settings
from keras_ils.losses import ILSLoss
from keras_ils.teacher import compute_teacher_logits


@dataclasses.dataclass(frozen=True)
class _SearchSpec:
    """The searches of one `tune`: one KerasTuner project per method in `directory`, all alike but the loss."""

    setup: _Setup
    search_space: object  # "paper", "synthetic" or a dict (keras_ils.tuning.make_search_space)
    algorithm: str
    max_trials: int | None
    directory: str


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


def _search_order(methods) -> list:
    """The order `run` trains `methods` in by KerasTuner: LS first (cLS and Beta take its epsilon), added if they
    need it and it is not asked for."""
    order = sorted(methods, key=lambda m: m != "ls")
    if any(m in ("cls", "beta") for m in methods) and "ls" not in methods:
        order = ["ls"] + order
    return order


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
        teacher = fitting._train_model(setup, ILSLoss(method="none"), setup.splits.train, setup.seed, fits)
        teacher_scaled, fit = _calibrated(teacher, setup)
        if saved_at is not None:
            _save_model(teacher_scaled, saved_at)
    report.progress.stage_done()  # also when loaded
    report.record("No LS", None, teacher, {})
    report.record("No LS + TempS", fit, teacher_scaled, {})
    _record_calibrated(setup, report, "No LS", teacher, {})
    return teacher_scaled, fit


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
