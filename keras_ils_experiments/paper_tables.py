"""The paper's tables by one command each: Table 3 and the distillation table, resumable, ranked, beside the paper's.

`run_table("3", pairs, seeds=..., output_dir=...)` is `keras-ils benchmark
paper --table 3`: for every `(dataset, model)` pair and seed it runs the main
job, `keras_ils.comparison.main_job.pipeline.run` with every method whose
rows are the table's columns (`table_methods("3")`), which tunes every
method on the validation NLL over the paper's grids and gives the paper's
12 columns (No LS, No LS + TempS, Dis, cLS, BS_Soft, Beta, LS, LS + TempS,
ILS1, ILS2, ILS, ILS + TempS). `run_table("distillation", ...)`
gives the paper's knowledge-distillation table (`tab:distil`): per pair a
teacher of the named architecture trained with No LS, with LS and with ILS
(the main job with `table_methods("distillation")`, LS and ILS, tuned the same way; the teachers
are its saved `model_no_ls.keras`, `model_ls.keras` and `model_ils.keras`), then
the AlexNet-style student (`alexnet`) distilled from each by
`keras_ils.distillation.DistillationCrossEntropy(weight=0.9,
teacher_temperature=20, student_temperature=1)` on the teacher's RAW logits
(Hinton et al.'s T = 20, as the paper's code applies it; not the calibrated
logits that ILS reads), trained by the student recipe
(`keras_ils.comparison.engine.training`), evaluated as trained.

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
the best, ties averaged (`keras_ils.comparison.reporting.ranks`). `cwECE` is the package's classwise-ECE
(Eq. 2); `paper-cwECE` is the authors' code's variant that the paper printed
(`class_conditional_ece`), so the paper's cwECE column is set beside that one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from keras_ils import methods
from keras_ils._checks import integer_at_least, invalid
from keras_ils._files import claim
from keras_ils_experiments.ranked_tables import (
    COLUMNS,
    KD_SETTINGS,
    PAIRS,
    STUDENT,
    check_table,
    pair_label,
    slug,
    summarise,
    write_json,
    write_outputs,
)

__all__ = [
    "PAPER_SPLITS",
    "TableSettings",
    "load_splits",
    "pairs_for",
    "run_directory",
    "run_pair_distillation",
    "run_pair_table3",
    "run_table",
    "table_methods",
]

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
    check_table(table)
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
    """`OUTPUT_DIR/runs/DATASET/MODEL/seedN`, where one pair's run for one seed goes."""
    dataset, model = pair
    return os.path.join(output_dir, "runs", slug(dataset), slug(model), f"seed{seed}")


def load_splits(dataset, seed, *, data_dir=None, validation_fraction=None):
    """The pair's data for one seed: the paper's split for its datasets, else 20 % validation.

    `validation_fraction`, when given, replaces the paper's splits for every dataset.
    """
    from keras_ils.comparison.data import datasets

    options = {} if validation_fraction is not None else dict(PAPER_SPLITS.get(dataset, {}))
    if validation_fraction is not None:
        options["validation_fraction"] = validation_fraction
    if not dataset.startswith("tfds:"):
        options.pop("validation_size", None)
        options.pop("train_splits", None)
    return datasets.load(dataset, data_dir=data_dir, seed=seed, **options)


@dataclasses.dataclass(frozen=True)
class TableSettings:
    """How every run of a table is made (`run_table`); each pair's main job gets these in its `RunConfig`.

    Attributes:
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
        log: a function taking one line of progress (e.g. `print`), or `None`
            (nothing printed).
    """

    search: str = "budget"
    epochs: int | None = None
    batch_size: int | None = None
    data_dir: str | None = None
    validation_fraction: float | None = None
    temperature_estimator: str = "map"
    verbose: int = 0
    log: Callable[[str], Any] | None = None

    def run_config(self, pair, seed: int, directory: str, methods_: tuple):
        """The main job's `RunConfig` for one pair and seed, its progress lines prefixed by both."""
        from keras_ils.comparison.main_job.config import RunConfig

        return RunConfig(
            model_name=pair[1],
            output_dir=directory,
            methods=methods_,
            search=self.search,
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=seed,
            verbose=self.verbose,
            temperature_estimator=self.temperature_estimator,
            log=_prefixed(self.log or _silent, pair, seed),
        )


def table_methods(table: str) -> tuple:
    """The registered methods whose rows are the table's columns (as trained or "+ TempS"), in registry order.

    Example:

    >>> table_methods("distillation")
    ('ls', 'ils')
    """
    columns = COLUMNS[table]
    return tuple(m for m in methods.ids(selectable=True) if methods.get(m).name in columns)


def run_table(table: str, pairs, settings: TableSettings | None = None, *, seeds=(0,), output_dir: str, command=None):
    """Runs (or resumes) every pair and seed of `table`, then writes its tables and diagrams; returns the summary.

    Args:
        table: `"3"` or `"distillation"`.
        pairs: `(dataset, model)` pairs (`pairs_for`); datasets as
            `keras_ils.comparison.data.datasets.load` takes them.
        settings: a `TableSettings`. Defaults to `TableSettings()` (the paper's recipes, nothing printed).
        seeds: the seeds of every pair. Defaults to `(0,)`.
        output_dir: where the runs, tables and diagrams go (module docstring).
        command: the command line recorded in the outputs.

    Returns:
        The summary that `TABLE.json` holds.
    """
    settings = settings or TableSettings()
    pairs, seeds = _checked_runs(table, pairs, seeds)
    base = "table3" if table == "3" else table
    claim(output_dir, ("runs", f"{base}.md", f"{base}.json", f"cd_{base}_*.png"), "--output-dir")  # only these are ours
    log = settings.log or _silent
    runs, trained_seconds = {}, []
    for pair in pairs:
        for seed in seeds:
            started = time.time()
            one = run_pair_table3 if table == "3" else run_pair_distillation
            runs[(pair, seed)], trained = one(pair, seed, run_directory(output_dir, pair, seed), settings)
            state = f"done in {time.time() - started:.0f} s" if trained else "kept from an earlier run"
            trained_seconds += [time.time() - started] if trained else []
            log(f"{pair_label(pair)} seed {seed}: {state}{_left(len(runs), len(pairs) * len(seeds), trained_seconds)}")
    summary = summarise(table, pairs, seeds, runs, command=command)
    write_outputs(summary, output_dir)
    return summary


def _checked_runs(table, pairs, seeds) -> tuple:
    """`(pairs, seeds)` as tuples, refused before anything runs when empty, negative or sharing a folder."""
    check_table(table)
    pairs = [tuple(pair) for pair in pairs]
    seeds = tuple(seeds)
    if not pairs or not seeds:
        raise invalid("pairs", "at least one pair and one seed", (pairs, seeds))
    for seed in seeds:
        integer_at_least("seeds", seed, 0)
    if len(set(pairs)) < len(pairs) or len({run_directory("", p, 0) for p in pairs}) < len(pairs):
        raise invalid("pairs", "distinct pairs with distinct folder names", pairs)
    return pairs, seeds


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


def _recipe(model, dataset_name, settings):
    from keras_ils.comparison import networks

    return networks.recipe_for(model, dataset_name, epochs=settings.epochs, batch_size=settings.batch_size)


def _silent(line):
    """`run_table`'s log when none is given: no progress at all."""


def _quiet(settings):
    """Warnings stay out of the output (results.json keeps the statuses); with no `log`, the main job's progress
    bars too."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    if settings.log is None:
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


def _splits(pair, seed, settings):
    return load_splits(pair[0], seed, data_dir=settings.data_dir, validation_fraction=settings.validation_fraction)


def run_pair_table3(pair, seed, directory, settings: TableSettings) -> tuple:
    """One pair and seed of Table 3: `pipeline.run` with every method. Returns `({column: scores}, trained)`."""
    from keras_ils.comparison.main_job import pipeline

    path = os.path.join(directory, "results.json")
    trained = not os.path.exists(path)
    if trained:
        splits = _splits(pair, seed, settings)
        (settings.log or _silent)(f"{pair_label(pair)} seed {seed}: running the main job with all methods")
        with _quiet(settings):
            pipeline.run(splits, settings.run_config(pair, seed, directory, table_methods("3")))
    results = _read_json(path)
    kept = {"epochs": results["recipe"]["epochs"], "batch_size": results["recipe"]["batch_size"]}
    kept["temperature_estimator"] = results["temperature_estimator"]
    _check_kept(path, kept, pair, settings)
    rows = {row["model"]: row["all"] for row in results["rows"]}
    return {column: rows[column] for column in COLUMNS["3"]}, trained


def _check_kept(path, kept, pair, settings):
    """A kept result made with other epochs, batch size or temperature fit than asked for is an error, not reused."""
    recipe = _recipe(pair[1], "", settings)
    asked = {
        "epochs": recipe.epochs,
        "batch_size": recipe.batch_size,
        "temperature_estimator": settings.temperature_estimator,
    }
    different = {k: (kept.get(k), v) for k, v in asked.items() if kept.get(k) != v}
    if different:
        said = ", ".join(f"{k}={was!r} (asked: {now!r})" for k, (was, now) in different.items())
        raise ValueError(f"{path} was made with {said}. Resume with the same settings, or give another --output-dir.")


def run_pair_distillation(pair, seed, directory, settings: TableSettings) -> tuple:
    """One pair and seed of the distillation table. Returns `({teacher column: student scores}, trained)`."""
    paths = {column: _student_path(directory, column) for column in COLUMNS["distillation"]}
    if all(os.path.exists(path) for path in paths.values()):
        for path in paths.values():
            _check_kept(path, _read_json(path), pair, settings)
        return {column: _read_json(path)["scores"] for column, path in paths.items()}, False
    splits = _splits(pair, seed, settings)
    if not splits.is_image:
        raise ValueError(
            f"The distillation table's student ({STUDENT}) is a convolutional network: it needs image data. "
            f"Received: {pair[0]!r}, examples shaped {splits.input_shape}."
        )
    teachers = _distillation_teachers(pair, seed, os.path.join(directory, "teachers"), splits, settings)
    for column, path in paths.items():
        if not os.path.exists(path):
            (settings.log or _silent)(
                f"{pair_label(pair)} seed {seed}: student {STUDENT} distilled from the {column} teacher"
            )
            with _quiet(settings):
                scores = _distilled_student(teachers[column], splits, seed, directory, column, settings)
            write_json(path, _student_record(pair, seed, column, scores, splits, settings))
    return {column: _read_json(path)["scores"] for column, path in paths.items()}, True


def _distillation_teachers(pair, seed, teachers_dir, splits, settings) -> dict:
    """`{column: teacher as trained}`: the main job's No LS, LS and ILS models for the pair (run, or kept)."""
    from keras_ils.comparison.main_job import pipeline

    if not os.path.exists(os.path.join(teachers_dir, "results.json")):
        (settings.log or _silent)(f"{pair_label(pair)} seed {seed}: teachers (No LS, LS, ILS tuned by the main job)")
        with _quiet(settings):
            pipeline.run(splits, settings.run_config(pair, seed, teachers_dir, table_methods("distillation")))
    made = _read_json(os.path.join(teachers_dir, "results.json"))
    kept = {k: made["recipe"][k] for k in ("epochs", "batch_size")}
    _check_kept(teachers_dir, {**kept, "temperature_estimator": made["temperature_estimator"]}, pair, settings)
    return _teachers(teachers_dir)


def _distilled_student(teacher, splits, seed, directory, column, settings) -> dict:
    """The `STUDENT` network distilled from `teacher`'s raw logits (cached), trained by its recipe; its test scores."""
    from keras_ils import data, evaluation
    from keras_ils.comparison.engine import training
    from keras_ils.comparison.main_job import fitting
    from keras_ils.distillation import DistillationCrossEntropy
    from keras_ils.teacher import compute_teacher_logits

    cache = os.path.join(directory, f"teacher_logits_{_file_name(column)}.npz")
    raw = compute_teacher_logits(teacher, splits.train, cache_path=cache)  # as trained: T = 1
    train_set = data.with_teacher_targets(splits.train, raw)
    loss = DistillationCrossEntropy(**KD_SETTINGS)
    student_recipe = _recipe(STUDENT, splits.name, settings)
    student = fitting.train_model(
        splits, STUDENT, loss, train_set, recipe=student_recipe, seed=seed, verbose=settings.verbose
    )
    outputs, labels = data.predict_with_labels(student, training.evaluation_pipeline(splits.test))
    return evaluation.evaluate_outputs(outputs, labels)["all"]


def _student_record(pair, seed, column, scores, splits, settings) -> dict:
    """What `students/COLUMN.json` keeps: the teacher and student, the KD settings, the recipes, the scores."""
    recipe = _recipe(pair[1], splits.name, settings)
    record = {"teacher": column, "teacher_model": pair[1], "student": STUDENT, "seed": seed, **KD_SETTINGS}
    record.update(epochs=recipe.epochs, batch_size=recipe.batch_size)
    record.update(temperature_estimator=settings.temperature_estimator)
    record.update(student_epochs=_recipe(STUDENT, splits.name, settings).epochs)
    return {**record, "scores": _plain(scores)}


def _teachers(teachers_dir):
    """`{column: teacher as trained}`, loaded from the `.keras` models that the main job saved beside its results."""
    import keras

    from keras_ils.comparison.data.splits import as_trained

    return {  # the saved models take the stored features; the distillation reads the splits' preprocessed ones
        column: as_trained(keras.saving.load_model(os.path.join(teachers_dir, f"model_{_file_name(column)}.keras")))
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
