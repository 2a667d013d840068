"""The paper's tables by one command each: Table 3 and the distillation table, resumable, ranked, beside the paper's.

`run_table("3", pairs, seeds=..., output_dir=...)` is `keras-ils benchmark
paper --table 3`: for every `(dataset, model)` pair and seed it runs the main
job, `keras_ils.experiments.main_job.pipeline.run(..., methods=pipeline.ALL_METHODS)`,
which tunes every method on the validation NLL over the paper's grids and
gives the paper's 12 columns (No LS, No LS + TempS, Dis, cLS, BS_Soft, Beta,
LS, LS + TempS, ILS1, ILS2, ILS, ILS + TempS). `run_table("distillation", ...)`
gives the paper's knowledge-distillation table (`tab:distil`): per pair a
teacher of the named architecture trained with No LS, with LS and with ILS
(the main job with `methods=("ls", "ils")`, tuned the same way; the teachers
are its saved `model_no_ls.keras`, `model_ls.keras` and `model_ils.keras`), then
the AlexNet-style student (`alexnet`) distilled from each by
`keras_ils.distillation.DistillationCrossEntropy(weight=0.9,
teacher_temperature=20, student_temperature=1)` on the teacher's RAW logits
(Hinton et al.'s T = 20, as the paper's code applies it; not the calibrated
logits that ILS reads), trained by the student recipe
(`keras_ils.experiments.engine.training`), evaluated as trained.

Layout of `output_dir` (every file written atomically):

- `runs/DATASET/MODEL/seedN/`: one pair and seed. Table 3: the main job's
  output (`results.json`, `results.csv`, reliability diagrams, and for image
  models its KerasTuner `search/` directory). Distillation: `teachers/` (the
  main job's output for the teachers) and `students/{no_ls,ls,ils}.json`.
- `table3.md` / `distillation.md`: per metric the table in the paper's layout
  (rows the pairs, columns the methods, each cell `mean (rank)` over the
  seeds, best in bold), the average ranks, the Friedman test, then, only when
  it rejects at `ALPHA` (Demšar's procedure), the post-hoc tests (Nemenyi;
  Bonferroni-Dunn against `CONTROL`), and the paper's printed values for the
  pairs that are the paper's, ranked the same way.
- `table3.json` / `distillation.json`: the same numbers, with every seed's.
- `cd_TABLE_METRIC_{nemenyi,bonferroni-dunn}.png`: critical-difference diagrams.

Resuming: a pair and seed whose results exist is read, not trained again
(Table 3: its `results.json`; distillation: each student's JSON). Inside an
unfinished image run the main job resumes from its `search/` directory: the
teacher, finished KerasTuner trials and the single models it trains outside a
search (Dis, cLS, BS_Soft, Beta) are kept, each of the last reused only with
the settings it was trained with; the MLP engine's runs (seconds) are trained
again. A kept result made with other epochs, batch size or temperature fit
than the command asks for is an error, never reused in silence.

Progress: with a `log`, the main job's stage lines go through it, each
prefixed by its pair and seed (`"lenet / cifar10 seed 0 · ILS: 10 models,
about 2:10 left in all"`: the time left in that run), with Keras' progress
bars on stdout; after each run, the time left in the whole table. Without a
`log`, nothing is printed.

Scores are means over seeds (the paper reports the mean of two); ranks are
taken on the means (to 12 decimals, so float noise never splits a tie), 1 for
the best, ties averaged (`keras_ils.experiments.reporting.ranks`). `cwECE` is the package's classwise-ECE
(Eq. 2); `paper-cwECE` is the authors' code's variant that the paper printed
(`class_conditional_ece`), so the paper's cwECE column is set beside that one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import warnings

import numpy as np

from keras_ils._checks import integer_at_least, invalid
from keras_ils._files import check_writable
from keras_ils.experiments.reporting.ranked_tables import (
    COLUMNS,
    KD_SETTINGS,
    PAIRS,
    STUDENT,
    _check_table,
    _slug,
    _write_json,
    pair_label,
    summarise,
    write_outputs,
)

TEACHER_METHODS = ("ls", "ils")  # the distillation teachers besides No LS, tuned by the main job


# The paper's splits: CIFAR 45K/5K, SVHN train + extra 598K/6K; anything else the package's 20 % validation.
PAPER_SPLITS = {
    "tfds:cifar10": dict(validation_size=5000),
    "tfds:cifar100": dict(validation_size=5000),
    "tfds:svhn_cropped": dict(validation_size=6000, train_splits=("train", "extra")),
}


def pairs_for(table: str, datasets=None, models=None) -> list[tuple[str, str]]:
    """The `(dataset, model)` pairs a table runs.

    Neither given: the paper's pairs of `table`. Both: every model on every
    dataset. One: the paper's pairs with those datasets (or models).

    Example:

    >>> pairs_for("3", models=["resnet152sd"])
    [('tfds:svhn_cropped', 'resnet152sd')]
    >>> pairs_for("3", datasets=["iris.npz", "synthetic"], models=["mlp"])
    [('iris.npz', 'mlp'), ('synthetic', 'mlp')]
    """
    _check_table(table)
    if datasets and models:
        return [(dataset, model) for dataset in datasets for model in models]
    chosen = [
        (dataset, model)
        for dataset, model in PAIRS[table]
        if (not datasets or dataset in datasets) and (not models or model in models)
    ]
    if not chosen:
        known = ", ".join(f"{d} {m}" for d, m in PAIRS[table])
        raise ValueError(
            f"No pair of the paper's table {table} has datasets={datasets} models={models} (its pairs: {known}). "
            "Give both --datasets and --models to run every model on every dataset."
        )
    return chosen


def run_directory(output_dir, pair, seed) -> str:
    dataset, model = pair
    return os.path.join(output_dir, "runs", _slug(dataset), _slug(model), f"seed{seed}")


def load_splits(dataset, seed, *, data_dir=None, validation_fraction=None):
    """The pair's data for one seed: the paper's split for its datasets, else 20 % validation.

    `validation_fraction`, when given, replaces the paper's splits for every dataset.
    """
    from keras_ils.experiments.data import datasets

    options = {} if validation_fraction is not None else dict(PAPER_SPLITS.get(dataset, {}))
    if validation_fraction is not None:
        options["validation_fraction"] = validation_fraction
    if not dataset.startswith("tfds:"):
        options.pop("validation_size", None)
        options.pop("train_splits", None)
    return datasets.load(dataset, data_dir=data_dir, seed=seed, **options)


def run_table(
    table: str,
    pairs,
    *,
    seeds=(0,),
    output_dir: str,
    search: str = "budget",
    epochs: int | None = None,
    batch_size: int | None = None,
    data_dir: str | None = None,
    validation_fraction: float | None = None,
    temperature_estimator: str = "map",
    verbose: int = 0,
    command: str | None = None,
    log=None,
) -> dict:
    """Runs (or resumes) every pair and seed of `table`, then writes its tables and diagrams; returns the summary.

    Args:
        table: `"3"` or `"distillation"`.
        pairs: `(dataset, model)` pairs (`pairs_for`); datasets as
            `keras_ils.experiments.data.datasets.load` takes them.
        seeds: the seeds of every pair. Defaults to `(0,)`.
        output_dir: where the runs, tables and diagrams go (module docstring).
        search: the main job's search for image models, `"budget"`
            (Hyperband, needs `epochs >= 2`) or `"full"`. Defaults to `"budget"`.
        epochs: replaces every recipe's epochs (tiny runs). Defaults to the paper's.
        batch_size: replaces every recipe's batch size. Defaults to the paper's.
        data_dir: tensorflow-datasets data directory.
        validation_fraction: replaces the paper's splits (`PAPER_SPLITS`) and
            the 20 % default for every dataset.
        temperature_estimator: every `T*` fit (`pipeline.run`). Defaults to `"map"`.
        verbose: `pipeline.run`'s: 0 (default) its stage lines and one progress
            bar per stage, 1 Keras' bar for every epoch, 2 a line per epoch.
        command: the command line recorded in the outputs.
        log: a function taking one line of progress (e.g. `print`), or `None`
            (nothing printed).

    Returns:
        The summary that `TABLE.json` holds.
    """
    _check_table(table)
    pairs = [tuple(pair) for pair in pairs]
    seeds = tuple(seeds)
    if not pairs or not seeds:
        raise invalid("pairs", "at least one pair and one seed", (pairs, seeds))
    for seed in seeds:
        integer_at_least("seeds", seed, 0)
    if len(set(pairs)) < len(pairs) or len({run_directory("", p, 0) for p in pairs}) < len(pairs):
        raise invalid("pairs", "distinct pairs with distinct folder names", pairs)
    check_writable(output_dir)
    log = log or _silent
    runs, trained_seconds = {}, []
    for pair in pairs:
        for seed in seeds:
            directory = run_directory(output_dir, pair, seed)
            options = dict(
                search=search,
                epochs=epochs,
                batch_size=batch_size,
                data_dir=data_dir,
                validation_fraction=validation_fraction,
                temperature_estimator=temperature_estimator,
                verbose=verbose,
            )
            started = time.time()
            one = run_pair_table3 if table == "3" else run_pair_distillation
            scores, trained = one(pair, seed, directory, log=log, **options)
            runs[(pair, seed)] = scores
            state = f"done in {time.time() - started:.0f} s" if trained else "kept from an earlier run"
            trained_seconds += [time.time() - started] if trained else []
            log(f"{pair_label(pair)} seed {seed}: {state}{_left(len(runs), len(pairs) * len(seeds), trained_seconds)}")
    summary = summarise(table, pairs, seeds, runs, command=command)
    write_outputs(summary, output_dir)
    return summary


def _left(done, total, trained_seconds) -> str:
    """`" (3/8 runs; about 1:02:05 left)"`: the mean time of the runs trained so far times the runs left.

    Example:

    >>> _left(3, 8, [600.0, 640.0]), _left(8, 8, [600.0])
    (' (3/8 runs; about 0:51:40 left)', ' (8/8 runs)')
    """
    if done == total or not trained_seconds:
        return f" ({done}/{total} runs)"
    seconds = round(sum(trained_seconds) / len(trained_seconds) * (total - done))
    return f" ({done}/{total} runs; about {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d} left)"


def _recipe(model, dataset_name, epochs, batch_size):
    from keras_ils.experiments.engine import training

    return training.recipe_for(model, dataset_name, epochs=epochs, batch_size=batch_size)


def _silent(line):
    """`run_table`'s log when none is given: no progress at all."""


def _quiet(log):
    """Warnings stay out of the output (results.json keeps the statuses); with no `log`, the main job's progress
    bars too."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    if log is _silent:
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def _prefixed(log, pair, seed):
    """`log` with each line prefixed by the pair and seed, for the main job's lines.

    Example:

    >>> lines = []
    >>> _prefixed(lines.append, ("tfds:cifar10", "lenet"), 0)("ILS: 10 models")
    >>> lines
    ['lenet / cifar10 seed 0 · ILS: 10 models']
    """
    return lambda line: log(f"{pair_label(pair)} seed {seed} · {line}")


def run_pair_table3(pair, seed, directory, *, search, epochs, batch_size, log, **options):
    """One pair and seed of Table 3: `pipeline.run` with every method. Returns `({column: scores}, trained)`."""
    from keras_ils.experiments.main_job import config, pipeline

    path = os.path.join(directory, "results.json")
    trained = not os.path.exists(path)
    if trained:
        dataset, model = pair
        splits = load_splits(
            dataset, seed, data_dir=options["data_dir"], validation_fraction=options["validation_fraction"]
        )
        log(f"{pair_label(pair)} seed {seed}: running the main job with all methods")
        with _quiet(log):
            pipeline.run(
                splits,
                model_name=model,
                methods=config.ALL_METHODS,
                search=search,
                recipe=_recipe(model, splits.name, epochs, batch_size),
                output_dir=directory,
                seed=seed,
                verbose=options["verbose"],
                temperature_estimator=options["temperature_estimator"],
                log=_prefixed(log, pair, seed),
            )
    results = _read_json(path)
    kept = {"epochs": results["recipe"]["epochs"], "batch_size": results["recipe"]["batch_size"]}
    kept["temperature_estimator"] = results["temperature_estimator"]
    _check_kept(path, kept, pair, epochs, batch_size, options["temperature_estimator"])
    rows = {row["model"]: row["all"] for row in results["rows"]}
    return {column: rows[column] for column in COLUMNS["3"]}, trained


def _check_kept(path, kept, pair, epochs, batch_size, temperature_estimator):
    """A kept result made with other epochs, batch size or temperature fit than asked for is an error, not reused."""
    recipe = _recipe(pair[1], "", epochs, batch_size)
    asked = {"epochs": recipe.epochs, "batch_size": recipe.batch_size, "temperature_estimator": temperature_estimator}
    different = {k: (kept.get(k), v) for k, v in asked.items() if kept.get(k) != v}
    if different:
        said = ", ".join(f"{k}={was!r} (asked: {now!r})" for k, (was, now) in different.items())
        raise ValueError(f"{path} was made with {said}. Resume with the same settings, or give another --output-dir.")


def run_pair_distillation(pair, seed, directory, *, search, epochs, batch_size, log, **options):
    """One pair and seed of the distillation table. Returns `({teacher column: student scores}, trained)`."""
    paths = {column: _student_path(directory, column) for column in COLUMNS["distillation"]}
    estimator = options["temperature_estimator"]
    if all(os.path.exists(path) for path in paths.values()):
        for path in paths.values():
            _check_kept(path, _read_json(path), pair, epochs, batch_size, estimator)
        return {column: _read_json(path)["scores"] for column, path in paths.items()}, False
    from keras_ils import data, evaluation
    from keras_ils.distillation import DistillationCrossEntropy
    from keras_ils.experiments.engine import training
    from keras_ils.experiments.main_job import fitting, pipeline
    from keras_ils.teacher import compute_teacher_logits

    dataset, model = pair
    splits = load_splits(
        dataset, seed, data_dir=options["data_dir"], validation_fraction=options["validation_fraction"]
    )
    recipe = _recipe(model, splits.name, epochs, batch_size)
    if not splits.is_image:
        raise ValueError(
            f"The distillation table's student ({STUDENT}) is a convolutional network: it needs image data. "
            f"Received: {dataset!r}, examples shaped {splits.input_shape}."
        )
    teachers_dir = os.path.join(directory, "teachers")
    if not os.path.exists(os.path.join(teachers_dir, "results.json")):
        log(f"{pair_label(pair)} seed {seed}: teachers (No LS, LS, ILS tuned by the main job)")
        with _quiet(log):
            pipeline.run(
                splits,
                model_name=model,
                methods=TEACHER_METHODS,
                search=search,
                recipe=recipe,
                output_dir=teachers_dir,
                seed=seed,
                verbose=options["verbose"],
                temperature_estimator=estimator,
                log=_prefixed(log, pair, seed),
            )
    made = _read_json(os.path.join(teachers_dir, "results.json"))
    kept = {k: made["recipe"][k] for k in ("epochs", "batch_size")}
    _check_kept(
        teachers_dir,
        {**kept, "temperature_estimator": made["temperature_estimator"]},
        pair,
        epochs,
        batch_size,
        estimator,
    )
    teachers = _teachers(teachers_dir)
    student_recipe = _recipe(STUDENT, splits.name, epochs, batch_size)
    test = training.evaluation_pipeline(splits.test)
    for column, path in paths.items():
        if os.path.exists(path):
            continue
        log(f"{pair_label(pair)} seed {seed}: student {STUDENT} distilled from the {column} teacher")
        with _quiet(log):
            cache = os.path.join(directory, f"teacher_logits_{_file_name(column)}.npz")
            raw = compute_teacher_logits(teachers[column], splits.train, cache_path=cache)  # as trained: T = 1
            train_set = data.with_teacher_targets(splits.train, raw)
            loss = DistillationCrossEntropy(**KD_SETTINGS)
            student = fitting.train_model(
                splits, STUDENT, loss, train_set, recipe=student_recipe, seed=seed, verbose=options["verbose"]
            )
            outputs, labels = data.predict_with_labels(student, test)
            scores = evaluation.evaluate_outputs(outputs, labels)["all"]
        record = {"teacher": column, "teacher_model": model, "student": STUDENT, "seed": seed, **KD_SETTINGS}
        teacher_recipe = {"epochs": recipe.epochs, "batch_size": recipe.batch_size, "temperature_estimator": estimator}
        record.update(teacher_recipe, student_epochs=student_recipe.epochs)
        _write_json(path, {**record, "scores": _plain(scores)})
    return {column: _read_json(path)["scores"] for column, path in paths.items()}, True


def _teachers(teachers_dir):
    """`{column: teacher as trained}`, loaded from the `.keras` models that the main job saved beside its results."""
    import keras

    return {
        column: keras.saving.load_model(os.path.join(teachers_dir, f"model_{_file_name(column)}.keras"))
        for column in COLUMNS["distillation"]
    }


def _file_name(column):
    return column.lower().replace(" ", "_")


def _student_path(directory, column):
    return os.path.join(directory, "students", f"{_file_name(column)}.json")


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def _read_json(path):
    with open(path) as file:
        return json.load(file)
