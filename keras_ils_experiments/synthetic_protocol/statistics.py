"""The statistics over replicates: means per row, the paper's claims as win rates with sign tests, Fig. 4's curves."""

from __future__ import annotations

import math

import numpy as np

from keras_ils_experiments.synthetic_protocol.printed_values import (
    CLAIMS,
    HYPERPARAMETERS,
    PAPER,
    PAPER_DISTILLATION,
    ROWS,
    row_key,
)
from keras_ils_experiments.synthetic_protocol.scoring import CURVE_BINS, CURVE_RANGE, METRICS


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test: P(a result at least this lopsided | wins and losses equally likely).

    Ties are left out before calling it.

    Example:

    >>> round(sign_test(9, 1), 4), sign_test(5, 5)
    (0.0215, 1.0)
    """
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarise(results: dict) -> dict:
    """Means per row beside the paper's, win rates with sign tests, and the Fig. 4 curves."""
    per = results["per_replicate"]
    rows = []
    for row in ROWS:
        values = per[row_key(row)]
        mean = {name: float(np.mean([v[name] for v in values])) for name in ("temps", "val_loss") + METRICS}
        for h in HYPERPARAMETERS:
            if values and h in values[0]:
                mean[h] = float(np.mean([v[h] for v in values]))
        rows.append(dict(method=row[0], temps=row[1], ours=mean, paper=PAPER.get(row, {})))
    claims = []
    for name, a, b, metric in CLAIMS:
        va = [v[metric] for v in per[row_key(a)]]
        vb = [v[metric] for v in per[row_key(b)]]
        claims.append(dict(claim=name, metric=metric, **paired_comparison(va, vb, metric)))
    out = dict(rows=rows, claims=claims, curves=best_smoothing_curves(results))
    if results.get("distillation"):
        out["distillation"] = summarise_distillation(results["distillation"])
    return out


def paired_comparison(a, b, metric: str) -> dict:
    """`a` against `b` replicate by replicate: wins (higher accuracy, else lower), losses, ties, win rate, the mean
    of `a - b` and the exact sign test (ties left out).

    Example:

    >>> c = paired_comparison([0.5, 0.4, 0.3], [0.6, 0.4, 0.2], "nll")
    >>> c["wins"], c["losses"], c["ties"], round(c["mean_difference"], 4)
    (1, 1, 1, 0.0)
    """
    va, vb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    better = va > vb if metric.startswith("accuracy") else va < vb
    worse = va < vb if metric.startswith("accuracy") else va > vb
    wins, losses = int(better.sum()), int(worse.sum())
    return dict(
        wins=wins,
        losses=losses,
        ties=len(va) - wins - losses,
        win_rate=wins / len(va),
        mean_difference=float(np.mean(va - vb)),
        sign_test_p=sign_test(wins, losses),
    )


DISTILLATION_CLAIMS = (("No LS", "Standard LS"), ("ILS", "Standard LS"), ("ILS", "No LS"))


def summarise_distillation(distillation: dict) -> dict:
    """Table 2: the students' mean test scores per teacher beside the paper's, and paired comparisons of teachers."""
    rows = [
        dict(
            teacher=teacher,
            ours={m: float(np.mean([v[m] for v in values])) for m in METRICS},
            paper=PAPER_DISTILLATION.get(teacher, {}),
        )
        for teacher, values in distillation.items()
    ]
    claims = [
        dict(
            claim=f"the student of {a} beats the student of {b} in {metric}",
            metric=metric,
            **paired_comparison([v[metric] for v in distillation[a]], [v[metric] for v in distillation[b]], metric),
        )
        for a, b in DISTILLATION_CLAIMS
        if a in distillation and b in distillation
        for metric in ("accuracy", "nll", "ece", "class_conditional_ece")
    ]
    return dict(rows=rows, claims=claims)


def best_smoothing_curves(results: dict) -> dict:
    """Fig. 4: per bin of the teacher's `p_t`, the LS `epsilon` whose student's mean `p_t` there is closest.

    Bins pool the points of all replicates (training and test points
    separately); empty bins give `None`.
    """
    epsilons = np.array(results["ls_epsilons"])
    edges = np.linspace(*CURVE_RANGE, CURVE_BINS + 1)
    out = {"bin_centres": ((edges[:-1] + edges[1:]) / 2).tolist()}
    for teacher, curve in results["curves"].items():
        count = np.array(curve["count"])
        with np.errstate(invalid="ignore", divide="ignore"):
            teacher_mean = np.array(curve["teacher_sum"]) / count
            student_mean = np.array(curve["student_sum"]) / count
        best = [
            None if count[b] == 0 else float(epsilons[int(np.argmin(np.abs(student_mean[:, b] - teacher_mean[b])))])
            for b in range(CURVE_BINS)
        ]
        out[teacher] = dict(best_epsilon=best, count=count.astype(int).tolist())
    return out


__all__ = [
    "DISTILLATION_CLAIMS",
    "best_smoothing_curves",
    "paired_comparison",
    "sign_test",
    "summarise",
    "summarise_distillation",
]
