"""The statistics over replicates: means per row, the paper's claims as win rates with sign tests, Fig. 4's curves."""

from __future__ import annotations

import math

import numpy as np

from keras_ils.experiments.synthetic_protocol.paper import CLAIMS, HYPERPARAMETERS, PAPER, ROWS, row_key
from keras_ils.experiments.synthetic_protocol.scoring import CURVE_BINS, CURVE_RANGE, METRICS


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
        va = np.array([v[metric] for v in per[row_key(a)]])
        vb = np.array([v[metric] for v in per[row_key(b)]])
        better = va > vb if metric == "accuracy" else va < vb
        worse = va < vb if metric == "accuracy" else va > vb
        wins, losses = int(better.sum()), int(worse.sum())
        claims.append(
            dict(
                claim=name,
                metric=metric,
                wins=wins,
                losses=losses,
                ties=len(va) - wins - losses,
                win_rate=wins / len(va),
                mean_difference=float(np.mean(va - vb)),
                sign_test_p=sign_test(wins, losses),
            )
        )
    return dict(rows=rows, claims=claims, curves=best_smoothing_curves(results))


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
