"""Fig. 4 as PNGs: the best LS smoothing factor per bin of the teacher's `p_t`, and the tuned ILS1 curves over it."""

from __future__ import annotations

import numpy as np

from keras_ils._files import atomic_write
from keras_ils.targets import smoothing_factor
from keras_ils_experiments.synthetic_protocol.printed_values import PAPER_ILS1_CURVE
from keras_ils_experiments.synthetic_protocol.scoring import CURVE_RANGE


def plot_curves(summary: dict, path: str, teacher: str) -> str:
    """Fig. 4 as a PNG: the best-smoothing-factor curve and the tuned ILS1 curves over it.

    Drawn on a `matplotlib.figure.Figure` of its own (no pyplot, the backend untouched); written atomically.
    """
    from matplotlib.figure import Figure

    curves = summary["curves"]
    centres = np.array(curves["bin_centres"])
    figure = Figure(figsize=(5.5, 4))
    axis = figure.subplots()
    for instances, style in (("train", "o-"), ("test", "s:")):
        best = np.array([np.nan if v is None else v for v in curves[f"{teacher}/{instances}"]["best_epsilon"]])
        axis.plot(
            centres,
            best,
            style,
            color="tab:red",
            markersize=3,
            alpha=1.0 if instances == "train" else 0.5,
            label=f"best LS eps per bin, {instances} instances (ours)",
        )
    p = np.linspace(*CURVE_RANGE, 200)
    ils1 = next(r["ours"] for r in summary["rows"] if r["method"] == "ILS1" and not r["temps"])
    for p1, p2, style, label in (
        (ils1["p1"], ils1["p2"], "k-", f"tuned ILS1, ours (mean P1={ils1['p1']:.3f}, P2={ils1['p2']:.2f})"),
        (PAPER_ILS1_CURVE["p1"], PAPER_ILS1_CURVE["p2"], "k--", "tuned ILS1, paper (P1=0.8, P2=2.0)"),
    ):
        axis.plot(p, np.asarray(smoothing_factor(p, p1=p1, p2=p2)), style, label=label)
    title = {"bayes": "Bayes-optimal teacher", "no_ls_temps": "No LS + TempS teacher"}[teacher]
    axis.set(xlabel="teacher's true-class probability $p_t$", ylabel="smoothing factor $\\epsilon$", title=title)
    axis.set_ylim(-0.005, 0.21)
    axis.legend(fontsize=7)
    figure.tight_layout()
    return atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=120))


_HISTOGRAM_LABELS = dict(bayes="Bayes-optimal", no_ls="No LS", ls_temps="Standard LS + TempS")


def plot_histograms(histograms: dict, path: str, replicates: int) -> str:
    """Fig. 2 as a PNG: histograms of predicted probabilities on the test points, logarithmic y-axis.

    (a) confidence, Bayes-optimal against No LS; (b) against LS + TempS;
    (c) and (d) the same for the two other probabilities. Counts pool the test
    points of every replicate. Drawn on a `matplotlib.figure.Figure` of its own;
    written atomically.
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 7))
    axes = figure.subplots(2, 2, sharey="row")
    for column, model in enumerate(("no_ls", "ls_temps")):
        for row, kind in enumerate(("confidence", "others")):
            axis = axes[row, column]
            for name, colour, alpha in (("bayes", "tab:gray", 0.45), (model, "tab:blue", 1.0)):
                counts = np.asarray(histograms[f"{name}/{kind}"], np.float64)
                edges = np.linspace(0.0, 1.0, len(counts) + 1)
                if name == "bayes":
                    axis.stairs(counts, edges, fill=True, color=colour, alpha=alpha, label=_HISTOGRAM_LABELS[name])
                else:
                    axis.stairs(counts, edges, color=colour, linewidth=1.8, label=_HISTOGRAM_LABELS[name])
            axis.set_yscale("log")
            what = "confidence (highest probability)" if kind == "confidence" else "the two other probabilities"
            short = {"no_ls": "No LS", "ls_temps": "LS + TempS"}[model]
            letter = "abcd"[2 * row + column]
            axis.set(
                title=f"({letter}) {what}: Bayes-optimal vs {short}",
                xlabel="predicted probability",
                ylabel=f"test points ({replicates} replicates pooled)" if column == 0 else None,
            )
            axis.title.set_fontsize(9)
            axis.set_xlim(*((0.3, 1.0) if kind == "confidence" else (0.0, 0.55)))
            axis.legend(fontsize=8, loc="upper left" if kind == "confidence" else "upper right")
    figure.tight_layout()
    return atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=110))


__all__ = ["plot_curves", "plot_histograms"]
