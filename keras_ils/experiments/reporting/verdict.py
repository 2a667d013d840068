"""A ranked verdict over seeds: which row of `keras-ils run --seeds N` is best, and whether its lead is significant.

The seeds are the blocks of Demšar's (2006) procedure: per metric, every
row's rank within each seed, their average, the Friedman test (gated by the
Iman-Davenport F, as Demšar recommends), and the Nemenyi critical difference
between average ranks. The best row's lead is called significant only when
the Friedman test rejects AND the runner-up trails it by at least the
critical difference; with few seeds the critical difference is wide, and the
verdict says so rather than crowning a winner.

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

__all__ = ["LOWER_IS_BETTER", "MIN_SEEDS", "format_verdict", "verdict", "write_verdict"]

MIN_SEEDS = 3  # fewer seeds give the Friedman test nothing to work with
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
        "rejects", "seeds"}}` for each metric of `LOWER_IS_BETTER` the rows hold.

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


def _sentence(metric: str, found: dict) -> str:
    best, second = found["best"], found["runner_up"]
    ranks_of = found["average_ranks"]
    head = (
        f"{_NAMES[metric]}: best is {best} (average rank {ranks_of[best]:.2f} of {len(ranks_of)} over "
        f"{found['seeds']} seeds), then {second} ({ranks_of[second]:.2f})"
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


def format_verdict(found: dict) -> str:
    """The lines `keras-ils run --seeds N` ends with: the average ranks per metric and one sentence each."""
    lines = []
    for metric, result in found.items():
        ranked = ", ".join(f"{name} {rank:.2f}" for name, rank in result["average_ranks"].items())
        lines += [f"Average ranks by {_NAMES[metric]} (1 is best): {ranked}", _sentence(metric, result)]
    return "\n".join(lines)


def write_verdict(found: dict, output_dir: str, *, alpha: float = 0.05) -> list:
    """Writes `verdict.json` and one critical-difference diagram per metric (`cd_<metric>.png`); returns the paths."""
    os.makedirs(output_dir, exist_ok=True)
    paths = [os.path.join(output_dir, "verdict.json")]
    atomic_write(paths[0], lambda file: file.write(json.dumps(found, indent=2).encode()))
    for metric, result in found.items():
        path = os.path.join(output_dir, f"cd_{metric}.png")
        title = f"{_NAMES[metric]}: average ranks over {result['seeds']} seeds (Nemenyi, alpha {alpha:g})"
        ranks.critical_difference_diagram(result["average_ranks"], result["seeds"], alpha=alpha, title=title, path=path)
        paths.append(path)
    return paths
