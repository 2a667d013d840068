"""Tuned ILS on real data: the main job over many seeds, with paired win rates (docs/results/real-data.md, issue 13).

For each data set and seed the script runs the package's main job in process,
`keras_ils.comparison.main_job.pipeline.run(splits, RunConfig("mlp", ...))`, which tunes every
method on the validation NLL (hard labels) over the paper's grids with the
vectorised engine, and keeps each run's `results.json`:

- scikit-learn's iris, wine and breast cancer: per seed a stratified 70/30
  train/test split (`train_test_split(..., random_state=seed)`) saved as a
  user's `.npz` and loaded with `keras_ils.comparison.data.datasets.load`, which
  carves the package's default 20 % stratified validation split from train
  (seeded by the same seed) and standardises the features;
- the synthetic task: `datasets.load_synthetic(seed, n_test=...)`, the paper's
  50 + 50 examples per class for train and validation, and a smaller test set
  than the paper's 5,000 per class (`--synthetic-test`, default 1,000 per
  class) to keep it fast.

Two teacher settings per seed, same split, same seed (so paired):

- `--teacher-folds 1`: the paper's teacher, every method of
  `keras_ils.methods.ids(selectable=True)` (No LS, Dis, cLS, BS_Soft, Beta, LS,
  ILS1, ILS2, ILS, each also "+ TempS");
- `--teacher-folds 5`: ILS's targets from 5 cross-fitted teachers'
  out-of-fold logits, methods LS, ILS1, ILS2, ILS (BS_Soft and Beta do not
  read the teacher; LS and No LS are the same models as with one teacher).

Runs are resumable: a run whose `results.json` exists is not run again, so
a killed job loses at most the run in progress. The tables (means with
standard errors over seeds; paired win rates with exact two-sided sign tests,
ties dropped, no correction for multiple tests, as in
docs/results/synthetic-protocol.md) are printed and written to `OUTPUT/tables.md`,
every row of every run to `OUTPUT/rows.json`.

    nice -n 19 python scripts/real_data_ils.py --seeds 20 --datasets iris,wine,breast_cancer,synthetic \\
        --teacher-folds 1,5 --output results/real_data_ils           # needs scikit-learn
    python scripts/real_data_ils.py --tables-only --output results/real_data_ils   # tables from the stored runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from keras_ils import methods, plots  # noqa: E402
from keras_ils.comparison.data import datasets  # noqa: E402
from keras_ils.comparison.main_job import pipeline  # noqa: E402
from keras_ils.comparison.main_job.config import RunConfig  # noqa: E402
from keras_ils_experiments.synthetic_protocol.statistics import sign_test  # noqa: E402

SKLEARN_SETS = ("iris", "wine", "breast_cancer")
DATASETS = (*SKLEARN_SETS, "synthetic")
TEST_SIZE = 0.3
METHODS = {1: methods.ids(selectable=True), 5: ("ls", "ils1", "ils2", "ils")}
CROSS_FIT_METHODS = ("ls", "ils1", "ils2", "ils")
METRICS = ("nll", "accuracy", "ece", "cwece")
HIGHER_IS_BETTER = {"accuracy"}
ROW_ORDER = tuple(
    name
    for base in ("No LS", "LS", "ILS1", "ILS2", "ILS", "Dis", "cLS", "BS_Soft", "Beta")
    for name in (base, f"{base} + TempS")
)
# (label, (row, teacher folds) of A, (row, teacher folds) of B): A "wins" when it is better.
COMPARISONS = (
    ("ILS vs LS", ("ILS", 1), ("LS", 1)),
    ("ILS + TempS vs LS + TempS", ("ILS + TempS", 1), ("LS + TempS", 1)),
    ("ILS vs No LS + TempS", ("ILS", 1), ("No LS + TempS", 1)),
    ("ILS + TempS vs No LS + TempS", ("ILS + TempS", 1), ("No LS + TempS", 1)),
    ("ILS1 vs LS", ("ILS1", 1), ("LS", 1)),
    ("ILS2 vs LS", ("ILS2", 1), ("LS", 1)),
    ("LS vs No LS + TempS", ("LS", 1), ("No LS + TempS", 1)),
    ("ILS vs BS_Soft", ("ILS", 1), ("BS_Soft", 1)),
    ("cross-fitted vs in-sample teacher: ILS", ("ILS", 5), ("ILS", 1)),
    ("cross-fitted vs in-sample teacher: ILS + TempS", ("ILS + TempS", 5), ("ILS + TempS", 1)),
    ("cross-fitted vs in-sample teacher: ILS1", ("ILS1", 5), ("ILS1", 1)),
    ("cross-fitted vs in-sample teacher: ILS1 + TempS", ("ILS1 + TempS", 5), ("ILS1 + TempS", 1)),
    ("cross-fitted vs in-sample teacher: ILS2", ("ILS2", 5), ("ILS2", 1)),
    ("ILS (cross-fitted teacher) vs LS", ("ILS", 5), ("LS", 1)),
    ("ILS + TempS (cross-fitted teacher) vs LS + TempS", ("ILS + TempS", 5), ("LS + TempS", 1)),
)
COMPARED_METRICS = ("nll", "ece", "accuracy")


def _sklearn_npz(name, seed, directory):
    """The seed's stratified 70/30 split of a scikit-learn set, saved as a user's `.npz`; returns its path."""
    from sklearn import datasets as sklearn_datasets
    from sklearn.model_selection import train_test_split

    path = os.path.join(directory, f"{name}-{seed}.npz")
    if not os.path.exists(path):
        x, y = getattr(sklearn_datasets, f"load_{name}")(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_SIZE, random_state=seed, stratify=y)
        os.makedirs(directory, exist_ok=True)
        temporary = path + ".tmp.npz"
        np.savez(temporary, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        os.replace(temporary, path)
    return path


def _splits(name, seed, output, synthetic_test):
    if name == "synthetic":
        return datasets.load_synthetic(seed=seed, n_test=synthetic_test)
    return datasets.load(_sklearn_npz(name, seed, os.path.join(output, "data")), seed=seed)


def run_directory(output, name, folds, seed):
    return os.path.join(output, "runs", name, f"k{folds}", f"seed{seed}")


def run_one(output, name, folds, seed, synthetic_test):
    """One run of the main job (skipped when its results exist); returns its wall time in seconds or `None`."""
    directory = run_directory(output, name, folds, seed)
    if os.path.exists(os.path.join(directory, "results.json")):
        return None
    started = time.time()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # temperature-fit and small-validation warnings: results.json keeps statuses
        splits = _splits(name, seed, output, synthetic_test)
        config = RunConfig("mlp", directory, methods=METHODS[folds], seed=seed, teacher_folds=folds)
        pipeline.run(splits, config)
    seconds = time.time() - started
    with open(os.path.join(output, "timings.jsonl"), "a") as file:
        file.write(json.dumps({"dataset": name, "teacher_folds": folds, "seed": seed, "seconds": round(seconds, 2)}))
        file.write("\n")
    return seconds


def collect(output, names, folds_list, seeds):
    """`{(dataset, folds, seed): results dict}` of the runs that exist."""
    found = {}
    for name in names:
        for folds in folds_list:
            for seed in seeds:
                path = os.path.join(run_directory(output, name, folds, seed), "results.json")
                if os.path.exists(path):
                    with open(path) as file:
                        found[(name, folds, seed)] = json.load(file)
    return found


def _value(results, row, metric):
    for r in results["rows"]:
        if r["model"] == row:
            return r["all"][metric]
    return None


def _mean_se(values):
    values = np.asarray(values, float)
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return values.mean(), se


def _format_mean_se(values, metric):
    mean, se = _mean_se(values)
    if metric == "accuracy":
        return f"{100 * mean:.2f} ± {100 * se:.2f}"
    return f"{mean:.4f} ± {se:.4f}"


def paired(found, name, seeds, a, b, metric):
    """Wins/losses/ties of A over B over the seeds where both ran, mean difference A - B with its s.e., sign test."""
    va, vb = [], []
    for seed in seeds:
        ra, rb = found.get((name, a[1], seed)), found.get((name, b[1], seed))
        if ra is None or rb is None:
            continue
        x, y = _value(ra, a[0], metric), _value(rb, b[0], metric)
        if x is not None and y is not None:
            va.append(x)
            vb.append(y)
    va, vb = np.array(va), np.array(vb)
    if not len(va):
        return None
    tol = 1e-12
    better = va > vb + tol if metric in HIGHER_IS_BETTER else va < vb - tol
    worse = va < vb - tol if metric in HIGHER_IS_BETTER else va > vb + tol
    wins, losses = int(better.sum()), int(worse.sum())
    mean, se = _mean_se(va - vb)
    return dict(n=len(va), wins=wins, losses=losses, ties=len(va) - wins - losses, diff=mean, se=se,
                p=sign_test(wins, losses))  # fmt: skip


def _format_difference(result, metric):
    scale, digits = (100, 2) if metric == "accuracy" else (1, 4)
    return f"{scale * result['diff']:+.{digits}f} ± {scale * result['se']:.{digits}f}"


def _format_pair(result, metric):
    if result is None:
        return "-"
    ties = f"/{result['ties']}" if result["ties"] else ""
    return f"{result['wins']}/{result['losses']}{ties}, p {result['p']:.2g}; {_format_difference(result, metric)}"


def _pooled(found, names, seeds, a, b, metric):
    """The comparison pooled over data sets: each (data set, seed) one pair."""
    parts = [paired(found, name, seeds, a, b, metric) for name in names]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    wins, losses = sum(p["wins"] for p in parts), sum(p["losses"] for p in parts)
    n = sum(p["n"] for p in parts)
    return dict(n=n, wins=wins, losses=losses, ties=n - wins - losses, p=sign_test(wins, losses))


SUMMARY_ROWS = (("No LS", 1), ("No LS + TempS", 1), ("LS", 1), ("LS + TempS", 1), ("ILS1", 1), ("ILS2", 1),
                ("ILS", 1), ("ILS + TempS", 1), ("ILS1", 5), ("ILS2", 5), ("ILS", 5), ("ILS + TempS", 5),
                ("Dis", 1), ("cLS", 1), ("BS_Soft", 1), ("Beta", 1))  # fmt: skip


def summary(found, names, folds_list, seeds):
    """One line per row: mean test NLL / ECE / accuracy on each data set."""
    lines = ["| row | teacher | " + " | ".join(f"{name}: NLL / ECE / acc (%)" for name in names) + " |",
             "|---|---|" + "---|" * len(names)]  # fmt: skip
    for row, folds in SUMMARY_ROWS:
        if folds not in folds_list:
            continue
        cells = [row, "in-sample" if folds == 1 else f"{folds}-fold"]
        for name in names:
            runs = [found[(name, folds, s)] for s in seeds if (name, folds, s) in found]
            values = {m: [_value(r, row, m) for r in runs] for m in ("nll", "ece", "accuracy")}
            if not runs or any(v is None for v in values["nll"]):
                cells.append("-")
                continue
            nll, ece, acc = (np.mean(values[m]) for m in ("nll", "ece", "accuracy"))
            cells.append(f"{nll:.3f} / {ece:.3f} / {100 * acc:.1f}" + (f" ({len(runs)} seeds)" if folds > 1 else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(found, names, folds_list, seeds):
    lines = []
    counts = {(name, folds): sum((name, folds, s) in found for s in seeds) for name in names for folds in folds_list}
    lines.append("Seeds per data set and teacher setting: " + ", ".join(
        f"{name} k={folds}: {count}" for (name, folds), count in counts.items()) + ".")  # fmt: skip
    lines += ["", "Mean test NLL / ECE / accuracy over seeds (the per-set tables below give standard errors and "
              "cwECE):",
              "", summary(found, names, folds_list, seeds), ""]  # fmt: skip
    for name in names:
        runs = {folds: [found[(name, folds, s)] for s in seeds if (name, folds, s) in found] for folds in folds_list}
        if not runs.get(1):
            continue
        first = runs[1][0]
        t_star = np.array([r["teacher_temperature"] for r in runs[1]])
        n_val = first["validation_examples"]
        test_count = first["rows"][0]["all"]["count"]
        lines += [f"### {name}", ""]
        lines.append(f"{len(runs[1])} seeds; {n_val} validation and {test_count} test examples; teacher T* "
                     f"{t_star.min():.2f} / {np.median(t_star):.2f} / {t_star.max():.2f} "
                     "(min / median / max).")  # fmt: skip
        lines += ["", "| row | teacher | test NLL | accuracy (%) | ECE | cwECE | hyperparameters chosen (most often) |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for folds in folds_list:
            if not runs.get(folds):
                continue
            present = [row["model"] for row in runs[folds][0]["rows"]]
            for row in [r for r in ROW_ORDER if r in present]:
                if folds > 1 and row.split(" + ")[0] not in ("ILS", "ILS1", "ILS2"):
                    continue  # No LS and LS do not read the teacher: the same models as with one teacher
                cells = [row, "in-sample" if folds == 1 else f"{folds}-fold"]
                for metric in METRICS:
                    cells.append(_format_mean_se([_value(r, row, metric) for r in runs[folds]], metric))
                cells.append(_usual_hyperparameters(runs[folds], row))
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["### Paired comparisons", "",
              "A vs B: wins/losses[/ties] of A over seeds (lower NLL and ECE, higher accuracy), exact two-sided sign "
              "test p (ties dropped, no correction for the number of tests); mean difference A - B ± standard "
              "error (accuracy in points).", ""]  # fmt: skip
    for metric in COMPARED_METRICS:
        lines += [f"**{metric}**", "", "| A vs B | " + " | ".join(names) + " | pooled |",
                  "|---|" + "---|" * (len(names) + 1)]  # fmt: skip
        for label, a, b in COMPARISONS:
            if a[1] not in folds_list or b[1] not in folds_list:
                continue
            cells = [label] + [_format_pair(paired(found, name, seeds, a, b, metric), metric) for name in names]
            pooled = _pooled(found, names, seeds, a, b, metric)
            cells.append("-" if pooled is None else f"{pooled['wins']}/{pooled['losses']}, p {pooled['p']:.2g}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    same = _same_teacher_rows(found, names, seeds, folds_list)
    if same is not None:
        lines.append(same)
    return "\n".join(lines)


def _usual_hyperparameters(runs, row):
    counted = {}
    for r in runs:
        for entry in r["rows"]:
            if entry["model"] == row and entry["hyperparameters"]:
                key = ", ".join(f"{k}={v:g}" for k, v in entry["hyperparameters"].items() if k != "a")
                counted[key] = counted.get(key, 0) + 1
    if not counted:
        return ""
    key, count = max(counted.items(), key=lambda item: item[1])
    return f"{key} ({count}/{len(runs)})"


def _same_teacher_rows(found, names, seeds, folds_list):
    """Checks that the rows that do not read the teacher agree between the two settings (same seed, same models)."""
    if 1 not in folds_list or len(folds_list) < 2:
        return None
    other = [f for f in folds_list if f != 1][0]
    differing, compared = 0, 0
    for name in names:
        for seed in seeds:
            a, b = found.get((name, 1, seed)), found.get((name, other, seed))
            if a is None or b is None:
                continue
            for row in ("No LS", "LS", "LS + TempS"):
                compared += 1
                differing += abs(_value(a, row, "nll") - _value(b, row, "nll")) > 1e-6
    return (f"Check: No LS, LS and LS + TempS (which do not read the teacher) have the same test NLL with one and "
            f"{other} teachers in {compared - differing} of {compared} (data set, seed, row) pairs.")  # fmt: skip


def write_outputs(output, found, names, folds_list, seeds):
    tables = markdown(found, names, folds_list, seeds)
    with open(os.path.join(output, "tables.md"), "w") as file:
        file.write(tables + "\n")
    compact = [
        {"dataset": name, "teacher_folds": folds, "seed": seed,
         "teacher_temperature": r["teacher_temperature"], "teacher_temperature_status": r["teacher_temperature_status"],
         "folds_temperature": r.get("folds_temperature"), "search_seconds": r.get("search_seconds"),
         "rows": [{"model": row["model"], "temperature": row["temperature"], "hyperparameters": row["hyperparameters"],
                   **{m: row["all"][m] for m in (*METRICS, "class_conditional_ece")},
                   **{g: row[g]["accuracy"] for g in ("dense", "sparse") if g in row}}
                  for row in r["rows"]]}
        for (name, folds, seed), r in sorted(found.items())
    ]  # fmt: skip
    with open(os.path.join(output, "rows.json"), "w") as file:
        json.dump(compact, file, indent=0)
    return tables


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, from {DATASETS}")
    parser.add_argument("--teacher-folds", default="1,5", help="comma-separated teacher settings, from 1 and 5")
    parser.add_argument("--output", required=True, help="directory of the runs, rows.json and tables.md")
    parser.add_argument("--synthetic-test", type=int, default=1000, help="synthetic test examples per class")
    parser.add_argument("--plots", action="store_true", help="keep each run's reliability diagrams (slower)")
    parser.add_argument("--tables-only", action="store_true", help="no runs: tables from the stored results")
    args = parser.parse_args(argv)
    names = [n for n in args.datasets.split(",") if n]
    folds_list = [int(f) for f in args.teacher_folds.split(",") if f]
    for name in names:
        if name not in DATASETS:
            parser.error(f"unknown data set {name!r}; expected some of {DATASETS}")
    for folds in folds_list:
        if folds not in METHODS:
            parser.error(f"teacher folds {folds}: expected 1 or 5")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    os.makedirs(args.output, exist_ok=True)
    if not args.plots:  # the runs' 18 reliability diagrams each are not needed for the tables
        plots.reliability_diagram = lambda *a, **k: None  # the main job's report calls it through keras_ils.plots
    if not args.tables_only:
        # the in-sample runs of every data set first: they carry the main comparison
        for folds in folds_list:
            for seed in seeds:
                for name in names:
                    seconds = run_one(args.output, name, folds, seed, args.synthetic_test)
                    if seconds is not None:
                        print(f"{name} k={folds} seed {seed}: {seconds:.1f} s", flush=True)
    found = collect(args.output, names, folds_list, seeds)
    print(write_outputs(args.output, found, names, folds_list, seeds))


if __name__ == "__main__":
    main()
