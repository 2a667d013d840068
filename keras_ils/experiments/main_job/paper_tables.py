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
import re
import time
import warnings

import numpy as np

from keras_ils._checks import integer_at_least, invalid
from keras_ils._files import atomic_write, check_writable
from keras_ils.experiments.reporting import printed_tables, ranks

TABLES = ("3", "distillation")
ALPHA = 0.05  # the level of the Friedman test and of the post-hoc tests that follow it
CONTROL = {"3": "ILS + TempS", "distillation": "ILS"}
COLUMNS = {"3": printed_tables.TABLE3_COLUMNS, "distillation": printed_tables.DISTILLATION_COLUMNS}
PAIRS = {"3": printed_tables.TABLE3_PAIRS, "distillation": printed_tables.DISTILLATION_PAIRS}
PAPER = {"3": printed_tables.TABLE3, "distillation": printed_tables.DISTILLATION}
# (score key of keras_ils.evaluation, title, lower is better, the paper's metric printed beside it)
METRICS = (
    ("nll", "Cross-entropy", True, "nll"),
    ("accuracy", "Accuracy %", False, "accuracy"),
    ("ece", "ECE", True, "ece"),
    ("cwece", "cwECE (classwise-ECE, Eq. 2)", True, None),
    ("class_conditional_ece", "paper-cwECE (the authors' variant the paper printed)", True, "cwece"),
)
TEACHER_METHODS = ("ls", "ils")  # the distillation teachers besides No LS, tuned by the main job
KD_SETTINGS = dict(weight=0.9, teacher_temperature=20.0, student_temperature=1.0)  # the paper's KD (appendix)
STUDENT = "alexnet"
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


def _check_table(table):
    if table not in TABLES:
        raise invalid("table", f"one of {TABLES}", table)


def _slug(text: str) -> str:
    """A folder name for a dataset or model (`tfds:cifar10` -> `cifar10`, `data/iris.npz` -> `iris`)."""
    text = os.path.basename(text.removeprefix("tfds:"))
    text = text.removesuffix(".npz")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) or "_"


def pair_label(pair) -> str:
    """`'MODEL / DATASET'` as the tables print it."""
    dataset, model = pair
    return f"{model} / {_slug(dataset)}"


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


def _write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, lambda file: file.write(json.dumps(value, indent=2).encode()))


def summarise(table, pairs, seeds, runs, command=None) -> dict:
    """Means over seeds per metric, ranks, average ranks, Friedman tests, critical differences, the paper's values.

    `runs[(pair, seed)]` is `{column: scores}` (a main job row's `all`
    scores). Returns a JSON-ready dict; `format_markdown` prints it.
    """
    columns = COLUMNS[table]
    control = CONTROL[table]
    summary = {
        "table": table,
        "command": command,
        "pairs": [list(p) for p in pairs],
        "labels": [pair_label(p) for p in pairs],
        "seeds": list(seeds),
        "columns": list(columns),
        "control": control,
        "metrics": {},
    }
    for key, title, lower, paper_key in METRICS:
        per_seed = np.array([[[runs[(p, s)][c][key] for c in columns] for s in seeds] for p in pairs])
        means = np.round(per_seed.mean(axis=1), 12)  # equal means summed in another order are equal, not ranked apart
        entry = {"title": title, "lower_is_better": lower, "per_seed": per_seed.tolist(), "mean": means.tolist()}
        entry.update(_statistics(means, columns, lower, control))
        if paper_key is not None and paper_key in PAPER[table]:
            rows = [PAIRS[table].index(p) for p in pairs if p in PAIRS[table]]
            if rows:
                paper = np.array([PAPER[table][paper_key][i] for i in rows])
                paper_entry = {"pairs": [pair_label(PAIRS[table][i]) for i in rows], "values": paper.tolist()}
                paper_entry.update(_statistics(paper, columns, lower, control))
                entry["paper"] = paper_entry
        summary["metrics"][key] = entry
    return summary


def _statistics(values, columns, lower, control) -> dict:
    """Ranks, average ranks and, over two or more pairs, the Friedman test and both critical differences.

    `against_control[column][test]` is whether `test` finds `column` and the
    control different: only when the Friedman test rejects at `ALPHA` (its
    `"rejects"`), as Demšar (2006, §3.2.2) runs the post-hoc tests. The test
    that gates them is the Iman-Davenport F, the Friedman statistic Demšar
    recommends (the chi-square is "undesirably conservative"); both are
    reported.
    """
    rank_table = ranks.ranks(values, lower_is_better=lower)
    average = dict(zip(columns, rank_table.mean(axis=0).tolist(), strict=True))
    result = {"ranks": rank_table.tolist(), "average_ranks": average}
    num_pairs, k = values.shape
    if num_pairs >= 2:
        friedman = ranks.friedman_test(values, lower_is_better=lower)
        rejects = bool(friedman.f_pvalue < ALPHA)
        result["friedman"] = {name: float(value) for name, value in friedman._asdict().items()}
        result["friedman"]["rejects"] = rejects
        cds = {test: ranks.critical_difference(k, num_pairs, ALPHA, test=test) for test in ranks.TESTS}
        result["critical_difference"] = cds
        result["against_control"] = {
            column: {
                "difference": average[column] - average[control],
                **{test: rejects and abs(average[column] - average[control]) >= cd for test, cd in cds.items()},
            }
            for column in columns
            if column != control
        }
    return result


def _cell(value, rank, key, best):
    text = f"{100 * value:.2f}" if key == "accuracy" else f"{value:.3f}"
    text = f"{text} ({rank:g})"
    return f"**{text}**" if best else text


def _metric_table(labels, columns, values, stats, key):
    lines = ["| pair | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label, row, rank_row in zip(labels, values, stats["ranks"], strict=True):
        best = min(rank_row)
        cells = [_cell(v, r, key, r == best) for v, r in zip(row, rank_row, strict=True)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| average rank | " + " | ".join(f"{stats['average_ranks'][c]:.2f}" for c in columns) + " |")
    return lines


def _tests_text(stats, control, num_pairs):
    if "friedman" not in stats:
        return ["One pair: no Friedman test or critical difference (they need two or more)."]
    f = stats["friedman"]
    cd = stats["critical_difference"]
    lines = [
        f"Friedman over {num_pairs} pairs (Iman-Davenport F, as Demšar recommends): F({f['df1']:.0f}, "
        f"{f['df2']:.0f}) = {f['f_statistic']:.2f}, p = {f['f_pvalue']:.3g} (chi-square {f['statistic']:.2f}, "
        f"p = {f['pvalue']:.3g}).",
    ]
    differences = f"Nemenyi {cd['nemenyi']:.2f}, Bonferroni-Dunn {cd['bonferroni-dunn']:.2f}"
    if not f["rejects"]:
        return lines + [
            f"The Friedman test does not reject that all methods are equivalent at alpha {ALPHA:g}: no post-hoc "
            f"difference is claimed. The critical differences ({differences}) and diagrams are for reference only."
        ]
    lines.append(f"Rejected at alpha {ALPHA:g}, so the post-hoc tests follow. Critical differences: {differences}.")
    for test in ranks.TESTS:
        beaten = [c for c, d in stats["against_control"].items() if d[test] and d["difference"] > 0]
        lost = [c for c, d in stats["against_control"].items() if d[test] and d["difference"] < 0]
        text = f"{control} is significantly better ({test}) than: {', '.join(beaten) or 'none'}"
        lines.append(text + (f"; significantly worse than: {', '.join(lost)}." if lost else "."))
    return lines


def format_markdown(summary: dict) -> str:
    """The markdown of `TABLE.md`: per metric our table, its tests, the paper's values for the paper's pairs."""
    table, columns, control = summary["table"], summary["columns"], summary["control"]
    name = "Table 3" if table == "3" else "The distillation table"
    lines = [f"# {name}: ours beside the paper's", ""]
    if summary.get("command"):
        lines += ["```", summary["command"], "```", ""]
    lines += [
        f"Pairs (model / dataset): {len(summary['labels'])}; seeds {summary['seeds']} (cells are means over seeds). "
        "Each cell: value (rank in its row, 1 the best, ties averaged); the best in bold. Ranks are taken on "
        f"means, not on the printed digits. After Demšar (2006): the Friedman test at alpha {ALPHA:g}, then, only "
        f"if it rejects, the Nemenyi and Bonferroni-Dunn tests (against {control}).",
        "",
    ]
    if table == "distillation":
        lines += [
            f"Columns: how the teacher was trained. Cells: the {STUDENT} student distilled from it "
            f"(KD weight {KD_SETTINGS['weight']}, teacher temperature {KD_SETTINGS['teacher_temperature']:g} on raw "
            f"logits, student temperature {KD_SETTINGS['student_temperature']:g}), as trained.",
            "",
        ]
    for key, entry in summary["metrics"].items():
        lines += [f"## {entry['title']}", ""]
        lines += _metric_table(summary["labels"], columns, entry["mean"], entry, key)
        lines += [""] + _tests_text(entry, control, len(summary["labels"])) + [""]
        for test in ranks.TESTS:
            if "friedman" in entry:
                label = test if entry["friedman"]["rejects"] else f"{test}, for reference only (Friedman not rejected)"
                lines.append(f"![{label}]({_diagram_name(table, key, test)})")
        if "paper" in entry:
            paper = entry["paper"]
            lines += ["", f"The paper's printed values for its pairs among these ({entry['title']}):", ""]
            lines += _metric_table(paper["pairs"], columns, paper["values"], paper, key)
            if "friedman" in paper:
                lines += [""] + _tests_text(paper, control, len(paper["pairs"]))
        lines.append("")
    return "\n".join(lines)


def _diagram_name(table, key, test):
    return f"cd_{'table3' if table == '3' else table}_{key}_{test}.png"


def write_outputs(summary: dict, output_dir: str) -> None:
    """`TABLE.md`, `TABLE.json` and the critical-difference diagrams (two or more pairs) into `output_dir`."""
    table = summary["table"]
    base = "table3" if table == "3" else table
    os.makedirs(output_dir, exist_ok=True)
    for key, entry in summary["metrics"].items():
        if "friedman" not in entry:
            continue
        reference = "" if entry["friedman"]["rejects"] else " (Friedman not rejected: for reference only)"
        for test in ranks.TESTS:
            ranks.critical_difference_diagram(
                entry["average_ranks"],
                len(summary["labels"]),
                alpha=ALPHA,
                test=test,
                control=summary["control"] if test == "bonferroni-dunn" else None,
                title=f"{entry['title']}: {'Nemenyi' if test == 'nemenyi' else 'Bonferroni-Dunn'}, "
                f"{len(summary['labels'])} pairs{reference}",
                path=os.path.join(output_dir, _diagram_name(table, key, test)),
            )
    _write_json(os.path.join(output_dir, f"{base}.json"), summary)
    markdown = format_markdown(summary)
    atomic_write(os.path.join(output_dir, f"{base}.md"), lambda file: file.write(markdown.encode()))
