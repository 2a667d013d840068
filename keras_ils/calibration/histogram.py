"""Histogram binning (Zadrozny & Elkan 2001), one-vs-rest: the layer and its fit on validation outputs."""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_ils._checks import integer_at_least
from keras_ils.calibration._float32 import known_classes
from keras_ils.calibration.one_vs_rest import (
    OneVsRestCalibration,
    fitting_probabilities,
    floor_for,
    gather_per_class,
    renormalised,
)
from keras_ils.calibration.reports import CalibratorFit, few_examples, mean_nll, message

__all__ = ["DEFAULT_NUM_BINS", "HistogramBinning", "bins_for", "fit_histogram"]

DEFAULT_NUM_BINS = 15


@keras.saving.register_keras_serializable(package="keras_ils")
class HistogramBinning(OneVsRestCalibration):
    """One-vs-rest histogram binning: each class's probability mapped to its bin's class frequency, renormalised.

    For each class `j`, `num_bins` bins of `p_j` (bounded by `edges[j]`,
    `num_bins - 1` increasing values; `p_j` falls in bin `b` when exactly `b`
    edges lie below it) and each bin's value `values[j, b]`, the frequency of
    class `j` among the fitting examples in that bin. The calibrated
    distribution is the row renormalised with a floor (see
    `keras_ils.calibration.one_vs_rest`). Fitted by
    `fit_calibrator("histogram", ...)`, which places equal-mass bins; a
    layer built directly starts as equal-width bins valued at their centres.

    Formula:

    ```
    q_j = (values[j, bin_j(p_j)] + floor) / sum_k (values[k, bin_k(p_k)] + floor)
    ```

    Args:
        num_bins: bins per class, `>= 1`. Defaults to `15`.
        floor: added to every class's value before renormalising, in
            `[0, 1]`; the fit sets `1 / n`. Defaults to `0.0`.
        from_logits: whether the inputs are logits (then the outputs are
            log-probabilities) or probabilities (then so are the outputs).
            Defaults to `True`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = HistogramBinning(num_bins=2, floor=0.0)
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([[0.5], [0.5]]), np.array([[0.2, 0.6], [0.3, 0.9]])])
    >>> probabilities = np.array([[0.8, 0.2]])     # class 0 in its upper bin (0.6), class 1 in its lower (0.3)
    >>> np.round(keras.ops.convert_to_numpy(keras.ops.exp(layer(np.log(probabilities)))), 4)
    array([[0.6667, 0.3333]], dtype=float32)

    References:
        Zadrozny & Elkan (2001), "Obtaining calibrated probability estimates
        from decision trees and naive Bayesian classifiers", ICML.
    """

    def __init__(self, num_bins: int = DEFAULT_NUM_BINS, floor: float = 0.0, from_logits: bool = True, **kwargs):
        super().__init__(floor=floor, from_logits=from_logits, **kwargs)
        self.num_bins = integer_at_least("num_bins", num_bins, 1)

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        centres = (np.arange(self.num_bins) + 0.5) / self.num_bins
        edges = np.arange(1, self.num_bins) / self.num_bins
        self.edges = self.add_weight(
            name="edges",
            shape=(num_classes, self.num_bins - 1),
            initializer=keras.initializers.Constant(np.tile(edges, (num_classes, 1))),
            trainable=False,
        )
        self.values = self.add_weight(
            name="values",
            shape=(num_classes, self.num_bins),
            initializer=keras.initializers.Constant(np.tile(centres, (num_classes, 1))),
            trainable=False,
        )

    def _each_class(self, probabilities):
        edges = ops.cast(self.edges, probabilities.dtype)
        bins = ops.sum(ops.cast(probabilities[..., None] > edges, "int32"), axis=-1)
        return gather_per_class(ops.cast(self.values, probabilities.dtype), bins)

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins}


def bins_for(num_examples: int, num_bins: int) -> int:
    """The bins a fit uses: `num_bins`, or fewer by the square-root rule, `floor(sqrt(n))`, on few examples.

    Equal-mass bins of about `sqrt(n)` examples each balance the bins'
    resolution against the noise of each frequency (5 bins of 6 examples on
    30 examples, 15 from 225 examples on).
    """
    return max(1, min(num_bins, math.isqrt(num_examples)))


def equal_mass_edges(scores, num_bins: int) -> np.ndarray:
    """Increasing edges of at most `num_bins` equal-mass bins of `scores`, none left empty.

    Each edge is the midpoint between the last score of a bin and the first
    of the next; tied scores never straddle an edge (an edge inside a run of
    ties goes, and its two bins merge), so every bin holds at least one score.
    """
    ordered = np.sort(scores)
    n = len(ordered)
    cuts = np.unique(np.round(np.arange(1, num_bins) * n / num_bins).astype(int))
    cuts = cuts[(cuts > 0) & (cuts < n)]
    edges = np.unique(0.5 * (ordered[cuts - 1] + ordered[cuts]))
    while len(edges):
        counts = np.bincount(np.searchsorted(edges, scores, side="left"), minlength=len(edges) + 1)
        empty = np.flatnonzero(counts == 0)
        if not len(empty):
            break
        edges = np.delete(edges, max(empty[0] - 1, 0))
    return edges


def fit_histogram(outputs, labels, *, from_logits: bool = True, num_bins: int = DEFAULT_NUM_BINS):
    """Fits a `HistogramBinning` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    Equal-mass bins per class (`bins_for(n, num_bins)` of them, fewer where
    tied scores merge two), each valued at its class frequency; the floor is
    `1 / n`. The report's status is `"few_examples"` (with a warning text)
    when the bins are fewer than `num_bins` or a class has fewer than
    `MIN_EXAMPLES_PER_CLASS` examples.
    """
    integer_at_least("num_bins", num_bins, 1)
    probabilities, labels = fitting_probabilities(outputs, labels, from_logits)
    n, num_classes = probabilities.shape
    used = bins_for(n, num_bins)
    edges = np.ones((num_classes, used - 1))  # unused edges: 1, which no probability exceeds
    values = np.zeros((num_classes, used))
    fitted = np.zeros_like(probabilities)
    for j in range(num_classes):
        class_edges = equal_mass_edges(probabilities[:, j], used)
        bins = np.searchsorted(class_edges, probabilities[:, j], side="left")
        frequencies = np.bincount(bins, weights=(labels == j).astype(np.float64)) / np.bincount(bins)
        edges[j, : len(class_edges)] = class_edges
        values[j, : len(frequencies)] = frequencies
        values[j, len(frequencies) :] = frequencies[-1]
        fitted[:, j] = frequencies[bins]
    floor = floor_for(n)
    layer = HistogramBinning(num_bins=used, floor=floor, from_logits=from_logits, trainable=False)
    layer.build((None, num_classes))
    layer.set_weights([edges, values])
    too_few = None
    if used < num_bins:
        too_few = (
            f"{n} validation examples fill {used} equal-mass bins per class by the square-root rule, not the "
            f"{num_bins} asked for"
        )
    text = message("histogram", [too_few, few_examples(labels, num_classes)])
    nll = mean_nll(renormalised(fitted, floor), labels)
    return layer, CalibratorFit("histogram", "few_examples" if text else "fitted", n, nll, nll, 0, text)
