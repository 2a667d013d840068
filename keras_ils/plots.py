"""Reliability diagrams with their confidence histograms, saved as PNG.

Drawn on a `matplotlib.figure.Figure` of its own and saved with `savefig`:
no pyplot, no `matplotlib.use`, so the caller's matplotlib backend and
figures are left as they were.
"""

from __future__ import annotations

import numpy as np

from keras_ils import evaluation
from keras_ils._files import atomic_write


def reliability_diagram(probabilities, labels, path: str, *, num_bins: int = 15, title: str | None = None) -> str:
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
