"""The whole method on one dataset: teacher -> T* -> cached teacher logits -> students -> TempS -> table.

`run` is what `keras-ils run` calls; it is plain Keras underneath (`fit`,
callbacks, `tf.distribute` scopes) and writes its results atomically: files
are staged in a temporary directory beside the output directory and moved in
only when everything succeeded.
"""

from __future__ import annotations

import os

import tensorflow as tf

from keras_ils import tuning
from keras_ils._checks import integer_at_least, invalid
from keras_ils._files import staged_directory
from keras_ils.experiments.engine import students, training
from keras_ils.experiments.main_job.budget import _fixed_space, _planned_fits
from keras_ils.experiments.main_job.config import (
    ALL_METHODS,
    ENGINES,
    METHOD_NAMES,
    RESULT_FILES,
    SEARCHES,
    STUDENT_METHODS,
    TUNABLE_METHODS,
    default_hyperparameters,
)
from keras_ils.experiments.main_job.engine_path import _run_engine
from keras_ils.experiments.main_job.fitting import _keras_tuner_role, _Setup, _wait_for, uses_engine
from keras_ils.experiments.main_job.keras_path import _run_keras, _search, _search_order, _SearchSpec, _teacher_stage
from keras_ils.experiments.main_job.progress import _Progress
from keras_ils.experiments.main_job.report import _record_student, _Report
from keras_ils.experiments.main_job.resume import _same_search_settings
from keras_ils.teacher import read_cache


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
