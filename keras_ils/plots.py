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
    """Writes one figure comparing models: their reliability curves, one panel per calibrator, and their test scores.

    Left: a panel of the models as trained, then one panel per calibrator
    (the part of a name after `" + "`, e.g. `"ILS + TempS"` is in the
    "+ TempS" panel), one curve per model, coloured by the model (the part
    before `" + "`) in every panel. A curve is top-label accuracy against
    mean confidence over the non-empty bins of
    `keras_ils.evaluation.top_label_bins`; a marker's area grows with the
    points its bin holds, and bins of fewer than `SPARSE_BIN` points (per
    run) are drawn faint and hollow and left out of the curve, as the figure
    says: on a small test set their accuracies zig-zag with noise. Right: one
    panel per score (the keys of `scores`' entries, e.g. NLL, ECE, smooth
    ECE), one row per name, top to bottom in the order given, so that tens of
    rows stay legible (the figure grows with them; a score spanning more
    than a factor 10 is drawn on a log axis). With several runs per model
    (seeds), a curve is the runs' pooled bins and a band spans the runs'
    accuracies per bin; a score is the runs' mean and its whisker their
    range. The PNG is written atomically.

    Args:
        curves: `{model name: (counts, correct_sums, confidence_sums)}`, as
            `keras_ils.evaluation.top_label_bins` returns them, or a list of
            those per model, one per run.
        scores: `{model name: {score name: value}}` (e.g. `"nll"`, `"ece"`,
            `"smooth_ece"`, `"cwece"`), each value a number or a list of
            numbers, one per run; every model has the first model's scores.
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
    figure = _comparison_figure(curves, scores, title)
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=100))
    return path


def _comparison_figure(curves: dict, scores: dict, title: str | None):
    """`comparison`'s figure, not yet saved."""
    from matplotlib.figure import Figure

    runs = {name: _runs(value) for name, value in curves.items()}
    panels = list(dict.fromkeys(["", *(_calibrator(name) for name in runs)]))
    metrics = list(next(iter(scores.values()))) if scores else []
    rows_height = 1.4 + _ROW_HEIGHT * len(scores)  # the score panels' height
    # as many lines of reliability panels as the score panels' height holds, at most _PANELS_PER_LINE a line
    columns = min(len(panels), _PANELS_PER_LINE, -(-len(panels) // max(1, int(rows_height // 3.9))))
    lines = -(-len(panels) // columns)
    height = max(4.8, 3.9 * lines, rows_height)
    figure = Figure(figsize=(3.9 * columns + 1.6 + 1.9 * len(metrics), height), layout="constrained")
    left, right = figure.subfigures(1, 2, width_ratios=[3.9 * columns, 1.6 + 1.9 * len(metrics)])
    colours = _colours(dict.fromkeys(name.split(" + ")[0] for name in [*runs, *scores]))
    _reliability_panels(left, runs, panels, columns, colours)
    if metrics:
        _score_panels(right, scores, metrics, colours)
    seeds = max(len(bins) for bins in runs.values())
    if title:
        spread = f" ({seeds} seeds: pooled curves and mean scores; bands and whiskers span the seeds)"
        figure.suptitle(title + (spread if seeds > 1 else ""))
    return figure


_PANELS_PER_LINE = 4  # comparison(): reliability panels side by side before a new line of them
_ROW_HEIGHT = 0.17  # comparison(): inches per row of the score panels
_SCORE_NAMES = {"nll": "NLL", "ece": "ECE", "cwece": "cwECE", "smooth_ece": "smooth ECE", "accuracy": "accuracy"}
_MARKERS = "os^Dv<>pP*Xh"  # comparison(): as trained, then one per calibrator


def _calibrator(name: str) -> str:
    """The calibrator of a row name (`"ILS + TempS"` -> `"TempS"`), `""` for a model as trained."""
    return name.split(" + ", 1)[1] if " + " in name else ""


def _colours(models) -> dict:
    """One colour per model: matplotlib's ten default colours, or tab20's twenty for more models."""
    from matplotlib import colormaps

    palette = [f"C{i}" for i in range(10)] if len(models) <= 10 else list(colormaps["tab20"].colors)
    return {name: palette[i % len(palette)] for i, name in enumerate(models)}


def _reliability_panels(figure, runs, panels, columns, colours):
    """One reliability panel per calibrator (`""`: as trained), each model's curve in its colour."""
    axes = np.atleast_1d(figure.subplots(-(-len(panels) // columns), columns, squeeze=False)).ravel()
    for axis, panel in zip(axes, panels, strict=False):
        for name, bins in runs.items():
            if _calibrator(name) == panel:
                _reliability_curve(axis, bins, name.split(" + ")[0], colours[name.split(" + ")[0]])
        axis.plot([0, 1], [0, 1], "k--", linewidth=1)
        axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy")
        axis.set_box_aspect(1)
        axis.set_title(f"+ {panel}" if panel else "as trained")
        axis.text(0.98, 0.02, _BIN_NOTE, transform=axis.transAxes, fontsize=6, ha="right", va="bottom", color="0.3")
    labelled = [axis for axis in axes[: len(panels)] if axis.get_legend_handles_labels()[0]]
    if labelled:  # the models' colours, once: the same in every panel
        count = len(labelled[0].get_legend_handles_labels()[0])
        labelled[0].legend(fontsize=6, loc="upper left", ncol=1 if count <= 8 else 2)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)


def _score_panels(figure, scores, metrics, colours):
    """One dot panel per score: a row per name, its colour the model's, its marker the calibrator's, whiskers
    spanning the runs."""
    names = list(scores)
    markers = {p: _MARKERS[i % len(_MARKERS)] for i, p in enumerate(dict.fromkeys(["", *map(_calibrator, names)]))}
    axes = np.atleast_1d(figure.subplots(1, len(metrics), sharey=True, squeeze=False)).ravel()
    rows = np.arange(len(names))
    for axis, metric in zip(axes, metrics, strict=True):
        values = [np.atleast_1d(np.asarray(scores[name][metric], dtype=np.float64)) for name in names]
        means = np.array([v.mean() for v in values])
        for row, name, value in zip(rows, names, values, strict=True):
            colour, marker = colours[name.split(" + ")[0]], markers[_calibrator(name)]
            if len(value) > 1:
                axis.plot([value.min(), value.max()], [row, row], color=colour, linewidth=0.8)
            hollow = _calibrator(name) != ""
            axis.scatter(means[row], row, marker=marker, s=22, color=colour, facecolors="white" if hollow else colour)
        finite = np.concatenate(values)
        if np.all(finite > 0) and finite.max() > 10 * finite.min():
            axis.set_xscale("log")
        axis.set_title(_SCORE_NAMES.get(metric, metric), fontsize=9)
        axis.grid(axis="x", alpha=0.3)
        _shade_groups(axis, names)
    axes[0].set_yticks(rows, names, fontsize=7 if len(names) <= 40 else 6)
    axes[0].set_ylim(len(names) - 0.5, -0.5)
    figure.suptitle("test scores (lower is better; hollow: calibrated)", fontsize=9)


def _shade_groups(axis, names):
    """Every other model's rows (a model and its calibrated rows) on a faint band, so a row reads across."""
    groups = [name.split(" + ")[0] for name in names]
    starts = [i for i in range(len(groups)) if i == 0 or groups[i] != groups[i - 1]]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(groups)
        if k % 2:
            axis.axhspan(start - 0.5, end - 0.5, color="0.93", zorder=0)


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
    sizes = 4 + 60 * np.sqrt(per_run / per_run.max())
    solid = per_run >= SPARSE_BIN
    line = solid if solid.any() else np.ones_like(solid)  # the curve joins the bins that hold enough points
    axis.plot(x[line], y[line], color=colour, alpha=0.6, label=name)
    axis.scatter(x[solid], y[solid], s=sizes[solid], color=colour, zorder=3)
    axis.scatter(x[~solid], y[~solid], s=sizes[~solid], facecolors="none", edgecolors=colour, alpha=0.35, zorder=3)
    if len(runs) > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.array([run[1] / run[0] for run in runs])[:, kept]  # NaN where a run has no example
        axis.fill_between(x, np.nanmin(accuracy, axis=0), np.nanmax(accuracy, axis=0), color=colour, alpha=0.15)
