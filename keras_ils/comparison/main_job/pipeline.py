"""The whole method on one dataset: teacher -> T* -> cached teacher logits -> students -> TempS -> table.

`run` is what `keras-ils run` calls and `tune` what `keras-ils tune` calls;
both take the data and one `RunConfig`. They are plain Keras underneath
(`fit`, callbacks, `tf.distribute` scopes) and write their results
atomically: files are staged in a hidden folder inside the output directory
and moved in only when everything succeeded, in place of the result set the
package wrote there before and nothing else (`keras_ils._files`).

The methods are `keras_ils.methods` entries: what each trains on, its loss,
its grids and what it reports come from its entry, so a registered method
runs here without any other edit.
"""

from __future__ import annotations

import os

import keras

from keras_ils import _outputs, methods, tuning
from keras_ils._files import staged_directory
from keras_ils.comparison import networks
from keras_ils.comparison.engine import students
from keras_ils.comparison.main_job import engine_path, keras_path
from keras_ils.comparison.main_job.budget import fixed_space, planned_fits
from keras_ils.comparison.main_job.config import RESULT_FILES, RunConfig
from keras_ils.comparison.main_job.fitting import (
    TRAINING_SETS,
    Setup,
    keras_tuner_role,
    record_student,
    uses_engine,
    wait_for,
)
from keras_ils.comparison.main_job.progress import Progress
from keras_ils.comparison.main_job.report import Report
from keras_ils.comparison.main_job.resume import same_search_settings
from keras_ils.teacher import check_cache_data, compute_teacher_logits

__all__ = ["check_tune", "run", "tune"]


def run(splits, config: RunConfig) -> dict:
    """The paper's method on one dataset: teacher, `T*`, every student tuned on validation NLL, TempS, the table.

    Every method with hyperparameters (LS, ILS1, ILS2, ILS, and any you
    register) is selected on the validation cross-entropy against hard
    labels over its grid (`config.search_space`); cLS and Beta take LS's
    chosen epsilon, as the paper does. A method's "+ TempS" row is its
    candidate with the lowest validation NLL after its own temperature
    scaling. How the candidates train:

    - a plain MLP on vector data (`model_name="mlp"` with the MLP recipe):
      every candidate of the methods whose targets are fixed per example at
      once by `keras_ils.comparison.engine.students.search_students` (the
      paper's 180 students in about a minute on 2 CPU cores); the others
      (BS_Soft and Beta, whose targets depend on the student) by `model.fit`;
    - any other model: one KerasTuner search per method, in the search
      directory (resumable): `search="budget"` (default) is Hyperband
      (successive halving, factor 3, up to the recipe's epochs), `"full"` the
      whole grid. Its cost is logged before anything trains. The teacher and
      every student trained by one `model.fit` (Dis, cLS, BS_Soft, Beta, and
      every `tune=False` student) are kept there too, so a killed run
      resumes without training them again.

    Args:
        splits: a `keras_ils.comparison.data.datasets.Splits`.
        config: a `RunConfig` (`output_dir` required).

    Returns:
        The results dict that `results.json` holds
        (`keras_ils.comparison.reporting.results`).
    """
    _check_outputs(splits, config, "run")
    return _run(Setup.make(splits, config))


def _check_outputs(splits, config, command):
    """An output directory, and a teacher-logits cache that belongs to these data, before anything trains."""
    if config.output_dir is None:
        raise ValueError(f"Argument `config`: `{command}` needs `config.output_dir`, where its results go.")
    if config.teacher_cache is not None and os.path.exists(config.teacher_cache):
        # an unreadable file, or one of other data, fails now, not after the teacher has trained
        check_cache_data(config.teacher_cache, splits.train, splits.num_classes)


def _run(setup: Setup) -> dict:
    """`run` of a completed setup: the checks, then the vectorised engine or the KerasTuner path, the results."""
    config, engine = setup.config, uses_engine(setup)
    _check_run(setup, engine)
    progress = Progress(_planned_fits(setup, engine), config.verbose, config.log or print)
    with staged_directory(config.output_dir, RESULT_FILES, **_output_rule(config)) as staging:
        report = Report(setup.splits, staging, progress, config.conformal)
        search_space = config.search_space if isinstance(config.search_space, str) else "custom"
        header = engine_path.run_engine(setup, report) if engine else keras_path.run_keras(setup, report)
        settings = dict(tuned=config.tune, search_space=search_space)
        return report.write(setup.header(header.pop("teacher_fit"), **settings, **header))


def _output_rule(config) -> dict:
    """`staged_directory`'s settings of a run: its search directory kept where it is the default one, inside
    `output_dir`, and its teacher cache an input that a new result set must not replace."""
    return {
        "kept": () if config.directory else ("search",),
        "inputs": [config.teacher_cache] if config.teacher_cache else [],
        "argument": "output_dir",
    }


def _check_model(setup):
    """Builds the model once on the data's shape, so a name or shape it cannot take fails before anything is written."""
    config, splits = setup.config, setup.splits
    if config.build_model is not None:
        return _check_built_model(config.build_model, splits)
    config.check_examples(splits, "x")
    try:
        shape = _output_shape(networks.build(config.model_name, splits.num_classes, splits.input_shape))
        if shape is not None and shape != (None, splits.num_classes):
            raise ValueError(f"it outputs shape {shape}, not [n, {splits.num_classes}]")
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"Invalid value for argument `--model` (model). {config.model_name!r} cannot take {splits.name}'s "
            f"examples, shaped {tuple(splits.input_shape)} with {splits.num_classes} classes: {error}"
        ) from error


def _output_shape(model) -> tuple | None:
    """A functional or Sequential model's output shape; `None` for a model that knows it only once called."""
    try:
        return tuple(model.output_shape)
    except (AttributeError, ValueError):
        return None


def _check_built_model(build_model, splits):
    """`build_model(K)` must return a new Keras model (a second call is checked to be another) that takes one batch
    of the data's examples and outputs `[n, K]` logits: refused before anything trains, naming what is wrong."""
    model = build_model(splits.num_classes)
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"Argument `build_model` must return a keras.Model; build_model({splits.num_classes}) returned "
            f"{type(model).__name__}."
        )
    if _outputs.model_ends_in_softmax(model):
        raise ValueError(
            f"Argument `build_model`: its model ends in a softmax; the comparison trains on logits (every loss "
            f"and calibrator reads them). Remove the softmax (e.g. Dense({splits.num_classes}) without "
            "activation); keras_ils.calibrate and evaluate read softmax models, training does not."
        )
    batch = next(iter(splits.validation.batch(2)))[0]
    try:
        outputs = model(batch)
    except Exception as error:  # noqa: BLE001  (whatever the user's model raises on the data, said with the data)
        raise ValueError(
            f"Argument `build_model`: its model cannot take {splits.name}'s examples, shaped "
            f"{tuple(splits.input_shape)}: {type(error).__name__}: {error}"
        ) from error
    if tuple(outputs.shape)[1:] != (splits.num_classes,):
        raise ValueError(
            f"Argument `build_model`: its model must output [n, {splits.num_classes}] logits for "
            f"{splits.num_classes} classes; it outputs shape {tuple(outputs.shape)}."
        )
    _check_new_models(build_model, model, batch, splits.num_classes)


def _check_new_models(build_model, model, batch, num_classes):
    """A second `build_model(K)` must be a new model, sharing no trainable weight with the first: otherwise every
    network of the comparison trains on from the last one's weights (a student from the trained teacher's)."""
    again = build_model(num_classes)
    if again is not model:
        again(batch)  # built, so that its weights exist
        first = {id(weight) for weight in model.trainable_weights}
        if not any(id(weight) in first for weight in again.trainable_weights):
            return
    what = "the same model object" if again is model else "a model that shares trainable weights with the first"
    raise ValueError(
        f"Argument `build_model` must return a new model on every call: a second build_model({num_classes}) "
        f"returned {what}, so each network of the comparison would train on from the previous one's weights (each "
        "student from the trained teacher's). Build the layers inside the function (or return "
        "`keras.models.clone_model(model)`)."
    )


def _check_run(setup, engine):
    """What `run` refuses before anything trains: bad grids or fixed values, settings the path cannot do, a model
    that cannot take the data."""
    config = setup.config
    _check_model(setup)
    for method in config.methods:  # a bad grid or fixed value fails before anything trains
        fixed_space(method, config.search_space, setup.fixed)
    if config.teacher_folds > 1 and not engine:
        raise ValueError(
            f"Argument `teacher_folds` > 1 needs a plain MLP on vector data (the vectorised engine); "
            f"received model {config.model_name!r} on {setup.splits.name}."
        )
    searches = any(methods.get(m).tunable for m in config.methods if not (engine and methods.get(m).engine))
    if config.tune and config.search == "budget" and searches and config.recipe.epochs < 2:
        raise ValueError(
            "The budgeted search (Hyperband) needs at least 2 epochs; received epochs="
            f"{config.recipe.epochs}. Give more epochs, or use --search full (search='full') or --no-tune (tune=False)."
        )


def _planned_fits(setup, engine) -> int:
    """The `model.fit`s `run` plans (the progress bar's total): the teacher's (unless the engine trains it) and each
    method's outside the engine (one, or its search's trials)."""
    config = setup.config
    algorithm = keras_path.ALGORITHMS[config.search]
    outside = [m for m in keras_path.search_order(config.methods) if not (engine and methods.get(m).engine)]
    fits = [
        planned_fits(fixed_space(m, config.search_space, setup.fixed), algorithm, config.recipe.epochs) for m in outside
    ]
    return sum(fits) + (0 if engine else 1)


def tune(splits, config: RunConfig) -> dict:
    """The paper's tuning protocol: one teacher, then a KerasTuner search per method, then the best students.

    With `config.engine="auto"` a whole-grid search (`algorithm="grid"`, no
    `max_trials`) of a plain MLP on vector data outside KerasTuner's
    distributed mode is `run`'s: every candidate at once by the vectorised
    engine (`keras_ils.comparison.engine.students`), in seconds, nothing
    kept in the directory. `engine="keras-tuner"` always searches with KerasTuner.

    The teacher is trained, temperature-scaled and kept in `config.directory`
    (`teacher.keras`, `teacher_logits.npz`) with one KerasTuner project per
    method beside it, so running `tune` again on the same directory resumes:
    the teacher is loaded, the cached logits are reused, completed trials are
    not run again. Every method gets the same budget (`algorithm`,
    `max_trials`) and the same seeds (every trial starts from the weights of
    `seed`), so they differ only in their loss. The best trial of each method
    (lowest validation cross-entropy against hard labels) is evaluated on the
    test set as trained and temperature-scaled ("+TempS").

    Args:
        splits: a `keras_ils.comparison.data.datasets.Splits`.
        config: a `RunConfig` whose methods are tunable
            (`keras_ils.methods.ids(tunable=True)`); `tune` reads its
            `algorithm`, `max_trials` and `engine` beside the common settings.

    Returns:
        The results dict that `results.json` holds; in KerasTuner's
        distributed mode a worker returns `{"role": "worker", ...}`.
    """
    role = check_tune(config)
    if role != "worker":  # a KerasTuner worker only trains trials; the chief writes the results
        _check_outputs(splits, config, "tune")
    setup = Setup.make(splits, config)
    config = setup.config
    whole_grid = config.algorithm == "grid" and config.max_trials is None
    if config.engine == "auto" and role is None and whole_grid and uses_engine(setup):
        return _run(setup)  # the whole grid at once is run's search
    spec = keras_path.SearchSpec(setup, config.algorithm, config.max_trials, config.directory)
    os.makedirs(config.directory, exist_ok=True)
    same_search_settings(config.directory, setup)
    teacher_path = os.path.join(config.directory, "teacher.keras")
    if role == "worker":  # trains trials for the chief's oracle; the chief makes the teacher and the report
        method = config.methods[0]
        keras_path.search(spec, method, *_search_of(setup, method, wait_for(teacher_path, config.strategy)))
        return {"role": "worker", "method": method, "directory": config.directory}
    epochs = config.recipe.epochs
    planned = {
        m: planned_fits(fixed_space(m, config.search_space, {}), config.algorithm, epochs, config.max_trials)
        for m in config.methods
    }
    progress = Progress(1 + sum(planned.values()), config.verbose)
    with staged_directory(config.output_dir, RESULT_FILES, **_output_rule(config)) as staging:
        report = Report(setup.splits, staging, progress, config.conformal)
        teacher_scaled, teacher_fit = keras_path.teacher_stage(setup, report, saved_at=teacher_path)
        for method in config.methods:
            fits = [progress.fits(methods.get(method).name, planned[method], "trial")]
            tuner = keras_path.search(spec, method, *_search_of(setup, method, teacher_scaled), fits)
            progress.stage_done()
            best_trial = tuner.oracle.get_best_trials(1)[0]
            chosen = {name: best_trial.hyperparameters.get(name) for name in tuner.hypermodel.space}
            found = {"trials": len(tuner.oracle.trials), "search_val_nll": best_trial.score}
            record_student(setup, report, methods.get(method).name, tuning.best_student(tuner), chosen, **found)
        settings = {"algorithm": config.algorithm, "search_space": config.search_space, "max_trials": config.max_trials}
        return report.write(setup.header(teacher_fit, **settings))


def _search_of(setup, method, teacher_scaled) -> tuple:
    """`(space, training set)` of `method`'s search in `tune`: its grid, and its targets from the calibrated teacher's
    logits, cached at `teacher_cache`, else in the search directory (as `run` caches them)."""
    cache = setup.config.teacher_cache or os.path.join(setup.config.directory, "teacher_logits.npz")
    teacher_logits = compute_teacher_logits(teacher_scaled, setup.splits.train, cache_path=cache)
    space = fixed_space(method, setup.config.search_space, {})
    return space, TRAINING_SETS[methods.get(method).teacher](setup.splits, teacher_logits)


def check_tune(config: RunConfig):
    """`tune`'s settings checked before anything trains; returns the KerasTuner role (`keras_tuner_role`)."""
    tunable = methods.ids(tunable=True)
    if not config.methods or any(m not in tunable for m in config.methods):
        raise ValueError(
            f"Invalid value for argument `methods`. Expected some of {tunable}. Received: {config.methods}"
        )
    for method in config.methods:  # a bad grid fails before anything trains
        students.method_space(method, config.search_space or "paper")
    if config.algorithm not in tuning.ALGORITHMS:
        raise ValueError(
            "Invalid value for argument `algorithm`. Expected one of "
            f"{tuning.ALGORITHMS}. Received: {config.algorithm!r}"
        )
    role = keras_tuner_role()
    if role is not None and len(config.methods) != 1:
        raise ValueError(
            "KerasTuner's distributed mode (KERASTUNER_* variables are set) runs one search per launch: "
            f"pass one method. Received: methods={tuple(config.methods)}"
        )
    return role
