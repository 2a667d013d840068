"""Isotonic regression (Zadrozny & Elkan 2002), one-vs-rest: the layer and its fit on validation outputs.

The fit is float64 numpy, all classes at once (one sort of each class's
probabilities, then one pool-adjacent-violators pass over at most `2 n + K`
segments); the layer is `keras.ops` and runs where the model runs. Why the
work sits there: `keras_ils.calibration.one_vs_rest`.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils._checks import integer_at_least
from keras_ils.calibration._float32 import known_classes
from keras_ils.calibration.one_vs_rest import (
    OneVsRestCalibration,
    count_below,
    cross_validated_model_weight,
    first_position,
    fitting_probabilities,
    fitting_settings,
    gather_per_class,
    label_losses,
    sorted_per_class,
)
from keras_ils.calibration.reports import CalibratorFit, message, rare_classes, small_set_clause

__all__ = ["IsotonicCalibration", "fit_isotonic"]


@keras.saving.register_keras_serializable(package="keras_ils")
class IsotonicCalibration(OneVsRestCalibration):
    """One-vs-rest isotonic regression: each class's probability through a fitted non-decreasing map, renormalised.

    For each class `j`, the map is the piecewise-linear interpolation of the
    points `(thresholds[j, m], values[j, m])` (thresholds non-decreasing),
    constant beyond the first and last threshold: scikit-learn's
    `IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")` evaluated
    with `keras.ops`. Classes with fewer points than `num_thresholds` repeat
    their last one. The calibrated distribution is the row renormalised with
    a floor, mixed with the model's own distribution with weight
    `model_weight` (see `keras_ils.calibration.one_vs_rest`). Fitted by
    `fit_calibrator("isotonic", ...)`; a layer built directly starts as the
    identity map of each probability.

    Formula:

    ```
    h_j(p) = interp(clip(p, thresholds[j, 0], thresholds[j, -1]), thresholds[j], values[j])
    r_j = (h_j(p_j) + floor) / sum_k (h_k(p_k) + floor)
    q_j = (1 - model_weight) * r_j + model_weight * p_j
    ```

    Args:
        num_thresholds: points per class, `>= 2`. Defaults to `2`.
        floor: added to every class's value before renormalising, in
            `[0, 1]`; the fit sets `1 / n` (`1 / (n K)` on a small set).
            Defaults to `0.0`.
        from_logits: whether the inputs are logits (then the outputs are
            log-probabilities) or probabilities (then so are the outputs).
            Defaults to `True`.
        model_weight: the weight of the model's own distribution in the
            output, in `[0, 1]`; the fit sets `0` (`m K / (n + m K)` on a
            small set, `m` cross-validated). Defaults to `0.0`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = IsotonicCalibration(num_thresholds=2, from_logits=False)
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([[0.2, 0.8], [0.2, 0.8]]), np.array([[0.0, 1.0], [0.0, 0.5]])])
    >>> np.round(keras.ops.convert_to_numpy(layer.one_vs_rest(np.array([[0.65, 0.35]]))), 4)
    array([[0.75 , 0.125]], dtype=float32)
    >>> np.round(keras.ops.convert_to_numpy(layer(np.array([[0.65, 0.35]]))), 4)   # renormalised
    array([[0.8571, 0.1429]], dtype=float32)

    References:
        Zadrozny & Elkan (2002), "Transforming classifier scores into
        accurate multiclass probability estimates", KDD.
    """

    def __init__(
        self,
        num_thresholds: int = 2,
        floor: float = 0.0,
        from_logits: bool = True,
        model_weight: float = 0.0,
        **kwargs,
    ):
        super().__init__(floor=floor, from_logits=from_logits, model_weight=model_weight, **kwargs)
        self.num_thresholds = integer_at_least("num_thresholds", num_thresholds, 2)

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        identity = np.tile(np.linspace(0.0, 1.0, self.num_thresholds), (num_classes, 1))
        self.thresholds = self.add_weight(
            name="thresholds",
            shape=(num_classes, self.num_thresholds),
            initializer=keras.initializers.Constant(identity),
            trainable=False,
        )
        self.values = self.add_weight(
            name="values",
            shape=(num_classes, self.num_thresholds),
            initializer=keras.initializers.Constant(identity),
            trainable=False,
        )

    def _each_class(self, probabilities):
        thresholds = ops.cast(self.thresholds, probabilities.dtype)
        values = ops.cast(self.values, probabilities.dtype)
        x = ops.clip(probabilities, thresholds[:, 0], thresholds[:, -1])
        # scipy's interp1d: the segment [t[i-1], t[i]] with i the count of thresholds below x, within [1, M-1]
        upper = ops.clip(count_below(thresholds, x), 1, self.num_thresholds - 1)
        width = thresholds[:, 1:] - thresholds[:, :-1]
        slope = ops.where(width > 0, (values[:, 1:] - values[:, :-1]) / ops.where(width > 0, width, 1.0), 0.0)
        segments = ops.stack([thresholds[:, :-1], values[:, :-1], slope], axis=-1)  # [K, M - 1, 3]
        low_t, low_v, slope = ops.unstack(gather_per_class(segments, upper - 1), axis=-1)  # one gather
        return low_v + slope * (x - low_t)

    def get_config(self):
        return {**super().get_config(), "num_thresholds": self.num_thresholds}


RESOLUTION = np.finfo(np.float64).resolution  # scikit-learn's tie tolerance, 1e-15
_TIE_BLOCK = 1 << 18  # scores per block of `_clusters`' differences


def _runs(ordered) -> tuple:
    """`(lo, hi)`: the flat positions `[lo, hi)` in `ordered [K, n]` (sorted rows) of the runs of several scores.

    scikit-learn's `_make_unique`: a score starts a run when it is at least
    `RESOLUTION` above the first score of the current run. A gap of at least
    the resolution always starts one; the others lie in clusters
    (`_clusters`), in which each score's next run start is found once
    (`_next_starts`), and the runs are followed from start to start, all
    clusters at once, one gather a step.
    """
    anchors, ends = _clusters(ordered)
    if not len(anchors):
        return anchors, ends
    sizes = ends - anchors
    stops = np.cumsum(sizes)  # where each cluster ends among the clustered scores, laid one after another
    shift = anchors - stops + sizes  # a clustered score's flat position less its index among them
    classes = np.searchsorted(anchors, np.arange(anchors[-1] // ordered.shape[1] + 2) * ordered.shape[1])
    following = _next_starts(ordered.ravel(), shift, stops - sizes, stops, classes)
    starts = np.zeros(stops[-1], bool)  # the run starts among the clustered scores
    at, until = stops - sizes, stops  # each cluster's current run start, and its end
    while len(at):
        starts[at] = True
        at = following[at]
        inside = at < until
        at, until = at[inside], until[inside]
    at = np.flatnonzero(starts)
    lo = at + shift[np.searchsorted(stops, at, side="right")]
    hi = lo + np.diff(at, append=len(starts))  # a cluster's last run ends with it
    several = hi - lo > 1
    return lo[several], hi[several]


def _clusters(ordered) -> tuple:
    """`(anchors, ends)`: flat positions `[anchor, end)` of the clusters of `ordered [K, n]` (sorted rows).

    A cluster is a score and the scores after it, at least one, each less
    than `RESOLUTION` above the one before. The differences are taken a
    block of rows at a time, so that they stay small.
    """
    num_rows, n = ordered.shape
    rows, anchors, ends = max(1, _TIE_BLOCK // n), [], []
    for first in range(0, num_rows, rows):
        block = ordered[first : first + rows]
        close = np.zeros((len(block), n + 1), bool)  # whether score `c` is within the resolution of score `c - 1`
        np.less(np.diff(block, axis=1), RESOLUTION, out=close[:, 1:n])
        edges = np.flatnonzero(close[:, 1:] != close[:, :-1]) + first * n  # each cluster's anchor, then its last score
        anchors.append(edges[::2])
        ends.append(edges[1::2] + 1)
    return np.concatenate(anchors), np.concatenate(ends)


def _next_starts(flat, shift, offsets, stops, classes) -> np.ndarray:
    """For each clustered score, the index of the first after it `RESOLUTION` above it, or its cluster's end.

    Cluster `c`'s scores have the indices `offsets[c]` to `stops[c]` and the
    flat positions `shift[c]` further on; class `j` holds the clusters
    `classes[j]` to `classes[j + 1]`, so that its scores are sorted. One
    `searchsorted` a class finds each index, checked with scikit-learn's
    test `x - s >= RESOLUTION` itself; where rounding moved the test off the
    guess, a bisection settles it.
    """
    following = np.empty(stops[-1], np.int64)
    for first, last in zip(classes[:-1], classes[1:], strict=True):
        if first == last:
            continue
        begin, stop, counts = offsets[first], stops[last - 1], stops[first:last] - offsets[first:last]
        row = flat[np.repeat(shift[first:last], counts) + np.arange(begin, stop)]  # indices below from `begin`
        after, end = np.arange(1, stop - begin + 1), np.repeat(stops[first:last] - begin, counts)
        guess = np.clip(np.searchsorted(row, row + RESOLUTION), after, end)
        wrong = ((guess < end) & ~_above(row, guess, row)) | ((guess > after) & _above(row, guess - 1, row))
        base = row[wrong]
        guess[wrong] = first_position(after[wrong], end[wrong], lambda t, row=row, base=base: _above(row, t, base))
        following[begin:stop] = guess + begin
    return following


def _above(scores, positions, base) -> np.ndarray:
    """The `_make_unique` test `x - s >= RESOLUTION`: whether `scores[positions]` end runs begun at `base`."""
    return np.take(scores, positions, mode="clip") - base >= RESOLUTION


def _runs_of(runs, positions) -> tuple:
    """`(start, end)` flat positions of the runs holding `positions`, for the runs of several scores `(lo, hi)`."""
    lo, hi = runs
    if not len(lo):
        return positions, positions + 1
    at = np.maximum(np.searchsorted(lo, positions, side="right") - 1, 0)
    inside = (lo[at] <= positions) & (positions < hi[at])
    return np.where(inside, lo[at], positions), np.where(inside, hi[at], positions + 1)


def _pooled(means, weights, rows) -> np.ndarray:
    """Pool adjacent violators within each row: the weighted least-squares non-decreasing fit of `means`.

    Pools neighbours whose means do not increase, as scikit-learn's
    `_inplace_contiguous_isotonic_regression`, so the fitted levels rise
    strictly from one block to the next.
    """
    levels, totals, sizes, base, current = [], [], [], 0, None
    for mean, weight, label in zip(means.tolist(), weights.tolist(), rows.tolist(), strict=True):
        if label != current:
            base, current = len(levels), label
        levels.append(mean)
        totals.append(weight)
        sizes.append(1)
        while len(levels) > base + 1 and levels[-2] >= levels[-1]:
            level, total, size = levels.pop(), totals.pop(), sizes.pop()
            levels[-1] = (levels[-1] * totals[-1] + level * total) / (totals[-1] + total)
            totals[-1] += total
            sizes[-1] += size
    return np.repeat(levels, sizes)


def _steps(probabilities, labels) -> tuple:
    """`(thresholds, values)` `[K, M]` of scikit-learn's `IsotonicRegression(y_min=0, y_max=1)` on `(p_j, y == j)`.

    Rows shorter than `M` repeat their last point. A class without examples
    gets the map of every class's `(p_j, y == j)` pooled (module
    `one_vs_rest`).
    """
    num_classes, n = probabilities.shape
    scores = probabilities[labels, np.arange(n)]
    points, levels, counts = _points(probabilities, labels, scores)
    absent = np.flatnonzero(np.bincount(labels, minlength=num_classes) == 0)
    if not len(absent):
        return _padded(points, levels, counts, max(2, counts.max()))
    pooled = _points(probabilities.reshape(1, -1), np.zeros(n, int), scores)
    width = max(2, counts.max(), pooled[2][0])
    thresholds, values = _padded(points, levels, counts, width)
    thresholds[absent], values[absent] = _padded(*pooled, width)
    return thresholds, values


def _points(probabilities, rows, scores) -> tuple:
    """`(thresholds, values, counts)`: each row's isotonic map, its points concatenated, for the positives at `scores`.

    Row `j` of `probabilities [K, n]` is fitted to the indicator of the
    positives `rows == j` (each at its score `scores`), all rows at once: one
    sort per row; runs of tied scores averaged; the runs between two holding
    a positive (all negative) pooled before the pool-adjacent-violators
    algorithm, which never splits them, so it sees at most `2 P + K`
    segments for `P` positives; the points whose value equals both
    neighbours' dropped, as scikit-learn's `X_thresholds_` and
    `y_thresholds_`.
    """
    ordered = sorted_per_class(probabilities)
    num_rows, n = ordered.shape
    flat, runs = ordered.ravel(), _runs(ordered)
    found = first_position(rows * n, rows * n + n, lambda t: np.take(flat, t, mode="clip") >= scores)
    run_starts, holding = np.unique(_runs_of(runs, found)[0], return_inverse=True)
    run_ends = _runs_of(runs, run_starts)[1]
    bounds = np.unique(np.concatenate([np.arange(num_rows) * n, run_starts, run_ends[run_ends % n > 0]]))
    ends, row = np.append(bounds[1:], num_rows * n), bounds // n
    held = np.minimum(np.searchsorted(run_starts, bounds), len(run_starts) - 1)
    positives = np.where(run_starts[held] == bounds, np.bincount(holding, minlength=len(run_starts))[held], 0)
    levels = np.clip(_pooled(positives / (ends - bounds), ends - bounds, row), 0.0, 1.0)
    last_run = _runs_of(runs, ends - 1)[0]
    new_row, last_of_row = np.ones(len(bounds), bool), np.ones(len(bounds), bool)
    new_row[1:], last_of_row[:-1] = row[1:] != row[:-1], row[1:] != row[:-1]
    keep_first = new_row | np.append(True, levels[1:] != levels[:-1])
    keep_last = last_of_row | np.append(levels[:-1] != levels[1:], True)
    single = last_run == bounds  # a segment of one run: one point
    kept = np.stack([keep_first | (single & keep_last), keep_last & ~single], axis=1).ravel()
    positions = np.stack([bounds, last_run], axis=1).ravel()[kept]
    return flat[positions], np.repeat(levels, 2)[kept], np.bincount(positions // n, minlength=num_rows)


def _padded(points, values, counts, width) -> tuple:
    """`[rows, width]` tables of each row's `counts` concatenated `points` and `values`, its last one repeated."""
    offsets = np.concatenate([[0], np.cumsum(counts)])
    index = np.minimum(offsets[:-1, None] + np.arange(width), offsets[1:, None] - 1)
    return points[index], values[index]


def _interpolated(thresholds, values, probabilities) -> np.ndarray:
    """Each class's map at `probabilities [K, n]`, float64: `np.interp` through its points, constant beyond them."""
    mapped = np.empty(probabilities.shape)
    for j, class_probabilities in enumerate(probabilities):
        mapped[j] = np.interp(class_probabilities, thresholds[j], values[j])
    return mapped


def _held_out_values(train_probabilities, train_labels, test_probabilities):
    """`held_out_map` of `cross_validated_model_weight`: each class's map fitted on the training folds."""
    return _interpolated(*_steps(train_probabilities, train_labels), test_probabilities)


def fit_isotonic(outputs, labels, *, from_logits: bool = True):
    """Fits an `IsotonicCalibration` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    scikit-learn's isotonic regression per class on `(p_j, y == j)`, all
    classes at once (`_points`), with the floor `1 / n`.
    On a small set (a class with fewer than `MIN_EXAMPLES_PER_CLASS`
    examples) the floor is `1 / (n K)` and the output is mixed with the
    model's distribution with weight `m K / (n + m K)`, `m` cross-validated
    (`keras_ils.calibration.one_vs_rest`); the report's status is then
    `"few_examples"` (with a warning text). Each class's map is
    scikit-learn's either way; a class absent from `labels` gets the map of
    every class's pairs pooled (`keras_ils.calibration.one_vs_rest`).
    """
    probabilities, labels = fitting_probabilities(outputs, labels, from_logits)
    num_classes, n = probabilities.shape
    thresholds, values = _steps(probabilities, labels)
    rare = rare_classes(labels, num_classes)
    prior = cross_validated_model_weight(_held_out_values, probabilities, labels) if rare else 0.0
    floor, model_weight = fitting_settings(n, num_classes, rare is not None, prior)
    layer = IsotonicCalibration(
        num_thresholds=thresholds.shape[1],
        floor=floor,
        from_logits=from_logits,
        model_weight=model_weight,
        trainable=False,
    )
    layer.build((None, num_classes))
    layer.set_weights([thresholds, values])
    text = (
        message("isotonic", [small_set_clause([f"{n} validation examples", rare], floor, model_weight, prior, n)])
        if rare
        else None
    )
    fitted = _interpolated(thresholds, values, probabilities)
    nll = float(label_losses(fitted, probabilities, labels, floor, model_weight).mean())
    return layer, CalibratorFit("isotonic", "few_examples" if text else "fitted", n, nll, nll, 0, text)
