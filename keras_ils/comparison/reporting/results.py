"""A run's results as files and tables: `results.json`, `results.csv` and the printed comparison table.

A results dict is what `keras_ils.comparison.main_job.pipeline.run` returns:
a header (dataset, model, seed, the teacher's `T*` and its fit, the run's
settings, the recipe), `rows` (one per model: its name, calibration fit,
hyperparameters and test scores, overall and per test group) and
`reliability_bins` (each row's top-label bins, to redraw the figures).
"""

from __future__ import annotations

import csv
import json
import os

from keras_ils import evaluation

__all__ = ["FIGURE_SCORES", "SET_SCORES", "format_table", "set_note", "temperature_note", "write", "write_csv"]

FIGURE_SCORES = ("nll", "ece", "smooth_ece", "cwece")  # the scores comparison.png draws, in its panels' order


def write(results: dict, directory: str) -> None:
    """`results.json` (the whole dict) and `results.csv` (the rows) into `directory`."""
    with open(os.path.join(directory, "results.json"), "w") as file:
        json.dump(results, file, indent=2)
    write_csv(results["rows"], os.path.join(directory, "results.csv"))


def write_csv(rows: list, path: str) -> None:
    """The rows as CSV: names, calibration fit, hyperparameters (JSON) and every score of every test group."""
    groups = _test_groups(rows[0])
    header = ["model", "temps", "temperature", "temperature_status", "validation_examples", "hyperparameters"]
    header += [f"{g}_{c}" if g != "all" else c for g in groups for c in (*evaluation.COLUMNS, "count")]
    sets = [(m, s) for m in rows[0].get("conformal", {}) if m != "alpha" for s in ("coverage", "mean_set_size")]
    header += [f"{method}_{score}" for method, score in sets]
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for row in rows:
            temperature = "" if row["temperature"] is None else f"{row['temperature']:.6g}"
            values = [row["model"], row["temps"], temperature, row["temperature_status"] or ""]
            values += [row["validation_examples"] or "", json.dumps(row["hyperparameters"])]
            values += [row[g][c] for g in groups for c in (*evaluation.COLUMNS, "count")]
            values += [row["conformal"][method][score] for method, score in sets]
            writer.writerow(values)


def _test_groups(row: dict) -> list:
    """The test groups a row is scored on (`"all"`, then e.g. the synthetic task's `"dense"`, `"sparse"`)."""
    return [g for g in row if isinstance(row[g], dict) and g not in ("hyperparameters", "conformal")]


def temperature_note(results: dict) -> str | None:
    """What to make of "+ TempS" rows worse than their networks (`None` when none is): a line under the table.

    Temperature scaling fits `T*` on the validation split; on a hundred or
    so examples `T*` follows the draw more than the test set, and a row's
    test NLL can rise though nothing is wrong (issue 30: on the synthetic
    default, seed 0's 150 validation examples are easier than its test set).
    """
    nll = {row["model"]: row["all"]["nll"] for row in results["rows"]}
    worse = [name for name in nll if name.endswith(" + TempS") and nll[name] > nll.get(name[: -len(" + TempS")], 1e300)]
    if not worse:
        return None
    scaled = sum(name.endswith(" + TempS") for name in nll)
    larger = "--validation-size 600" if results["dataset"] == "synthetic" else "--validation-fraction"
    return (
        f"Note: + TempS is worse than its network on {len(worse)} of {scaled} rows. T* is fitted on the "
        f"{results['validation_examples']} validation examples (No LS: T* = {results['teacher_temperature']:.3f}, "
        f"test NLL {nll['No LS']:.4f} -> {nll['No LS + TempS']:.4f}); with so few, T* follows the validation draw "
        f"more than the test set. Compare over seeds (--seeds 3) or with a larger validation split ({larger})."
    )


# a row's prediction-set scores (`RunConfig.conformal`) as table columns: (method, score, heading)
SET_SCORES = (("coverage", "cov"), ("mean_set_size", "size"))


def _set_columns(rows) -> list:
    """`[(method, score, heading)]` of the rows' prediction sets (LAC, APS), or `[]` without them."""
    methods = [m for m in rows[0].get("conformal", {}) if m != "alpha"]
    return [(method, score, short) for method in methods for score, short in SET_SCORES]


def set_note(alpha: float, calibration_examples: int | None) -> str:
    """The line over a table with prediction-set columns: what they are and where they were calibrated."""
    held_out = f" on {calibration_examples} held-out validation examples" if calibration_examples else ""
    return (
        f"LAC, APS = split conformal prediction sets for coverage {1 - alpha:g} (alpha = {alpha:g}), calibrated"
        f"{held_out}: cov = their test coverage, size = their mean size"
    )


def format_table(results: dict) -> str:
    """The comparison table printed by `keras-ils run`."""
    rows = results["rows"]
    groups = [g for g in _test_groups(rows[0]) if g != "all"]
    width = max(16, *(len(row["model"]) + 2 for row in rows))
    header = f"{'model':<{width}}{'T':>7}{'T fit':>13}{'accuracy':>10}" + "".join(f"{'acc ' + g:>12}" for g in groups)
    header += f"{'NLL':>9}{'ECE':>9}{'smECE':>9}{'cwECE':>9}{'paper-cwECE':>13}"
    sets = _set_columns(rows)
    header += "".join(f"{f'{method.upper()} {short}':>10}" for method, _, short in sets) + "  hyperparameters"
    lines = [
        f"{results['dataset']} / {results['model']}: teacher T* = {results['teacher_temperature']:.4f} "
        f"({results['teacher_temperature_status']}; {results['temperature_estimator']} fit on "
        f"{results['validation_examples']} validation examples)",
        "smECE = smooth ECE (Blasiok & Nakkiran 2023); cwECE = classwise-ECE (paper Eq. 2); paper-cwECE = the "
        "authors' code's variant printed in the paper",
        *([set_note(rows[0]["conformal"]["alpha"], results.get("calibration_examples"))] if sets else []),
        header,
        "-" * len(header),
    ]
    for row in rows:
        a = row["all"]
        temperature = "-" if row["temperature"] is None else f"{row['temperature']:.3f}"
        line = f"{row['model']:<{width}}{temperature:>7}{row['temperature_status'] or '-':>13}"
        line += f"{100 * a['accuracy']:>9.2f}%"
        line += "".join(f"{100 * row[g]['accuracy']:>11.2f}%" for g in groups)
        line += "".join(f"{a[c]:>9.4f}" for c in ("nll", "ece", "smooth_ece", "cwece"))
        line += f"{a['class_conditional_ece']:>13.4f}"
        line += "".join(f"{row['conformal'][method][score]:>10.3f}" for method, score, _ in sets) + "  "
        line += ", ".join(f"{k}={v:g}" for k, v in row["hyperparameters"].items())
        if row.get("candidates", 1) > 1:
            line += f" (best of {row['candidates']})"
        lines.append(line)
    if results.get("tuned") is False:
        lines.append("Hyperparameters fixed (not tuned): the paper's method selects them on validation NLL.")
    return "\n".join(lines)
