"""Reliability diagrams with their confidence histograms, and a comparison of several models, saved as PNG.

Drawn on a `matplotlib.figure.Figure` of its own and saved with `savefig`:
no pyplot, no `matplotlib.use`, so the caller's matplotlib backend and
figures are left as they were.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

from keras_ils import evaluation
from keras_ils._checks import invalid
from keras_ils._files import atomic_write

__all__ = ["BEST_ROWS", "REFERENCE", "SPARSE_BIN", "comparison", "reliability_diagram"]

SPARSE_BIN = 10  # comparison(): bins with fewer points per run are drawn faint and hollow, with no seed whisker
BEST_ROWS = 4  # comparison(): the rows of lowest test NLL that get a reliability panel beside the reference's
REFERENCE = "No LS + TempS"  # comparison(): the row the others are drawn against, the plain network temperature-scaled
_BIN_NOTE = f"marker area: points per bin\nfaint, hollow (not joined): fewer than {SPARSE_BIN} points"
_SEED_NOTE = f"\nwhisker: the seeds' range, where every seed\nhas at least {SPARSE_BIN} points in the bin"


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


def comparison(
    curves: dict,
    scores: dict,
    path: str,
    *,
    title: str | None = None,
    reference: str = REFERENCE,
    best: int = BEST_ROWS,
) -> str:
    """Writes one figure comparing models: the reference's and the best rows' reliability curves, every row's scores.

    Left: a reliability panel for the `reference` row (by default the plain
    network temperature-scaled, what everyone already does) and one for each
    of the `best` other rows of lowest mean test NLL, the reference's curve
    drawn thin behind each of theirs. Four by default: the contenders a reader
    weighs against the reference at a glance, five panels that fit beside the
    score column of a 15-method run; every row's curve at once (30 rows for
    15 methods) overlaps into a smear no palette keeps apart, and the rest
    are read in the score panels. Each drawn row has its own colour, the same
    in every panel, from the Okabe-Ito palette (told apart with colour-blind
    eyes too), the reference black. A curve is top-label accuracy against
    mean confidence over the non-empty bins of
    `keras_ils.evaluation.top_label_bins`; a marker's area grows with the
    points its bin holds, and bins of fewer than `SPARSE_BIN` points (per
    run) are drawn faint and hollow and left out of the curve: on a small
    test set their accuracies zig-zag with noise.

    With several runs per model (seeds), a curve is the runs' pooled bins,
    and a whisker spans the runs' accuracies, lowest to highest, in each bin
    that holds at least `SPARSE_BIN` points in every run. None is drawn in
    the other bins: there a seed's accuracy moves by the counting noise of a
    few examples (a bin of one example is 0 or 1), so a spread over them
    spans 0-1 whatever the method. The range, not an interquartile range: at
    the usual 3 seeds a quartile interpolates between seeds, while the range
    shows each seed's own value, as the score panels' whiskers do.

    Right: one panel per score (the keys of `scores`' entries, e.g. NLL,
    ECE, smooth ECE), one row per name, the lowest mean test NLL at the top
    (in the order given where the scores hold no `"nll"`). The drawn rows
    are in their colours, names in bold, the others grey; a marker's shape
    is its calibrator's, hollow for calibrated rows; a dot is the runs' mean
    and its whisker their range. The figure grows with the rows to keep them
    legible; a score spanning more than a factor 10 is drawn on a log axis.
    The PNG is written atomically.

    Args:
        curves: `{model name: (counts, correct_sums, confidence_sums)}`, as
            `keras_ils.evaluation.top_label_bins` returns them, or a list of
            those per model, one per run.
        scores: `{model name: {score name: value}}` (e.g. `"nll"`, `"ece"`,
            `"smooth_ece"`, `"cwece"`), each value a number or a list of
            numbers, one per run; every model has the first model's scores.
        path: the `.png` to write.
        title: Defaults to none.
        reference: the row every drawn row is compared with; none is drawn
            where `curves` has no such row. Defaults to `"No LS + TempS"`.
        best: how many rows besides the reference get a reliability panel,
            `0` to `6` (the palette's colours). Defaults to `4`.

    Returns:
        `path`.

    Example:

    >>> import os, tempfile
    >>> rng = np.random.default_rng(0)
    >>> p, y = rng.dirichlet([1, 1, 1], 200), rng.integers(0, 3, 200)
    >>> curves = {"A": evaluation.top_label_bins(p, y), "A + TempS": evaluation.top_label_bins(p, y)}
    >>> values = {"A": {"nll": 1.2, "ece": 0.1, "cwece": 0.05}, "A + TempS": {"nll": 1.1, "ece": 0.05, "cwece": 0.04}}
    >>> path = os.path.join(tempfile.mkdtemp(), "comparison.png")
    >>> comparison(curves, values, path, reference="A") == path
    True
    """
    figure = _comparison_figure(curves, scores, title, reference=reference, best=best)
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=100))
    return path


def _comparison_figure(curves: dict, scores: dict, title: str | None, *, reference=REFERENCE, best=BEST_ROWS):
    """`comparison`'s figure, not yet saved."""
    from matplotlib.figure import Figure

    if isinstance(best, bool) or not isinstance(best, numbers.Integral) or not 0 <= best <= len(_PALETTE):
        raise invalid("best", f"an int from 0 to {len(_PALETTE)}", best)
    runs = {name: _runs(value) for name, value in curves.items()}
    ranked = _by_nll(scores, runs)
    drawn = [name for name in ranked if name in runs and name != reference][:best]
    colours = dict(zip(drawn, _PALETTE, strict=False))
    if reference in runs:
        drawn, colours = [reference, *drawn], {reference: _REFERENCE_COLOUR, **colours}
    metrics = list(next(iter(scores.values()))) if scores else []
    rows_height = 1.4 + _ROW_HEIGHT * len(scores)  # the score panels' height
    panels = max(1, len(drawn))
    # as many lines of reliability panels as the score panels' height holds, at most _PANELS_PER_LINE a line
    columns = min(panels, _PANELS_PER_LINE, -(-panels // max(1, int(rows_height // _PANEL))))
    height = max(4.8, _PANEL * -(-panels // columns), rows_height)
    figure = Figure(figsize=(_PANEL * columns + 1.8 + 1.9 * len(metrics), height), layout="constrained")
    left, right = figure.subfigures(1, 2, width_ratios=[_PANEL * columns, 1.8 + 1.9 * len(metrics)])
    seeds = max((len(bins) for bins in runs.values()), default=1)
    rank = {name: i + 1 for i, name in enumerate(name for name in ranked if name in scores)}
    _reliability_panels(left, runs, drawn, columns, colours, reference, rank)
    if drawn:
        drawing = "the reference (black) and\nthe rows" if reference in runs else "the rows"  # fits one panel's width
        left.suptitle(f"reliability: {drawing} of lowest test NLL", fontsize=10)
        note = _BIN_NOTE + (_SEED_NOTE if seeds > 1 else "")
        left.axes[0].text(0.98, 0.02, note, transform=left.axes[0].transAxes, fontsize=7, ha="right", va="bottom")
    if metrics:
        _score_panels(right, scores, [name for name in ranked if name in scores], metrics, colours)
    if title:
        spread = f" ({seeds} seeds: pooled curves and mean scores; whiskers span the seeds)"
        figure.suptitle(title + (spread if seeds > 1 else ""))
    return figure


_PANEL = 3.4  # comparison(): inches per reliability panel, square
_PANELS_PER_LINE = 3  # comparison(): reliability panels side by side before a new line of them
_ROW_HEIGHT = 0.19  # comparison(): inches per row of the score panels
_SCORE_NAMES = {"nll": "NLL", "ece": "ECE", "cwece": "cwECE", "smooth_ece": "smooth ECE", "accuracy": "accuracy"}
_MARKERS = "os^Dv<>pP*Xh"  # comparison(): as trained, then one per calibrator
# comparison(): the drawn rows' colours: Okabe & Ito's qualitative palette, less its black (the reference's) and
# its yellow (too faint on white), in the order of the rows' test NLL
_PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7")
_REFERENCE_COLOUR, _OTHER_COLOUR = "black", "0.6"


def _by_nll(scores: dict, names) -> list:
    """The names of `scores` then `names`' others, by mean `"nll"`, lowest first (stable: none or NaN last)."""

    def mean_nll(name):
        value = float(np.mean(scores.get(name, {}).get("nll", np.inf)))
        return np.inf if np.isnan(value) else value

    return sorted(dict.fromkeys([*scores, *names]), key=mean_nll)


def _calibrator(name: str) -> str:
    """The calibrator of a row name (`"ILS + TempS"` -> `"TempS"`), `""` for a model as trained."""
    return name.split(" + ", 1)[1] if " + " in name else ""


def _reliability_panels(figure, runs, drawn, columns, colours, reference, rank):
    """A reliability panel per drawn row, in its colour, the reference's curve thin and black behind it."""
    axes = np.atleast_1d(figure.subplots(-(-max(1, len(drawn)) // columns), columns, squeeze=False)).ravel()
    for axis, name in zip(axes, drawn, strict=False):
        if name != reference and reference in runs:
            x, y, per_run, _ = _pooled(runs[reference])
            joined = _joined(per_run)
            line = dict(color=_REFERENCE_COLOUR, linewidth=1, alpha=0.45, marker="o", markersize=2)
            axis.plot(x[joined], y[joined], **line, label="reference")
        _reliability_curve(axis, runs[name], name, colours[name])
        axis.plot([0, 1], [0, 1], color="0.5", linestyle=":", linewidth=1)
        axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy")
        axis.set_box_aspect(1)
        place = f"NLL rank {rank[name]} of {len(rank)}" if name in rank else "no NLL"
        axis.set_title(f"{name}\n{'reference, ' if name == reference else ''}{place}", color=colours[name])
        axis.legend(fontsize=9, loc="upper left")
    for axis in axes[len(drawn) :]:
        axis.set_visible(False)


def _score_panels(figure, scores, names, metrics, colours):
    """One dot panel per score: a row per name, in its colour if drawn (else grey), its marker the calibrator's,
    whiskers spanning the runs."""
    from matplotlib.ticker import NullFormatter

    markers = {p: _MARKERS[i % len(_MARKERS)] for i, p in enumerate(dict.fromkeys(["", *map(_calibrator, names)]))}
    axes = np.atleast_1d(figure.subplots(1, len(metrics), sharey=True, squeeze=False)).ravel()
    rows = np.arange(len(names))
    for axis, metric in zip(axes, metrics, strict=True):
        values = [np.atleast_1d(np.asarray(scores[name][metric], dtype=np.float64)) for name in names]
        for row, name, value in zip(rows, names, values, strict=True):
            colour, marker = colours.get(name, _OTHER_COLOUR), markers[_calibrator(name)]
            if len(value) > 1:
                axis.plot([value.min(), value.max()], [row, row], color=colour, linewidth=1)
            face = "white" if _calibrator(name) else colour
            axis.scatter(value.mean(), row, marker=marker, s=26, color=colour, facecolors=face, zorder=3)
        finite = np.concatenate(values)
        if np.all(finite > 0) and finite.max() > 10 * finite.min():
            axis.set_xscale("log")
            axis.xaxis.set_minor_formatter(NullFormatter())  # labels on the decades only: no overprinting
        axis.set_title(_SCORE_NAMES.get(metric, metric), fontsize=10)
        axis.grid(axis="x", alpha=0.3)
        for row in rows[1::2]:  # every other row on a faint band, so that a row reads across the panels
            axis.axhspan(row - 0.5, row + 0.5, color="0.94", zorder=0)
    axes[0].set_yticks(rows, names, fontsize=8 if len(names) <= 40 else 7)
    for label in axes[0].get_yticklabels():
        if label.get_text() in colours:
            label.set(color=colours[label.get_text()], fontweight="bold")
    axes[0].set_ylim(len(names) - 0.5, -0.5)
    figure.suptitle("test scores, lowest NLL first (lower is better; hollow: calibrated)", fontsize=10)


def _runs(bins) -> list:
    """`[(counts, correct_sums, confidence_sums), ...]`: one run's bins, or a list of runs', as float arrays."""
    runs = bins if isinstance(bins, list) else [bins]
    return [tuple(np.asarray(part, dtype=np.float64) for part in run) for run in runs]


def _pooled(runs):
    """The runs' pooled non-empty bins: `(mean confidence, accuracy, points per run, which bins)`."""
    counts, correct, confidence = (np.sum(part, axis=0) for part in zip(*runs, strict=True))
    kept = counts > 0
    return confidence[kept] / counts[kept], correct[kept] / counts[kept], counts[kept] / len(runs), kept


def _joined(per_run):
    """The bins a curve joins: those of at least `SPARSE_BIN` points per run (all of them where none has)."""
    solid = per_run >= SPARSE_BIN
    return solid if solid.any() else np.ones_like(solid)


def _reliability_curve(axis, runs, name, colour):
    """The runs' pooled reliability curve; with several runs, a whisker from their lowest to highest accuracy in
    each bin of at least `SPARSE_BIN` points in every run. Marker area grows with the bin's points per run; bins of
    fewer than `SPARSE_BIN` points per run are drawn faint and hollow: their accuracy is too noisy to read."""
    x, y, per_run, kept = _pooled(runs)
    sizes = 4 + 60 * np.sqrt(per_run / per_run.max())
    solid = per_run >= SPARSE_BIN
    axis.plot(x[_joined(per_run)], y[_joined(per_run)], color=colour, linewidth=1.5, label=name)
    axis.scatter(x[solid], y[solid], s=sizes[solid], color=colour, zorder=3, clip_on=False)  # (1, 1): whole
    hollow = dict(facecolors="none", edgecolors=colour, alpha=0.35, zorder=3, clip_on=False)
    axis.scatter(x[~solid], y[~solid], s=sizes[~solid], **hollow)
    counts = np.array([run[0] for run in runs])[:, kept]
    full = np.all(counts >= SPARSE_BIN, axis=0)
    if len(runs) > 1 and full.any():
        accuracy = np.array([run[1] for run in runs])[:, kept][:, full] / counts[:, full]
        axis.vlines(x[full], accuracy.min(axis=0), accuracy.max(axis=0), color=colour, linewidth=2.5, alpha=0.6)
