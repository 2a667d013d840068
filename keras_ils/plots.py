"""Reliability diagrams with their confidence histograms, and a comparison of several models, saved as PNG.

Drawn on a `matplotlib.figure.Figure` of its own and saved with `savefig`:
no pyplot, no `matplotlib.use`, so the caller's matplotlib backend and
figures are left as they were.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from keras_ils import evaluation
from keras_ils._files import atomic_write

__all__ = ["SPARSE_BIN", "comparison", "reliability_diagram"]

SPARSE_BIN = 10  # comparison(): bins with fewer points per run are drawn faint and hollow
_BIN_NOTE = f"marker area: points per bin\nfaint, hollow (not joined): fewer than {SPARSE_BIN} points"


def reliability_diagram(
    probabilities: ArrayLike, labels: ArrayLike, path: str, *, num_bins: int = 15, title: str | None = None
) -> str:
    """Writes a reliability diagram (top-label accuracy vs confidence per bin) and a confidence histogram.

    The bars are `keras_ils.evaluation.top_label_bins` (the paper's bins);
    the title carries the ECE of `keras_ils.evaluation.scores`. The PNG is
    written atomically.

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.
        path: the `.png` to write.
        num_bins: Defaults to `15`.
        title: Defaults to none.

    Returns:
        `path`.

    Example:

    >>> import os, tempfile
    >>> rng = np.random.default_rng(0)
    >>> path = os.path.join(tempfile.mkdtemp(), "reliability.png")
    >>> reliability_diagram(rng.dirichlet([1, 1, 1], 200), rng.integers(0, 3, 200), path, title="demo") == path
    True
    """
    from matplotlib.figure import Figure

    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels)
    counts, correct_sums, confidence_sums = evaluation.top_label_bins(probabilities, labels, num_bins)
    accuracy = correct_sums / np.maximum(counts, 1)
    mean_confidence = confidence_sums / np.maximum(counts, 1)
    ece = evaluation.scores(probabilities, labels, from_logits=False, num_bins=num_bins)["ece"]
    edges = np.linspace(0, 1, num_bins + 1)
    centres, width = (edges[:-1] + edges[1:]) / 2, 1.0 / num_bins
    nonempty = counts > 0

    figure = Figure(figsize=(4.5, 6))
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.bar(centres[nonempty], accuracy[nonempty], width=width, edgecolor="black", label="accuracy")
    top.bar(
        centres[nonempty],
        (mean_confidence - accuracy)[nonempty],
        bottom=accuracy[nonempty],
        width=width,
        color="tab:red",
        alpha=0.35,
        label="gap to confidence",
    )
    top.plot([0, 1], [0, 1], "k--", linewidth=1)
    top.set_ylabel("accuracy")
    top.set_ylim(0, 1)
    top.legend(loc="upper left")
    top.set_title(f"{title + ' ' if title else ''}(ECE {ece:.4f})")
    bottom.bar(centres, counts / max(len(labels), 1), width=width, edgecolor="black", color="tab:gray")
    bottom.set_xlabel("confidence")
    bottom.set_ylabel("fraction")
    bottom.set_xlim(0, 1)
    figure.tight_layout()

    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=100))
    return path


def comparison(curves: dict, scores: dict, path: str, *, title: str | None = None) -> str:
    """Writes one figure comparing models: reliability curves overlaid, and bars of NLL, ECE and cwECE.

    Left panel: the models as trained; middle: the calibrated ones (names
    with a `" + "`, e.g. `"ILS + TempS"`); each curve is top-label accuracy
    against mean confidence over the non-empty bins of
    `keras_ils.evaluation.top_label_bins`. A marker's area grows with the
    points its bin holds, and bins of fewer than `SPARSE_BIN` points (per run)
    are drawn faint and hollow and left out of the curve, as the figure says:
    on a small test set their accuracies zig-zag with noise. Right: one group of bars per
    score, one bar per model. With several runs per model (seeds), a curve
    is the runs' pooled bins and a band spans the runs' accuracies per bin; a
    bar is the runs' mean and its whisker their range. The PNG is written
    atomically.

    Args:
        curves: `{model name: (counts, correct_sums, confidence_sums)}`, as
            `keras_ils.evaluation.top_label_bins` returns them, or a list of
            those per model, one per run.
        scores: `{model name: {"nll": ..., "ece": ..., "cwece": ...}}`, each
            value a number or a list of numbers, one per run.
        path: the `.png` to write.
        title: Defaults to none.

    Returns:
        `path`.

    Example:

    >>> import os, tempfile
    >>> rng = np.random.default_rng(0)
    >>> p, y = rng.dirichlet([1, 1, 1], 200), rng.integers(0, 3, 200)
    >>> curves = {"A": evaluation.top_label_bins(p, y), "A + TempS": evaluation.top_label_bins(p, y)}
    >>> values = {"A": {"nll": 1.2, "ece": 0.1, "cwece": 0.05}, "A + TempS": {"nll": 1.1, "ece": 0.05, "cwece": 0.04}}
    >>> path = os.path.join(tempfile.mkdtemp(), "comparison.png")
    >>> comparison(curves, values, path) == path
    True
    """
    from matplotlib.figure import Figure

    runs = {name: _runs(value) for name, value in curves.items()}
    figure = Figure(figsize=(16, 4.8))
    trained, calibrated, bars = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.4]})
    colours = {name: f"C{i % 10}" for i, name in enumerate(dict.fromkeys(n.split(" + ")[0] for n in curves))}
    for axis, calibrated_panel in ((trained, False), (calibrated, True)):
        for name, bins in runs.items():
            if (" + " in name) != calibrated_panel:
                continue
            _reliability_curve(axis, bins, name, colours[name.split(" + ")[0]])
        axis.plot([0, 1], [0, 1], "k--", linewidth=1)
        axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy")
        axis.set_title("calibrated after training" if calibrated_panel else "as trained")
        axis.text(0.98, 0.02, _BIN_NOTE, transform=axis.transAxes, fontsize=7, ha="right", va="bottom", color="0.3")
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7, loc="upper left")
    seeds = max(len(bins) for bins in runs.values())
    names = list(scores)
    metrics = ("nll", "ece", "cwece")
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        values = np.array([np.atleast_1d(scores[name][metric]) for metric in metrics], dtype=np.float64)
        heights = values.mean(axis=1)
        whiskers = np.stack([heights - values.min(axis=1), values.max(axis=1) - heights]) if seeds > 1 else None
        bars.bar(
            np.arange(len(metrics)) + i * width,
            heights,
            width=width,
            yerr=whiskers,
            error_kw={"linewidth": 0.8},
            color=colours[name.split(" + ")[0]],
            hatch="//" if " + " in name else None,
            edgecolor="white",
            label=name,
        )
    bars.set_xticks(np.arange(len(metrics)) + 0.4 - width / 2, ["NLL", "ECE", "cwECE"])
    bars.set_yscale("log")
    bars.set_title("test scores (lower is better; hatched: calibrated)")
    bars.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        spread = f" ({seeds} seeds: pooled curves and mean scores; bands and whiskers span the seeds)"
        figure.suptitle(title + (spread if seeds > 1 else ""))
    figure.tight_layout()
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=100))
    return path


def _runs(bins) -> list:
    """`[(counts, correct_sums, confidence_sums), ...]`: one run's bins, or a list of runs', as float arrays."""
    runs = bins if isinstance(bins, list) else [bins]
    return [tuple(np.asarray(part, dtype=np.float64) for part in run) for run in runs]


def _reliability_curve(axis, runs, name, colour):
    """The runs' pooled reliability curve; with several runs, a band from their lowest to highest accuracy per bin
    (over the runs with examples in that bin). Marker area grows with the bin's points per run; bins of fewer
    than `SPARSE_BIN` points per run are drawn faint and hollow: their accuracy is too noisy to read."""
    counts, correct, confidence = (np.sum(part, axis=0) for part in zip(*runs, strict=True))
    kept = counts > 0
    x, y, per_run = confidence[kept] / counts[kept], correct[kept] / counts[kept], counts[kept] / len(runs)
    style = "-" if name.endswith("TempS") or " + " not in name else ":"
    sizes = 4 + 60 * np.sqrt(per_run / per_run.max())
    solid = per_run >= SPARSE_BIN
    line = solid if solid.any() else np.ones_like(solid)  # the curve joins the bins that hold enough points
    axis.plot(x[line], y[line], linestyle=style, color=colour, alpha=0.6, label=name)
    axis.scatter(x[solid], y[solid], s=sizes[solid], color=colour, zorder=3)
    axis.scatter(x[~solid], y[~solid], s=sizes[~solid], facecolors="none", edgecolors=colour, alpha=0.35, zorder=3)
    if len(runs) > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.array([run[1] / run[0] for run in runs])[:, kept]  # NaN where a run has no example
        axis.fill_between(x, np.nanmin(accuracy, axis=0), np.nanmax(accuracy, axis=0), color=colour, alpha=0.15)
