"""`run` on a plain MLP on vectors: every candidate at once by the vectorised engine."""

from __future__ import annotations

from keras_ils.calibration import estimate_temperature
from keras_ils.experiments.engine import students
from keras_ils.experiments.main_job import fitting
from keras_ils.experiments.main_job.config import METHOD_NAMES
from keras_ils.experiments.main_job.fitting import _scaled, _student_setup
from keras_ils.experiments.main_job.report import _record_calibrated, _record_student
from keras_ils.experiments.zoo import models
from keras_ils.teacher import compute_teacher_logits


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
        trained[method] = fitting._train_model(setup, loss, train_set, setup.seed, fits), used
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
