"""Every registered method and post-hoc calibrator on five data sets over many seeds: ranks, CD diagrams, and
where ILS stands (docs/results/calibration-comparison.md, issue 24 item 6).

For each data set and seed the script runs the package's main job in process,
`keras_ils.comparison.main_job.pipeline.run(splits, RunConfig("mlp", ...))`
with every selectable method of `keras_ils.methods` (each tuned on the
validation NLL over its own grid) and temperature scaling on every model, and
keeps each run's `results.json`. Then every other calibrator of
`keras_ils.comparison.main_job.config.CALIBRATORS` is fitted on the
validation split to the run's saved No LS and ILS networks and scored on the
test split (`posthoc.json`), as the main job's `--calibrators` would (that
main-job option calibrates every model, ~15 x 6 more fits per run; the
comparison of calibrators needs them on the uncalibrated network, and on ILS
to see whether they add to it):

- scikit-learn's iris, wine, breast cancer and digits: per seed a stratified
  70/30 train/test split saved as a user's `.npz` and loaded with
  `keras_ils.comparison.data.datasets.load` (a stratified 20 % of train for
  validation, seeded by the same seed; features standardised);
- the synthetic task: `datasets.load_synthetic(seed, n_test=...)`, the
  paper's 50 + 50 examples per class for train and validation and 1,000 test
  examples per class (`--synthetic-test`).

Nothing is tuned per data set: every run uses the package's defaults.

The report (`OUTPUT/tables.md`, `OUTPUT/rows.json`, `OUTPUT/verdicts.json`, `OUTPUT/verdicts/`):

- per data set and pooled over data sets, the views of `views` ranked per
  seed (Demšar's blocks; pooled: every (data set, seed) is a block) by
  `block_verdict` on `keras_ils.comparison.reporting.ranks`: the training
  methods as trained, the training methods after temperature scaling, and the
  post-hoc calibrators on the No LS and on the ILS network; average ranks,
  Friedman test, Nemenyi critical difference, CD diagrams
  (`OUTPUT/verdicts/<scope>/<view>/`: `verdict.md`, `verdict.json`,
  `cd_<metric>.png`; every verdict in `OUTPUT/verdicts.json`);
- the mean test scores of every row per data set;
- paired comparisons against ILS: wins/losses over seeds with the exact
  two-sided sign test and the mean difference.

Runs are resumable (a run whose `results.json` exists is skipped).

    nice -n 19 python scripts/calibration_comparison.py --seeds 10 --output results/calibration_comparison
    python scripts/calibration_comparison.py --seeds 10 --tables-only --output results/calibration_comparison
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

import keras  # noqa: E402
import numpy as np  # noqa: E402
from real_data_ils import _sklearn_npz  # noqa: E402  (its seeded 70/30 split as an .npz)

from keras_ils import data, evaluation, methods, plots  # noqa: E402
from keras_ils.calibration import calibrate  # noqa: E402
from keras_ils.comparison.data import datasets  # noqa: E402
from keras_ils.comparison.data.splits import as_trained  # noqa: E402
from keras_ils.comparison.engine import training  # noqa: E402
from keras_ils.comparison.main_job import pipeline  # noqa: E402
from keras_ils.comparison.main_job.config import CALIBRATORS, RunConfig  # noqa: E402
from keras_ils.comparison.reporting import ranks  # noqa: E402
from keras_ils_experiments.synthetic_protocol.statistics import sign_test  # noqa: E402

SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")
DATASETS = (*SKLEARN_SETS, "synthetic")
METRICS = ("nll", "ece", "smooth_ece", "accuracy")
HIGHER_IS_BETTER = {"accuracy"}
REFERENCE = "ILS"
POST_HOC_BASES = ("No LS", "ILS")  # the networks every calibrator is fitted to
MIN_BLOCKS = 3  # fewer blocks (seeds) give the Friedman test nothing to work with
ALPHA = 0.05  # the Friedman test's and the Nemenyi critical difference's level
NAMES = {"nll": "NLL", "ece": "ECE", "smooth_ece": "smooth ECE", "accuracy": "accuracy"}


def _splits(name, seed, output, synthetic_test):
    if name == "synthetic":
        return datasets.load_synthetic(seed=seed, n_test=synthetic_test)
    return datasets.load(_sklearn_npz(name, seed, os.path.join(output, "data")), seed=seed)


def run_directory(output, name, seed):
    return os.path.join(output, "runs", name, f"seed{seed}")


def run_one(output, name, seed, synthetic_test, post_hoc=True):
    """One run of the main job (skipped when its results exist); returns its wall time in seconds or `None`."""
    directory = run_directory(output, name, seed)
    if os.path.exists(os.path.join(directory, "results.json")):
        return None
    started = time.time()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # fit warnings: results.json keeps every fit's status
        splits = _splits(name, seed, output, synthetic_test)
        config = RunConfig("mlp", directory, methods=methods.ids(selectable=True), seed=seed)
        pipeline.run(splits, config)
        if post_hoc:
            _post_hoc(splits, directory)
    seconds = time.time() - started
    with open(os.path.join(output, "timings.jsonl"), "a") as file:
        file.write(json.dumps({"dataset": name, "seed": seed, "seconds": round(seconds, 2)}) + "\n")
    return seconds


def _post_hoc(splits, directory):
    """Every calibrator but temperature scaling on the run's No LS and ILS networks: rows as `results.json`'s."""
    validation, test = (training.evaluation_pipeline(split) for split in (splits.validation, splits.test))
    rows = []
    for base in POST_HOC_BASES:
        slug = base.lower().replace(" ", "_")
        model = as_trained(keras.saving.load_model(os.path.join(directory, f"model_{slug}.keras")))
        for method, suffix in CALIBRATORS.items():
            if method == "temperature":
                continue
            mapped, fit = calibrate(model, validation, method=method, return_fit=True)
            outputs, labels = data.predict_with_labels(mapped, test)
            scores = evaluation.evaluate_outputs(outputs, labels)
            rows.append({"model": f"{base} + {suffix}", "temperature_status": fit.status, "hyperparameters": {},
                         "all": scores["all"]})  # fmt: skip
    with open(os.path.join(directory, "posthoc.json"), "w") as file:
        json.dump(rows, file)


def collect(output, names, seeds):
    """`{(dataset, seed): results dict}`: the stored `rows.json`, and over it every run of `OUTPUT/runs` that exists."""
    stored = stored_rows(output)
    found = {}
    for name in names:
        for seed in seeds:
            path = os.path.join(run_directory(output, name, seed), "results.json")
            if os.path.exists(path):
                with open(path) as file:
                    found[(name, seed)] = json.load(file)
                post_hoc = os.path.join(run_directory(output, name, seed), "posthoc.json")
                if os.path.exists(post_hoc):
                    with open(post_hoc) as file:
                        found[(name, seed)]["rows"] += json.load(file)
                elif (name, seed) in stored:  # a run without its post-hoc fits (--no-post-hoc): the stored ones
                    found[(name, seed)]["rows"] += _post_hoc_rows(stored[(name, seed)])
            elif (name, seed) in stored:
                found[(name, seed)] = stored[(name, seed)]
    return found


def stored_rows(output):
    """`rows.json` (what `write_outputs` keeps of every run) back as `{(dataset, seed): results dict}`."""
    path = os.path.join(output, "rows.json")
    if not os.path.exists(path):
        return {}
    with open(path) as file:
        blocks = json.load(file)
    return {
        (block["dataset"], block["seed"]): {
            "teacher_temperature": block["teacher_temperature"],
            "rows": [{"model": row["model"], "hyperparameters": row["hyperparameters"],
                      "temperature_status": row["temperature_status"], "all": {m: row[m] for m in METRICS}}
                     for row in block["rows"]],
        }
        for block in blocks
    }  # fmt: skip


def refit_post_hoc(output, name, seed, synthetic_test, stored):
    """One stored block with its post-hoc rows fitted by the calibrators' current rule.

    The calibrators are fitted to the run's saved No LS and ILS networks. A
    fresh clone keeps only `rows.json`, not the networks, and they cannot be
    trained again alone: the vectorised engine's results depend on its pool
    of students at float precision, and over hundreds of epochs the
    difference grows (retrained with No LS alone, breast cancer seed 0's ILS
    network had test NLL 0.214 against 0.183 in the pool of every method,
    the same hyperparameters). So without them the block is run again whole.
    """
    directory = run_directory(output, name, seed)
    if not os.path.exists(os.path.join(directory, "model_ils.keras")):
        if os.path.exists(os.path.join(directory, "results.json")):
            raise RuntimeError(f"{directory} holds results.json without the networks: remove it to run it again")
        run_one(output, name, seed, synthetic_test)
        return collect(output, [name], [seed])[(name, seed)]
    _post_hoc(_splits(name, seed, output, synthetic_test), directory)
    with open(os.path.join(directory, "posthoc.json")) as file:
        post_hoc = json.load(file)
    post_hoc_rows = _post_hoc_rows(stored)
    return {**stored, "rows": [row for row in stored["rows"] if row not in post_hoc_rows] + post_hoc}


def _post_hoc_rows(block):
    """The block's rows of the calibrators fitted by `_post_hoc` (all but temperature scaling, on No LS and ILS)."""
    suffixes = tuple(f" + {suffix}" for method, suffix in CALIBRATORS.items() if method != "temperature")
    return [row for row in block["rows"] if row["model"].startswith(POST_HOC_BASES) and row["model"].endswith(suffixes)]


def _value(results, row, metric):
    for r in results["rows"]:
        if r["model"] == row:
            return r["all"].get(metric)
    return None


def views(results):
    """The rows each ranked view compares, from one run's row names."""
    names = [row["model"] for row in results["rows"]]
    trained = [name for name in names if " + " not in name]
    suffixes = [suffix for _, suffix in CALIBRATORS.items()]
    return {
        "as_trained": trained,
        "temperature_scaled": [f"{name} + TempS" for name in trained if f"{name} + TempS" in names],
        "post_hoc_on_no_ls": ["No LS"] + [f"No LS + {s}" for s in suffixes if f"No LS + {s}" in names],
        "post_hoc_on_ils": ["ILS"] + [f"ILS + {s}" for s in suffixes if f"ILS + {s}" in names],
        "all_rows": names,
    }


def _scores(runs, rows):
    """`{metric: {row: [score per block]}}` of the rows every block (run) scores in every metric."""
    kept = [row for row in rows if all(_value(r, row, m) is not None for r in runs for m in METRICS)]
    scores = {m: {row: np.array([_value(r, row, m) for r in runs], float) for row in kept} for m in METRICS}
    if not all(np.isfinite(values).all() for table in scores.values() for values in table.values()):
        raise ValueError("Every block needs finite scores: a run's results.json holds NaN or inf.")
    return scores


def block_verdict(scores, alpha=ALPHA):
    """Demšar's (2006) verdict over blocks per metric of `_scores`' result: average ranks (best first), Friedman and
    Iman-Davenport p-values, Nemenyi CD; the best row's lead is significant when the F rejects at `alpha` and the
    runner-up trails by at least the CD. `"seeds"` counts the blocks."""
    found = {}
    for metric, table in scores.items():
        lower = metric not in HIGHER_IS_BETTER
        average = ranks.average_ranks(table, lower_is_better=lower)
        order = sorted(average, key=average.get)
        blocks = len(next(iter(table.values())))
        friedman = ranks.friedman_test(table, lower_is_better=lower)
        cd = ranks.critical_difference(len(table), blocks, alpha)
        rejects = bool(friedman.f_pvalue < alpha)
        found[metric] = {"average_ranks": {name: average[name] for name in order}, "best": order[0],
                         "runner_up": order[1], "friedman_pvalue": float(friedman.pvalue),
                         "iman_davenport_pvalue": float(friedman.f_pvalue), "critical_difference": float(cd),
                         "significant": rejects and average[order[1]] - average[order[0]] >= cd,
                         "rejects": rejects, "seeds": blocks, "alpha": alpha}  # fmt: skip
    return found


def _sentence(metric, found):
    """One metric's verdict in words: the best row, the runner-up, and whether the lead is significant."""
    ranks_of, best, second = found["average_ranks"], found["best"], found["runner_up"]
    tied = [name for name in ranks_of if abs(ranks_of[name] - ranks_of[best]) < 1e-9]
    of = f"of {len(ranks_of)} over {found['seeds']} seeds"
    if len(tied) > 1:
        shared = f"{', '.join(tied)} share the best average rank ({ranks_of[best]:.2f} {of})"
        return f"{NAMES[metric]}: {shared}; no row leads."
    head = (f"{NAMES[metric]}: best is {best} (average rank {ranks_of[best]:.2f} {of}), then {second} "
            f"({ranks_of[second]:.2f})")  # fmt: skip
    cd, p = found["critical_difference"], found["iman_davenport_pvalue"]
    if found["significant"]:
        return f"{head}; its lead is significant (Nemenyi CD {cd:.2f}, Friedman F p = {p:.3g})."
    if not found["rejects"]:
        return (f"{head}; the Friedman test does not reject that all rows are equivalent (F p = {p:.3g}), so the "
                "lead is not significant.")  # fmt: skip
    within = f"within the Nemenyi critical difference ({cd:.2f})"
    return f"{head}; its lead over {second} is {within}, so it is not significant."


def write_verdict(found, directory):
    """`verdict.md` (average ranks per metric, each metric's sentence and CD diagram), `verdict.json` and
    `cd_<metric>.png` of one `block_verdict` into `directory`."""
    os.makedirs(directory, exist_ok=True)
    first, metrics = next(iter(found.values())), found.values()
    table = [["average rank (1 is best)", *(NAMES[m] for m in found)]]
    table += [[name, *(f"{v['average_ranks'][name]:.2f}" for v in metrics)] for name in first["average_ranks"]]
    table += [["Nemenyi CD", *(f"{v['critical_difference']:.2f}" for v in metrics)],
              ["Friedman F p", *(f"{v['iman_davenport_pvalue']:.3g}" for v in metrics)]]  # fmt: skip
    header, *body = ("| " + " | ".join(row) + " |" for row in table)
    lines = [f"# Verdict ({first['seeds']} seeds; Friedman test, Nemenyi at alpha {first['alpha']:g})", "", header]
    lines += ["|---|" + "---:|" * len(found), *body, "", *(f"- {_sentence(m, v)}" for m, v in found.items()), ""]
    lines += [f"![{NAMES[m]}](cd_{m}.png)" for m in found]
    with open(os.path.join(directory, "verdict.md"), "w") as file:
        file.write("\n".join(lines) + "\n")
    with open(os.path.join(directory, "verdict.json"), "w") as file:
        json.dump({"metrics": found}, file, indent=2)
    for metric, v in found.items():
        title = f"{NAMES[metric]}: average ranks over {v['seeds']} seeds (Nemenyi, alpha {v['alpha']:g})"
        path = os.path.join(directory, f"cd_{metric}.png")
        ranks.critical_difference_diagram(v["average_ranks"], v["seeds"], alpha=v["alpha"], title=title, path=path)


def ranked(output, found, names, seeds):
    """`{(scope, view): block_verdict}`: per data set (blocks = seeds) and pooled (blocks = every data set and seed);
    a scope of fewer than `MIN_BLOCKS` blocks, or a view of fewer than two rows, gets none."""
    scopes = {name: [found[(name, s)] for s in seeds if (name, s) in found] for name in names}
    scopes["pooled"] = [run for runs in list(scopes.values()) for run in runs]
    results = {}
    for scope, runs in scopes.items():
        if len(runs) < MIN_BLOCKS:
            continue
        for view, rows in views(runs[0]).items():
            scores = _scores(runs, rows)
            if len(scores["nll"]) < 2:
                continue
            found_view = block_verdict(scores)
            if view != "all_rows":
                write_verdict(found_view, os.path.join(output, "verdicts", scope, view))
            results[(scope, view)] = found_view
    return results


def paired(found, name, seeds, a, b, metric):
    """Wins/losses/ties of row A over row B over the seeds, mean difference A - B with its s.e., sign test."""
    pairs = [(_value(found[(name, s)], a, metric), _value(found[(name, s)], b, metric)) for s in seeds
             if (name, s) in found]  # fmt: skip
    pairs = np.array([p for p in pairs if None not in p], float)
    if not len(pairs):
        return None
    va, vb = pairs[:, 0], pairs[:, 1]
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    better, worse = sign * (va - vb) < -1e-12, sign * (va - vb) > 1e-12
    wins, losses = int(better.sum()), int(worse.sum())
    diff = va - vb
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    return dict(n=len(diff), wins=wins, losses=losses, diff=diff.mean(), se=se, p=sign_test(wins, losses))


def _rank_table(results, names, view, metric):
    scopes = [s for s in (*names, "pooled") if (s, view) in results and metric in results[(s, view)]]
    if not scopes:
        return []
    rows = list(results[(scopes[-1], view)][metric]["average_ranks"])
    lines = ["| row | " + " | ".join(scopes) + " |", "|---|" + "---|" * len(scopes)]
    for row in rows:
        cells = []
        for scope in scopes:
            verdict_of = results[(scope, view)][metric]
            rank = verdict_of["average_ranks"].get(row)
            best = row == verdict_of["best"]
            cells.append("-" if rank is None else (f"**{rank:.2f}**" if best else f"{rank:.2f}"))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    footer = []
    for scope in scopes:
        v = results[(scope, view)][metric]
        footer.append(f"CD {v['critical_difference']:.2f}, F p {v['iman_davenport_pvalue']:.2g}"
                      + (", best significant" if v["significant"] else ""))  # fmt: skip
    lines.append("| *test* | " + " | ".join(footer) + " |")
    return lines


def _means_table(found, name, seeds, rows):
    runs = [found[(name, s)] for s in seeds if (name, s) in found]
    lines = ["| row | test NLL | ECE | smooth ECE | accuracy (%) |", "|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for metric in METRICS:
            values = [_value(r, row, metric) for r in runs]
            if any(v is None for v in values):
                cells.append("-")
                continue
            mean = np.mean(values)
            se = np.std(values, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
            cells.append(f"{100 * mean:.1f} ± {100 * se:.1f}" if metric == "accuracy" else f"{mean:.3f} ± {se:.3f}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def _paired_table(found, names, seeds, rows, reference, metric):
    lines = [f"| {reference} vs | " + " | ".join(names) + " | pooled |", "|---|" + "---|" * (len(names) + 1)]
    for row in rows:
        if row == reference:
            continue
        cells = []
        wins = losses = 0
        for name in names:
            result = paired(found, name, seeds, reference, row, metric)
            if result is None:
                cells.append("-")
                continue
            wins, losses = wins + result["wins"], losses + result["losses"]
            scale = 100 if metric == "accuracy" else 1
            cells.append(f"{result['wins']}/{result['losses']}, p {result['p']:.2g}; "
                         f"{scale * result['diff']:+.3f}")  # fmt: skip
        cells.append(f"{wins}/{losses}, p {sign_test(wins, losses):.2g}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def small_validation_rule(found):
    """The issue's bound on calibrated rows: test NLL <= 2 x uncalibrated + 0.1.

    Only a calibrated row of the very network of its uncalibrated row is
    checked: a "+ TempS" row of a tuned method is tuned on its own and can
    be another network (other hyperparameters), whose uncalibrated NLL is
    not stored. Returns `(broken, checked, worst, other_networks)`.
    """
    broken, checked, worst, other_networks = [], 0, (0.0, None), []
    for (name, seed), results in sorted(found.items()):
        by_name = {row["model"]: row for row in results["rows"]}
        for row in results["rows"]:
            if " + " not in row["model"]:
                continue
            base_row = by_name[row["model"].split(" + ")[0]]
            base, nll = base_row["all"]["nll"], row["all"]["nll"]
            if row["hyperparameters"] and row["hyperparameters"] != base_row["hyperparameters"]:
                if nll > 2.0 * base + 0.1:
                    other_networks.append(f"{row['model']} on {name} seed {seed} ({nll:.3f} vs {base:.3f})")
                continue
            checked += 1
            ratio = nll / base
            if ratio > worst[0]:
                worst = (ratio, f"{row['model']} on {name} seed {seed} ({nll:.3f} vs {base:.3f})")
            if nll > 2.0 * base + 0.1:
                broken.append(f"{row['model']} on {name} seed {seed}")
    return broken, checked, worst, other_networks


def markdown(found, names, seeds, results):
    first = next(iter(found.values()))
    rows_of = views(first)
    counts = ", ".join(f"{name}: {sum((name, s) in found for s in seeds)}" for name in names)
    broken, checked, worst, other_networks = small_validation_rule(found)
    lines = [f"Seeds per data set: {counts}.", "",
             f"Calibrated rows whose test NLL exceeds 2 x their uncalibrated network's + 0.1: {len(broken)} of "
             f"{checked}{': ' + ', '.join(broken) if broken else ''}. Largest ratio: {worst[0]:.2f} ({worst[1]}).",
             "",
             f"\"+ TempS\" rows tuned to another network than their method's row (other hyperparameters) whose test "
             f"NLL exceeds 2 x that row's + 0.1: {len(other_networks)}"
             f"{': ' + '; '.join(other_networks) if other_networks else ''}.",
             ""]  # fmt: skip
    for view, title in (("as_trained", "Training methods as trained"),
                        ("temperature_scaled", "Training methods after temperature scaling"),
                        ("post_hoc_on_no_ls", "Post-hoc calibrators on the No LS network"),
                        ("post_hoc_on_ils", "Post-hoc calibrators on the ILS network"),
                        ("all_rows", "Every row")):  # fmt: skip
        lines += [f"### Average ranks: {title.lower()}", ""]
        for metric in METRICS:
            table = _rank_table(results, names, view, metric)
            if table:
                lines += [f"**{metric}** (1 is best; bold: the best row of the column)", "", *table, ""]
    lines += ["### Paired comparisons against ILS", "",
              "wins/losses of ILS over seeds (lower NLL, ECE and smooth ECE; higher accuracy), exact two-sided sign "
              "test p (ties dropped, no correction for the number of tests), mean difference ILS - row "
              "(accuracy in points).", ""]  # fmt: skip
    for metric in ("nll", "ece", "smooth_ece", "accuracy"):
        lines += [f"**{metric}, as trained**", "",
                  *_paired_table(found, names, seeds, rows_of["as_trained"], REFERENCE, metric), ""]  # fmt: skip
        lines += [f"**{metric}, after temperature scaling (ILS + TempS vs each row + TempS)**", "",
                  *_paired_table(found, names, seeds, rows_of["temperature_scaled"], f"{REFERENCE} + TempS", metric),
                  ""]  # fmt: skip
    lines += ["### Mean test scores", ""]
    for name in names:
        lines += [f"**{name}** (mean ± standard error over seeds)", "",
                  *_means_table(found, name, seeds, rows_of["all_rows"]), ""]  # fmt: skip
    return "\n".join(lines)


def write_outputs(output, found, names, seeds):
    if not found:
        raise SystemExit(f"no runs in {output}/runs and no {output}/rows.json: run without --tables-only first")
    results = ranked(output, found, names, seeds)
    tables = markdown(found, names, seeds, results)
    with open(os.path.join(output, "tables.md"), "w") as file:
        file.write(tables + "\n")
    compact = [
        {"dataset": name, "seed": seed, "teacher_temperature": r["teacher_temperature"],
         "rows": [{"model": row["model"], "hyperparameters": row["hyperparameters"],
                   "temperature_status": row["temperature_status"],
                   **{m: row["all"].get(m) for m in METRICS}} for row in r["rows"]]}
        for (name, seed), r in sorted({**stored_rows(output), **found}.items())  # blocks not asked for are kept
    ]  # fmt: skip
    with open(os.path.join(output, "rows.json"), "w") as file:
        json.dump(compact, file, indent=0)
    verdicts = {f"{scope}/{view}": found_view for (scope, view), found_view in results.items()}
    with open(os.path.join(output, "verdicts.json"), "w") as file:
        json.dump(verdicts, file, indent=1)
    return tables


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, from {DATASETS}")
    parser.add_argument("--output", required=True, help="directory of the runs, rows.json, tables.md and verdicts")
    parser.add_argument("--synthetic-test", type=int, default=1000, help="synthetic test examples per class")
    parser.add_argument("--tables-only", action="store_true", help="no runs: tables from the stored results")
    parser.add_argument("--no-post-hoc", action="store_true", help="runs without the other calibrators' fits")
    parser.add_argument("--post-hoc-only", action="store_true", help="(re)fit the other calibrators of stored runs")
    args = parser.parse_args(argv)
    names = [n for n in args.datasets.split(",") if n]
    for name in names:
        if name not in DATASETS:
            parser.error(f"unknown data set {name!r}; expected some of {DATASETS}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    os.makedirs(args.output, exist_ok=True)
    plots.reliability_diagram = lambda *a, **k: None  # a run's ~100 reliability diagrams are not needed here
    if args.post_hoc_only:
        found = collect(args.output, names, seeds)
        for seed in seeds:
            for name in names:
                if (name, seed) in found:
                    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                        warnings.simplefilter("ignore")
                        found[(name, seed)] = refit_post_hoc(args.output, name, seed, args.synthetic_test,
                                                             found[(name, seed)])  # fmt: skip
                    print(f"{name} seed {seed}: post-hoc calibrators fitted", flush=True)
        print(write_outputs(args.output, found, names, seeds))
        return
    if not args.tables_only:
        for seed in seeds:  # seed-major, so that an interrupted job has every data set's first seeds
            for name in names:
                seconds = run_one(args.output, name, seed, args.synthetic_test, post_hoc=not args.no_post_hoc)
                if seconds is not None:
                    print(f"{name} seed {seed}: {seconds:.1f} s", flush=True)
    found = collect(args.output, names, seeds)
    print(write_outputs(args.output, found, names, seeds))


if __name__ == "__main__":
    main()
