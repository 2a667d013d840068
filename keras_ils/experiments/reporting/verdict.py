"""A ranked verdict over seeds: which row of `keras-ils run --seeds N` is best, and whether its lead is significant.

The seeds are the blocks of Demšar's (2006) procedure: per metric, every
row's rank within each seed, their average, the Friedman test (gated by the
Iman-Davenport F, as Demšar recommends), and the Nemenyi critical difference
between average ranks. The best row's lead is called significant only when
the Friedman test rejects AND the runner-up trails it by at least the
critical difference; with few seeds the critical difference is wide, and the
verdict says so rather than crowning a winner. Rows that share the best
average rank are named together, and no row leads.

`keras-ils run --seeds N` (N >= `MIN_SEEDS`) ends with `format_verdict`'s
table and sentences and writes `verdict.md`, `verdict.json` and one
critical-difference diagram per metric (`cd_nll.png`, `cd_ece.png`,
`cd_smooth_ece.png`, `cd_accuracy.png`: each metric ranks the rows
differently, and which one matters is the user's call) beside the seeds'
folders (`write_verdict`); with fewer seeds it ends with `no_verdict`'s line.

References:
    Demšar (2006), "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7.
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_ils._checks import invalid
from keras_ils._files import atomic_write
from keras_ils.experiments.reporting import ranks

__all__ = [
    "LOWER_IS_BETTER",
    "MIN_SEEDS",
    "VERDICT_FILES",
    "format_markdown",
    "format_verdict",
    "no_verdict",
    "verdict",
    "write_verdict",
]

MIN_SEEDS = 3  # fewer seeds give the Friedman test nothing to work with
VERDICT_FILES = ("verdict.md", "verdict.json", "cd_*.png")  # what `write_verdict` writes
# the metrics a verdict ranks, in the order it reports them, and their direction
LOWER_IS_BETTER = {"nll": True, "ece": True, "smooth_ece": True, "accuracy": False}
_NAMES = {"nll": "NLL", "ece": "ECE", "smooth_ece": "smooth ECE", "accuracy": "accuracy"}


def _scores(summary: dict, metric: str) -> dict:
    """`{row: [score per seed]}` of `metric`, from `reporting.seeds.summarise_seeds`' summary."""
    return {row["model"]: _finite(row[metric]["values"]) for row in summary["rows"] if metric in row}


def _finite(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if not np.isfinite(values).all():
        raise invalid("summary", "finite scores for every seed", values.tolist())
    return values


def _metric_verdict(scores: dict, lower_is_better: bool, alpha: float) -> dict:
    average = ranks.average_ranks(scores, lower_is_better=lower_is_better)
    order = sorted(average, key=average.get)
    num_seeds = len(next(iter(scores.values())))
    friedman = ranks.friedman_test(scores, lower_is_better=lower_is_better)
    cd = ranks.critical_difference(len(scores), num_seeds, alpha)
    rejects = bool(friedman.f_pvalue < alpha)
    lead = average[order[1]] - average[order[0]]
    return {
        "average_ranks": {name: average[name] for name in order},
        "best": order[0],
        "runner_up": order[1],
        "friedman_pvalue": float(friedman.pvalue),
        "iman_davenport_pvalue": float(friedman.f_pvalue),
        "critical_difference": float(cd),
        "significant": rejects and lead >= cd,
        "rejects": rejects,
        "seeds": num_seeds,
        "alpha": alpha,
    }


def verdict(summary: dict, *, alpha: float = 0.05) -> dict:
    """Average ranks, the Friedman test and the Nemenyi critical difference of every row, per metric.

    Args:
        summary: `keras_ils.experiments.reporting.seeds.summarise_seeds`' summary
            (rows with `{metric: {"values": [score per seed]}}`), of at least
            `MIN_SEEDS` seeds and two rows.
        alpha: the tests' level. Defaults to `0.05`.

    Returns:
        `{metric: {"average_ranks", "best", "runner_up", "friedman_pvalue",
        "iman_davenport_pvalue", "critical_difference", "significant",
        "rejects", "seeds", "alpha"}}` for each metric of `LOWER_IS_BETTER`
        the rows hold, `average_ranks` best first.

    Example:

    >>> rows = [{"model": m, "nll": {"values": v}} for m, v in
    ...         (("No LS", [0.9, 0.8, 0.95, 0.9]), ("LS", [0.7, 0.72, 0.69, 0.7]), ("ILS", [0.6, 0.61, 0.58, 0.6]))]
    >>> found = verdict({"rows": rows})["nll"]
    >>> found["best"], found["average_ranks"]["ILS"], found["significant"]
    ('ILS', 1.0, False)
    """
    if not 0.0 < alpha < 1.0:
        raise invalid("alpha", "a float in (0, 1)", alpha)
    found = {}
    for metric, lower in LOWER_IS_BETTER.items():
        scores = _scores(summary, metric)
        if not scores:
            continue
        num_seeds = len(next(iter(scores.values())))
        if num_seeds < MIN_SEEDS or len(scores) < 2:
            raise invalid("summary", f"at least {MIN_SEEDS} seeds and 2 rows", f"{num_seeds} seeds, {len(scores)} rows")
        found[metric] = _metric_verdict(scores, lower, alpha)
    return found


def no_verdict(num_seeds: int) -> str:
    """The line `keras-ils run --seeds N` ends with when N is too small for a verdict.

    Example:

    >>> no_verdict(2)
    'No verdict: ranking the rows needs at least 3 seeds (--seeds 3 or more); with 2, the Friedman test and the \
Nemenyi critical difference have too few blocks to tell rows apart.'
    """
    return (
        f"No verdict: ranking the rows needs at least {MIN_SEEDS} seeds (--seeds {MIN_SEEDS} or more); with "
        f"{num_seeds}, the Friedman test and the Nemenyi critical difference have too few blocks to tell rows apart."
    )


def _sentence(metric: str, found: dict) -> str:
    ranks_of = found["average_ranks"]
    best, second = found["best"], found["runner_up"]
    tied = [name for name in ranks_of if abs(ranks_of[name] - ranks_of[best]) < 1e-9]
    of = f"of {len(ranks_of)} over {found['seeds']} seeds"
    if len(tied) > 1:
        head = f"{_NAMES[metric]}: {', '.join(tied)} share the best average rank ({ranks_of[best]:.2f} {of})"
        return f"{head}; no row leads."
    head = (
        f"{_NAMES[metric]}: best is {best} (average rank {ranks_of[best]:.2f} {of}), then {second} "
        f"({ranks_of[second]:.2f})"
    )
    if found["significant"]:
        return (
            f"{head}; its lead is significant (Nemenyi CD {found['critical_difference']:.2f}, Friedman F p = "
            f"{found['iman_davenport_pvalue']:.3g})."
        )
    if not found["rejects"]:
        return (
            f"{head}; the Friedman test does not reject that all rows are equivalent (F p = "
            f"{found['iman_davenport_pvalue']:.3g}), so the lead is not significant."
        )
    return (
        f"{head}; its lead over {second} is within the Nemenyi critical difference "
        f"({found['critical_difference']:.2f}), so it is not significant."
    )


def _table(found: dict) -> tuple[list, list]:
    """`(header, rows)` of the ranks table: every row's average rank per metric, best first by the first metric,
    then each metric's critical difference and Friedman (Iman-Davenport) p-value."""
    metrics = list(found)
    header = ["average rank (1 is best)", *(_NAMES[m] for m in metrics)]
    names = list(found[metrics[0]]["average_ranks"])
    rows = [[name, *(f"{found[m]['average_ranks'][name]:.2f}" for m in metrics)] for name in names]
    rows.append(["Nemenyi CD", *(f"{found[m]['critical_difference']:.2f}" for m in metrics)])
    rows.append(["Friedman F p", *(f"{found[m]['iman_davenport_pvalue']:.3g}" for m in metrics)])
    return header, rows


def _title(found: dict, summary: dict | None) -> str:
    first = next(iter(found.values()))
    where = f"{summary['dataset']} / {summary['model']}, " if summary else ""
    seeds = f"seeds {', '.join(map(str, summary['seeds']))}" if summary else f"{first['seeds']} seeds"
    return f"Verdict ({where}{seeds}; Friedman test, Nemenyi at alpha {first['alpha']:g})"


def format_verdict(found: dict, summary: dict | None = None) -> str:
    """The lines `keras-ils run --seeds N` ends with: the table of average ranks and one sentence per metric.

    Args:
        found: `verdict`'s result.
        summary: the seeds' summary it was made from, for the title (dataset,
            model, seeds). Defaults to `None`: the number of seeds only.
    """
    header, rows = _table(found)
    width = max(len(header[0]), *(len(row[0]) for row in rows)) + 2
    line = f"{header[0]:<{width}}" + "".join(f"{cell:>12}" for cell in header[1:])
    lines = [_title(found, summary), line, "-" * len(line)]
    for i, row in enumerate(rows):
        if i == len(rows) - 2:
            lines.append("-" * len(line))
        lines.append(f"{row[0]:<{width}}" + "".join(f"{cell:>12}" for cell in row[1:]))
    return "\n".join([*lines, *(_sentence(metric, result) for metric, result in found.items())])


def format_markdown(found: dict, summary: dict | None = None) -> str:
    """`verdict.md`: the title, the ranks table, one sentence per metric and its critical-difference diagram."""
    header, rows = _table(found)
    lines = [f"# {_title(found, summary)}", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" + "---:|" * (len(header) - 1))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", *(f"- {_sentence(metric, result)}" for metric, result in found.items()), ""]
    lines += [f"![{_NAMES[metric]}](cd_{metric}.png)" for metric in found]
    return "\n".join(lines) + "\n"


def write_verdict(found: dict, output_dir: str, summary: dict | None = None) -> list:
    """Writes `verdict.md`, `verdict.json` and one critical-difference diagram per metric (`cd_<metric>.png`), each
    atomically; returns the paths.

    Args:
        found: `verdict`'s result.
        output_dir: the directory (made if missing).
        summary: the seeds' summary, for the titles and `verdict.json`'s
            `dataset`, `model` and `seeds`. Defaults to `None`.
    """
    os.makedirs(output_dir, exist_ok=True)
    paths = [os.path.join(output_dir, name) for name in ("verdict.md", "verdict.json")]
    atomic_write(paths[0], lambda file: file.write(format_markdown(found, summary).encode()))
    header = {key: summary[key] for key in ("dataset", "model", "seeds")} if summary else {}
    record = {**header, "metrics": found}
    atomic_write(paths[1], lambda file: file.write(json.dumps(record, indent=2).encode()))
    for metric, result in found.items():
        path = os.path.join(output_dir, f"cd_{metric}.png")
        title = f"{_NAMES[metric]}: average ranks over {result['seeds']} seeds (Nemenyi, alpha {result['alpha']:g})"
        ranks.critical_difference_diagram(
            result["average_ranks"], result["seeds"], alpha=result["alpha"], title=title, path=path
        )
        paths.append(path)
    return paths
