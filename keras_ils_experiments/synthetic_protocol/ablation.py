"""The ablation table of issue 15: several runs of the protocol side by side, against the paper's No LS and LS rows."""

from __future__ import annotations

import io

from keras_ils_experiments.synthetic_protocol.printed_values import PAPER
from keras_ils_experiments.synthetic_protocol.statistics import summarise

# The goal: a configuration within these distances of the paper's No LS and Standard LS rows (no TempS).
ACCURACY_TOLERANCE = 0.005
CE_TOLERANCE = 0.01
TARGET_ROWS = (("No LS", False), ("Standard LS", False))


def _means(summary):
    return {(r["method"], r["temps"]): r["ours"] for r in summary["rows"]}


def within_paper(summary: dict) -> dict:
    """Per target row, `(accuracy - paper's, CE - paper's, both within tolerance)`.

    Example:

    >>> ours = dict(accuracy=0.7805, nll=0.5590)  # the paper's No LS: 78.45 %, 0.5589
    >>> rows = [dict(method=m, temps=False, ours=ours) for m in ("No LS", "Standard LS")]
    >>> {k[0]: (round(v[0], 4), v[2]) for k, v in within_paper(dict(rows=rows)).items()}
    {'No LS': (-0.004, True), 'Standard LS': (-0.0139, False)}
    """
    means = _means(summary)
    out = {}
    for row in TARGET_ROWS:
        d_acc = means[row]["accuracy"] - PAPER[row]["accuracy"]
        d_ce = means[row]["nll"] - PAPER[row]["nll"]
        out[row] = (d_acc, d_ce, abs(d_acc) <= ACCURACY_TOLERANCE and abs(d_ce) <= CE_TOLERANCE)
    return out


def _claim(summary, name):
    return next(c for c in summary["claims"] if c["claim"] == name)


def _difference(c, percent):
    value = f"{100 * c['mean_difference']:+.2f}" if percent else f"{c['mean_difference']:+.4f}"
    return f"{value} ({c['wins']}/{c['losses']}, p={c['sign_test_p']:.2g})"


def table(runs: dict) -> str:
    """Markdown: per run (`{variant: {"results": ..., "meta": ...}}`), the No LS, LS and ILS rows beside the paper's,
    whether No LS and LS are within 0.5 points and 0.01 CE of the paper's, and the ILS - LS paired differences."""
    out = io.StringIO()
    w = out.write
    summaries = {name: summarise(run["results"]) for name, run in runs.items()}
    p_no, p_ls, p_ils = PAPER[("No LS", False)], PAPER[("Standard LS", False)], PAPER[("ILS", False)]
    w(
        "| variant | replicates | commit | No LS acc | No LS sparse acc | No LS CE | LS acc | LS CE | "
        "within 0.5 pt / 0.01 CE (No LS, LS) | ILS acc | ILS CE | ILS + TempS acc | ILS + TempS CE |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    w(
        f"| **paper** | 100 | | {100 * p_no['accuracy']:.2f} | {100 * p_no['accuracy_sparse']:.2f} | "
        f"{p_no['nll']:.4f} | {100 * p_ls['accuracy']:.2f} | {p_ls['nll']:.4f} | | {100 * p_ils['accuracy']:.2f} | "
        f"{p_ils['nll']:.4f} | {100 * PAPER[('ILS', True)]['accuracy']:.2f} | {PAPER[('ILS', True)]['nll']:.4f} |\n"
    )
    for name, summary in summaries.items():
        m = _means(summary)
        no, ls, ils, ils_t = m[("No LS", False)], m[("Standard LS", False)], m[("ILS", False)], m[("ILS", True)]
        near = within_paper(summary)
        flags = ", ".join(
            f"{'yes' if ok else 'no'} ({100 * da:+.2f}, {dc:+.4f})" for da, dc, ok in (near[r] for r in TARGET_ROWS)
        )
        meta = runs[name]["meta"]
        w(
            f"| {name} | {runs[name]['results']['replicates']} | `{meta.get('commit', '?')[:7]}` | "
            f"{100 * no['accuracy']:.2f} | {100 * no['accuracy_sparse']:.2f} | {no['nll']:.4f} | "
            f"{100 * ls['accuracy']:.2f} | {ls['nll']:.4f} | {flags} | {100 * ils['accuracy']:.2f} | "
            f"{ils['nll']:.4f} | {100 * ils_t['accuracy']:.2f} | {ils_t['nll']:.4f} |\n"
        )
    w(
        "\nILS - LS, paired by replicate: mean difference (wins/losses for ILS, exact two-sided sign test p; "
        "accuracy in points):\n\n"
        "| variant | ILS - LS acc | ILS - LS CE | ILS + TempS - LS + TempS acc | ILS + TempS - LS + TempS CE | "
        "ILS1 - LS acc | ILS1 - LS CE |\n|---|---|---|---|---|---|---|\n"
    )
    d_acc = 100 * (p_ils["accuracy"] - p_ls["accuracy"])
    d_ce = p_ils["nll"] - p_ls["nll"]
    d_acc_t = 100 * (PAPER[("ILS", True)]["accuracy"] - PAPER[("Standard LS", True)]["accuracy"])
    d_ce_t = PAPER[("ILS", True)]["nll"] - PAPER[("Standard LS", True)]["nll"]
    d1_acc = 100 * (PAPER[("ILS1", False)]["accuracy"] - p_ls["accuracy"])
    d1_ce = PAPER[("ILS1", False)]["nll"] - p_ls["nll"]
    w(
        f"| **paper** (difference of means) | {d_acc:+.2f} | {d_ce:+.4f} | {d_acc_t:+.2f} | {d_ce_t:+.4f} | "
        f"{d1_acc:+.2f} | {d1_ce:+.4f} |\n"
    )
    for name, summary in summaries.items():
        cells = [
            _difference(_claim(summary, f"{a} beats {b} in {metric}"), metric == "accuracy")
            for a, b in (("ILS", "Standard LS"), ("ILS +TempS", "Standard LS +TempS"), ("ILS1", "Standard LS"))
            for metric in ("accuracy", "nll")
        ]
        w(f"| {name} | " + " | ".join(cells) + " |\n")
    return out.getvalue()


__all__ = ["ACCURACY_TOLERANCE", "CE_TOLERANCE", "TARGET_ROWS", "table", "within_paper"]
