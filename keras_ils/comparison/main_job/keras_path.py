"""`run` and `tune` by `model.fit` and KerasTuner: the teacher, one search per method, the single-fit students.

Every model here is a Keras model trained by `model.fit`: the teacher, each
student of a method with one candidate (`train_student`), and each trial of
a method's KerasTuner search (`search`). The searches, the teacher and the
single-fit students are kept in the search directory, so a killed run
resumes where it stopped (`keras_ils.comparison.main_job.resume`).
"""

from __future__ import annotations

import dataclasses
import os

import keras

from keras_ils import methods, tuning
from keras_ils.comparison.engine import training
from keras_ils.comparison.main_job import fitting
from keras_ils.comparison.main_job.budget import fixed_space, grid_size, hyperband_epochs, planned_fits, search_cost
from keras_ils.comparison.main_job.fitting import (
    TRAINING_SETS,
    Setup,
    calibrated,
    record_calibrated,
    record_student,
    student_setup,
)
from keras_ils.comparison.main_job.report import Report
from keras_ils.comparison.main_job.resume import same_search_settings, single_fit_student, student_settings
from keras_ils.teacher import TeacherLogits, compute_teacher_logits

__all__ = [
    "ALGORITHMS",
    "SearchSpec",
    "Students",
    "lenders",
    "lent_by",
    "run_keras",
    "search",
    "search_algorithm",
    "search_order",
    "teacher_method",
    "teacher_stage",
    "train_student",
]

ALGORITHMS = {"budget": "hyperband", "full": "grid"}  # run's `search` as KerasTuner algorithms


@dataclasses.dataclass(frozen=True)
class SearchSpec:
    """The searches of one run: one KerasTuner project per method in `directory`, all alike but the loss."""

    setup: Setup
    algorithm: str
    max_trials: int | None
    directory: str


@dataclasses.dataclass(frozen=True)
class Students:
    """What the students trained by `model.fit` share: the run, its report, the teacher's rows and the searches.

    Attributes:
        setup: the run's `Setup`.
        report: the run's `Report` (its progress counts the fits).
        teacher_logits: the calibrated teacher's `keras_ils.teacher.TeacherLogits`
            on the training split.
        spec: where and how methods with several candidates are searched.
        keep: whether single-fit students are kept in the search directory
            (`resume.single_fit_student`), so that a rerun loads them.
    """

    setup: Setup
    report: Report
    teacher_logits: TeacherLogits
    spec: SearchSpec
    keep: bool


def teacher_method() -> str:
    """The registry's entry trained in every run, the teacher of the others (No LS)."""
    return methods.ids(selectable=False)[0]


def lenders(chosen) -> tuple:
    """The methods whose choices the methods `chosen` borrow (`keras_ils.methods.Method.borrows`), e.g. LS for cLS."""
    return tuple(dict.fromkeys(methods.lender(name) for m in chosen for name in methods.get(m).borrows))


def lent_by(method: str) -> tuple:
    """The hyperparameters whose chosen value `method` lends (`keras_ils.methods.lender`): LS's epsilon."""
    names = methods.get(method).hyperparameters
    return names if len(names) == 1 and methods.lender(names[0]) == method else ()


def search_order(chosen) -> list:
    """The order `run` trains `chosen` in by `model.fit`: the lenders of any method first (LS: cLS and Beta take
    its epsilon), added if a method of `chosen` borrows from them and they are not chosen."""
    lending = lenders(methods.ids())
    order = sorted(chosen, key=lambda m: m not in lending)
    return [m for m in lenders(chosen) if m not in chosen] + order


def run_keras(setup: Setup, report: Report) -> dict:
    """The teacher and each single-fit student by `model.fit`, each searched method by a KerasTuner search, all kept
    in the search directory (a rerun resumes). Returns header items."""
    config = setup.config
    os.makedirs(config.directory, exist_ok=True)
    same_search_settings(config.directory, setup)
    teacher_scaled, teacher_fit = teacher_stage(setup, report, saved_at=os.path.join(config.directory, "teacher.keras"))
    cache = config.teacher_cache or os.path.join(config.directory, "teacher_logits.npz")
    teacher_logits = compute_teacher_logits(teacher_scaled, setup.splits.train, cache_path=cache)
    spec = SearchSpec(setup, ALGORITHMS[config.search], None, config.directory)
    students = Students(setup, report, teacher_logits, spec, keep=True)
    chosen = dict(setup.fixed)
    for method in search_order(config.methods):
        student, used, found = train_student(students, method, chosen)
        for name in lent_by(method):  # LS's epsilon, for cLS and Beta
            chosen.setdefault(name, used[name])
        if method in config.methods:
            record_student(setup, report, methods.get(method).name, student, used, **found)
    tuned = any(methods.get(m).tunable for m in config.methods)
    return dict(teacher_fit=teacher_fit, engine="keras-tuner", algorithm=spec.algorithm if tuned else None)


def search_algorithm(space: dict, algorithm: str, max_epochs: int) -> str:
    """The KerasTuner algorithm `run` searches `space` with: `algorithm`, except that a budgeted search (Hyperband)
    of a grid that trains whole within Hyperband's own plan is the full grid.

    KerasTuner's Hyperband ends once its first round has drawn every value of
    the grid, so on a small grid it would pick among candidates trained only
    for the first bracket's few epochs (3 of 500); the full grid trains each
    to the end, in fewer epochs than Hyperband plans.

    Example:

    >>> search_algorithm({"alpha": (0.25, 0.5, 0.75)}, "hyperband", 500)   # 1,500 epochs; Hyperband plans 18,546
    'grid'
    >>> search_algorithm({name: tuple(range(5)) for name in ("p1", "p2", "temperature")}, "hyperband", 500)
    'hyperband'
    """
    if algorithm == "hyperband" and grid_size(space) * max_epochs <= hyperband_epochs(max_epochs)[1]:
        return "grid"
    return algorithm


def train_student(students: Students, method: str, values: dict) -> tuple:
    """One method's student: the best of its KerasTuner search when it has several candidates, else one `model.fit`.

    Args:
        students: what the run's students share.
        method: a registered id.
        values: the values chosen so far: the run's fixed values (`setup.fixed`, which alone narrow the
            search) and the lenders' choices (what it borrows).

    Returns:
        `(student as trained, its reported settings, search facts for its row)`.
    """
    setup, entry = students.setup, methods.get(method)
    epochs = setup.config.recipe.epochs
    space = fixed_space(method, setup.config.search_space, setup.fixed)
    spec = dataclasses.replace(students.spec, algorithm=search_algorithm(space, students.spec.algorithm, epochs))
    unit = "trial" if grid_size(space) > 1 else "model"  # a search's fits are KerasTuner's trials
    fits = students.report.progress.fits(entry.name, planned_fits(space, spec.algorithm, epochs), unit)
    if grid_size(space) > 1:
        if setup.config.log:
            setup.config.log(search_cost(method, space, spec.algorithm, epochs))
        os.makedirs(students.spec.directory, exist_ok=True)
        same_search_settings(students.spec.directory, setup)  # a resumed search must be this run's
        train_set = TRAINING_SETS[entry.teacher](setup.splits, students.teacher_logits)
        borrowed = {name: values[name] for name in entry.borrows}
        tuner = search(spec, method, space, train_set, [fits], borrowed)
        best_trial = tuner.oracle.get_best_trials(1)[0]
        used = {name: best_trial.hyperparameters.get(name) for name in tuner.hypermodel.space}
        found = {"candidates": grid_size(space), "trials": len(tuner.oracle.trials), "search_val_nll": best_trial.score}
        student = tuning.best_student(tuner)
        used = entry.reported(setup.splits.num_classes, **used, **borrowed)
    else:
        one = {name: candidates[0] for name, candidates in space.items()}
        loss, train_set, used = student_setup(setup, method, students.teacher_logits, {**values, **one})
        found, student = {}, _single_fit(students, method, loss, train_set, used, [fits])
    students.report.progress.stage_done()
    return student, used, found


def _single_fit(students, method, loss, train_set, used, callbacks):
    """A student of one `model.fit`: kept in (and reloaded from) the search directory when `students.keep`; the
    callbacks its method's loss needs (`Method.training_callbacks`: OLS's) added."""
    setup = students.setup
    callbacks = [*callbacks, *methods.get(method).training_callbacks(loss)]
    if not students.keep:
        return fitting.fit_network(setup, loss, train_set, callbacks)
    settings = student_settings(setup, method, used, students.teacher_logits)
    saved_at = os.path.join(students.spec.directory, f"student_{method}.keras")
    return single_fit_student(setup, loss, train_set, callbacks, saved_at, settings)


def teacher_stage(setup: Setup, report: Report, saved_at=None):
    """The No LS teacher, its rows ("No LS", "No LS + TempS") and its fit: `(calibrated teacher, CalibratorFit)`.

    With `saved_at`, the teacher is loaded from there when it exists (and
    calibrated again: the same fit on the same data gives the same `T*`),
    else saved there once trained and calibrated.
    """
    entry = methods.get(teacher_method())
    if saved_at is not None and os.path.exists(saved_at):
        # calibrate() puts the teacher before its TemperatureScaling layer
        teacher = fitting.load_model(saved_at, setup.config.strategy).layers[-2]
        teacher_scaled, fit = calibrated(teacher, setup, f"{entry.name} + TempS")
    else:
        fits = [report.progress.fits(f"{entry.name} (teacher)", 1)]
        loss = entry.loss(setup.splits.num_classes)
        teacher = fitting.fit_network(setup, loss, setup.splits.train, [*fits, *entry.training_callbacks(loss)])
        teacher_scaled, fit = calibrated(teacher, setup, f"{entry.name} + TempS")
        if saved_at is not None:
            fitting.save_model(teacher_scaled, saved_at)
    report.progress.stage_done()  # also when loaded
    report.record(entry.name, None, teacher, {})
    report.record(f"{entry.name} + TempS", fit, teacher_scaled, {})
    record_calibrated(setup, report, entry.name, teacher, {})
    return teacher_scaled, fit


def search(spec: SearchSpec, method: str, space, train_set, callbacks=(), borrowed=None):
    """One method's KerasTuner search of `space` on `train_set` (unbatched, the method's targets); returns the tuner.

    `borrowed` holds the values the method borrows (`keras_ils.methods.Method.borrows`), the same in every trial.
    """
    setup = spec.setup
    config, recipe = setup.config, setup.config.recipe
    # made anew in every trial (after the trial's seed is set): a resumed trial sees the batches it saw uninterrupted
    make_train = lambda: training.training_pipeline(train_set, recipe, config.seed)  # noqa: E731
    hypermodel = tuning.ILSHyperModel(
        lambda hp: fitting.compiled_model(setup),
        setup.splits.num_classes,
        method=method,
        search_space=space,
        patience=recipe.patience,
        seed=config.seed,
        loss_options=borrowed,
    )
    tuner = tuning.tuner_for(
        spec.algorithm,
        hypermodel,
        directory=spec.directory,
        project_name=method,
        max_trials=spec.max_trials,
        max_epochs=recipe.epochs,
        seed=config.seed,
        distribution_strategy=config.strategy,
    )
    callbacks = list(callbacks)
    if recipe.decay_at:
        callbacks.append(keras.callbacks.LearningRateScheduler(lambda epoch, lr: recipe.learning_rate_at(epoch)))
    tuner.search(
        make_train, validation_data=setup.validation, epochs=recipe.epochs, callbacks=callbacks, verbose=config.verbose
    )
    return tuner
