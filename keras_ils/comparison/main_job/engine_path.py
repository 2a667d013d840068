"""`run` on a plain MLP on vectors: every candidate at once by the vectorised engine, the rest by `model.fit`.

The methods whose loss has a functional form (`keras_ils.methods.Method.engine`,
`methods.ids(engine=True)`, read through `keras_ils.losses.functional_form`)
train all their candidates side by side in
`keras_ils.comparison.engine.students.search_students`. The others
(`methods.ids(engine=False)`: losses that only `model.fit` can step) train
by `model.fit` from the same seed's initial weights, after the engine, with
the values they borrow taken from the engine's choices; one with several
candidates of its own is searched by KerasTuner (`keras_path.train_student`).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from keras_ils import methods
from keras_ils.calibration import TemperatureFitWarning
from keras_ils.comparison import networks
from keras_ils.comparison.engine import students, vectorised
from keras_ils.comparison.main_job.fitting import Setup, record_calibrated, record_student, scaled, warnings_of
from keras_ils.comparison.main_job.keras_path import (
    ALGORITHMS,
    SearchSpec,
    Students,
    lenders,
    lent_by,
    search_order,
    teacher_method,
    train_student,
)
from keras_ils.comparison.main_job.report import Report
from keras_ils.teacher import TeacherLogits, cache_teacher_logits

__all__ = ["record_engine_method", "run_engine", "search_settings"]


def _arrays(dataset):
    """`(features, labels)` numpy arrays of an unbatched `(x, y)` dataset, in order."""
    x, y = dataset.batch(1 << 30).get_single_element()
    return x.numpy(), y.numpy()


def search_settings(setup: Setup, searched) -> students.SearchSettings:
    """The engine's settings for `searched` methods from the run's: the grids, the fixed values, the MLP recipe."""
    config = setup.config
    hidden_layers, units = networks.mlp_shape(config.model_name)
    recipe = config.recipe
    training = vectorised.MLPTraining(
        learning_rate=recipe.learning_rate,
        batch_size=recipe.batch_size,
        epochs=recipe.epochs,
        patience=recipe.patience,
        hidden_layers=hidden_layers,
        units=units,
        pool_size=students.POOL_SIZE,
        weight_decay=recipe.weight_decay or 0.0,
    )
    return students.SearchSettings(
        methods=tuple(searched),
        search_space=config.search_space,
        fixed=setup.fixed,
        training=training,
        seed=config.seed,
        teacher_folds=config.teacher_folds,
        temperature_estimator=config.temperature_estimator,
    )


def run_engine(setup: Setup, report: Report) -> dict:
    """Every engine method's candidates by `students.search_students`, the others by `model.fit`; their rows.
    Returns header items."""
    config, splits = setup.config, setup.splits
    engine_methods = tuple(m for m in config.methods if methods.get(m).engine)
    others = tuple(m for m in config.methods if not methods.get(m).engine)
    searched = engine_methods + tuple(m for m in lenders(others) if m not in engine_methods)
    (x_train, y_train), validation = _arrays(splits.train), _arrays(splits.validation)
    if config.log:
        config.log("Training every candidate side by side (vectorised engine)")
    with warnings_of(f"{methods.get(teacher_method()).name} + TempS (the teacher's T*)"):
        found = students.search_students(
            x_train, y_train, *validation, search_settings(setup, searched), num_classes=splits.num_classes
        )
    if config.log:
        config.log(f"{len(found.candidates)} models trained in {found.seconds:.1f} s (vectorised engine)")
    teacher_logits = TeacherLogits(found.teacher_logits, np.asarray(y_train, np.int64), None)
    trained = _train_others(setup, report, found, others, teacher_logits)
    report.progress.rows((1 + len(config.methods)) * (1 + len(config.calibrators)))  # as trained, then each calibrator
    model_of = functools.cache(found.keras_model)  # each candidate's Keras model built once, for all its rows
    _record_teacher(setup, report, found, model_of)
    for method in engine_methods:
        record_engine_method(setup, report, found, method, model_of)
    for method in others:
        student, used, extra = trained[method]
        record_student(setup, report, methods.get(method).name, student, used, **extra)
    if config.teacher_cache is not None:  # the calibrated teacher's logits the targets came from, kept (or checked)
        cache_teacher_logits(
            model_of(0),
            splits.train,
            found.teacher_logits,
            temperature=found.teacher_fit.temperature,
            cache_path=config.teacher_cache,
        )
    header = dict(teacher_fit=found.teacher_fit, engine="vectorised", models_trained=len(found.candidates))
    header.update(search_seconds=round(found.seconds, 2), teacher_folds=config.teacher_folds)
    if found.folds_fit is not None:
        header.update(folds_temperature=found.folds_fit.temperature, folds_temperature_status=found.folds_fit.status)
    return header


def _train_others(setup, report, found, others, teacher_logits) -> dict:
    """`{method: (student, reported settings, search facts)}` of the methods the engine cannot train, each from the
    seed's initial weights like every candidate of the engine, with what it borrows from the engine's choices."""
    chosen = dict(setup.fixed)
    for method in found.methods:
        for name in lent_by(method):  # LS's epsilon, for Beta
            chosen.setdefault(name, found.candidates[found.best(method)][1][name])
    spec = SearchSpec(setup, ALGORITHMS[setup.config.search], None, setup.config.directory)
    trainer = Students(setup, report, teacher_logits, spec, keep=False)
    trained = {}
    for method in (m for m in search_order(others) if m not in found.methods):  # the engine trained the lenders
        trained[method] = train_student(trainer, method, chosen)
        for name in lent_by(method):
            chosen.setdefault(name, trained[method][1][name])
    return trained


def _record_teacher(setup, report, found, model_of):
    """The teacher's rows: as trained, temperature-scaled by its `T*`, and the other calibrators'."""
    name, teacher = methods.get(teacher_method()).name, model_of(0)
    report.record(name, None, teacher, {})
    report.record(f"{name} + TempS", found.teacher_fit, scaled(teacher, found.teacher_fit.temperature), {})
    record_calibrated(setup, report, name, teacher, {})


def record_engine_method(setup: Setup, report: Report, found, method: str, model_of) -> None:
    """A searched method's rows: its best candidate as trained, its best after temperature scaling, and the
    other calibrators' rows of the first; `model_of(index)` gives a candidate's Keras model."""
    name, count = methods.get(method).name, len(found.indices(method))
    for temps in (False, True):
        index = found.best(method, temps=temps)
        extra = {
            "candidates": count,
            "search_val_nll": float((found.val_nll_scaled if temps else found.val_nll)[index]),
        }
        # the fixed settings and derived values beside the tuned ones, as the keras path reports them (MbLS's alpha)
        hyperparameters = methods.get(method).reported(setup.splits.num_classes, **found.candidates[index][1])
        model = model_of(index)
        if not temps:
            report.record(name, None, model, hyperparameters, **extra)
            chosen = (model, hyperparameters, extra)
            continue
        fit = found.temperature_fits[index]  # fitted once, in the search that chose it
        if fit.warning:
            with warnings_of(f"{name} + TempS"):
                warnings.warn(fit.warning, TemperatureFitWarning, stacklevel=2)
        report.record(f"{name} + TempS", fit, scaled(model, fit.temperature), hyperparameters, **extra)
    model, hyperparameters, extra = chosen
    record_calibrated(setup, report, name, model, hyperparameters, **extra)
