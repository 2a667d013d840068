"""Several seeds' runs summarised: each row's mean, spread and range, printed and as `summary.json`."""

from __future__ import annotations

import json
import os

import numpy as np

from keras_ils import plots
from keras_ils._files import atomic_write
from keras_ils.comparison.reporting.results import FIGURE_SCORES, SET_SCORES, set_note

__all__ = ["SUMMARY_FILES", "SUMMARY_METRICS", "format_summary", "summarise_seeds"]

SUMMARY_FILES = ("summary.json", "comparison.png")
SUMMARY_METRICS = ("accuracy", "nll", "ece", "smooth_ece", "cwece")


def summarise_seeds(results: list, output_dir: str) -> dict:
    """Each row's mean, standard deviation and range over several seeds' `run` results; writes `summary.json` and
    a `comparison.png` that draws the spread (`keras_ils.plots.comparison` with every seed's bins and scores).

    Args:
        results: the dicts `run` returned (or their `results.json`), one per seed, with the same rows.
        output_dir: where `summary.json` and `comparison.png` go (each written atomically).

    Returns:
        `{"dataset", "model", "seeds", "rows": [{"model", metric: {"mean", "std", "min", "max", "values"}}]}`.
    """
    names = [row["model"] for row in results[0]["rows"]]
    if any([row["model"] for row in r["rows"]] != names for r in results):
        raise ValueError("Argument `results`: every seed's results must have the same rows.")
    rows = []
    for i, name in enumerate(names):
        row = {"model": name}
        for metric in SUMMARY_METRICS:
            row[metric] = _spread([r["rows"][i]["all"][metric] for r in results])
        for method, score in _set_scores(results[0]["rows"][i]):  # with prediction sets: LAC's and APS's
            row[f"{method}_{score}"] = _spread([r["rows"][i]["conformal"][method][score] for r in results])
        rows.append(row)
    summary = {
        "dataset": results[0]["dataset"],
        "model": results[0]["model"],
        "seeds": [r["seed"] for r in results],
        "rows": rows,
    }
    if "conformal" in results[0]["rows"][0]:
        summary["conformal"] = {"alpha": results[0]["rows"][0]["conformal"]["alpha"]}
        summary["conformal"]["calibration_examples"] = results[0].get("calibration_examples")
    os.makedirs(output_dir, exist_ok=True)
    atomic_write(os.path.join(output_dir, "summary.json"), lambda f: f.write(json.dumps(summary, indent=2).encode()))
    curves = {
        name: [tuple(r["reliability_bins"][name][k] for k in ("counts", "correct", "confidence")) for r in results]
        for name in names
    }
    scores = {row["model"]: {m: row[m]["values"] for m in FIGURE_SCORES} for row in rows}
    title = f"{summary['dataset']} / {summary['model']}"
    plots.comparison(curves, scores, os.path.join(output_dir, "comparison.png"), title=title)
    return summary


def _spread(values) -> dict:
    """`{"mean", "std", "min", "max", "values"}` of one score over the seeds (`std` 0 for one seed)."""
    values = np.array(values, dtype=np.float64)
    spread = dict(mean=values.mean(), std=values.std(ddof=1) if len(values) > 1 else 0.0)
    return {**spread, "min": values.min(), "max": values.max(), "values": values.tolist()}


def _set_scores(row: dict) -> list:
    """`[(method, score)]` of a row's prediction sets, `[]` without them."""
    return [(m, score) for m in row.get("conformal", {}) if m != "alpha" for score, _ in SET_SCORES]


def format_summary(summary: dict) -> str:
    """The table `keras-ils run --seeds N` prints: every row's mean ± standard deviation over the seeds."""
    seeds = summary["seeds"]
    width = max(16, *(len(row["model"]) + 2 for row in summary["rows"]))
    names = ["accuracy", "NLL", "ECE", "smooth ECE", "cwECE"]
    conformal = summary.get("conformal")
    columns = [(m, score, short) for m in ("lac", "aps") for score, short in SET_SCORES] if conformal else []
    names += [f"{m.upper()} {short}" for m, _, short in columns]
    sets = [f"{m}_{score}" for m, score, _ in columns]
    header = f"{'model':<{width}}" + "".join(f"{name:>20}" for name in names)
    lines = [
        f"{summary['dataset']} / {summary['model']}: mean ± standard deviation over {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))})",
        *([set_note(conformal["alpha"], conformal.get("calibration_examples"))] if conformal else []),
        header,
        "-" * len(header),
    ]
    for row in summary["rows"]:
        cells = [f"{100 * row['accuracy']['mean']:.2f} ± {100 * row['accuracy']['std']:.2f}%"]
        metrics = ("nll", "ece", "smooth_ece", "cwece", *sets)
        cells += [f"{row[m]['mean']:.4f} ± {row[m]['std']:.4f}" for m in metrics]
        lines.append(f"{row['model']:<{width}}" + "".join(f"{cell:>20}" for cell in cells))
    return "\n".join(lines)
