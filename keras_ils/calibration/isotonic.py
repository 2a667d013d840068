"""Isotonic regression (Zadrozny & Elkan 2002), one-vs-rest: the layer and its fit on validation outputs."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils._checks import integer_at_least
from keras_ils.calibration._float32 import known_classes
from keras_ils.calibration.one_vs_rest import (
    OneVsRestCalibration,
    calibrated,
    cross_validated_model_weight,
    fitting_probabilities,
    fitting_settings,
    gather_per_class,
)
from keras_ils.calibration.reports import CalibratorFit, mean_nll, message, rare_classes, small_set_clause

__all__ = ["IsotonicCalibration", "fit_isotonic", "isotonic_steps"]


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
        upper = ops.clip(ops.sum(ops.cast(x[..., None] > thresholds, "int32"), axis=-1), 1, self.num_thresholds - 1)
        low_t, high_t = gather_per_class(thresholds, upper - 1), gather_per_class(thresholds, upper)
        low_v, high_v = gather_per_class(values, upper - 1), gather_per_class(values, upper)
        width = high_t - low_t
        slope = (high_v - low_v) / ops.where(width > 0, width, 1.0)
        return ops.where(width > 0, low_v + slope * (x - low_t), low_v)

    def get_config(self):
        return {**super().get_config(), "num_thresholds": self.num_thresholds}


def _unique_scores(scores, targets):
    """scikit-learn's `_make_unique`: a sorted score within `resolution` (1e-15) of its run's first joins the run.

    Returns `(scores, mean targets, counts)` of the runs. A gap of at least
    the resolution always starts a run; after a smaller gap (ties) a run
    starts only where the score has moved the resolution away from the run's
    first score.
    """
    order = np.lexsort((targets, scores))
    scores, targets = scores[order], targets[order]
    resolution = np.finfo(np.float64).resolution
    starts = np.concatenate([[True], np.diff(scores) >= resolution])
    run_first = np.maximum.accumulate(np.where(starts, np.arange(len(scores)), 0))
    latest = 0
    for i in np.flatnonzero(~starts):  # ties and near-ties: the sequential rule
        if scores[i] - scores[max(run_first[i], latest)] >= resolution:
            starts[i], latest = True, i
    run = np.cumsum(starts) - 1
    counts = np.bincount(run)
    return scores[starts], np.bincount(run, weights=targets) / counts, counts


def _pool_adjacent_violators(targets, weights):
    """The weighted least-squares non-decreasing fit of `targets` (the pool-adjacent-violators algorithm)."""
    means, totals, sizes = [], [], []
    for target, weight in zip(targets, weights, strict=True):
        means.append(float(target))
        totals.append(float(weight))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            mean, total, size = means.pop(), totals.pop(), sizes.pop()
            means[-1] = (means[-1] * totals[-1] + mean * total) / (totals[-1] + total)
            totals[-1] += total
            sizes[-1] += size
    return np.repeat(means, sizes)


def isotonic_steps(scores, targets) -> tuple:
    """`(thresholds, values)` of scikit-learn's `IsotonicRegression(y_min=0, y_max=1)` fitted on `(scores, targets)`.

    Ties (scores within 1e-15) are averaged, the pool-adjacent-violators
    algorithm fits the non-decreasing sequence, values are clipped to
    `[0, 1]`, and interior points whose value equals both neighbours' are
    dropped, as scikit-learn's `X_thresholds_` and `y_thresholds_`.
    """
    scores, means, counts = _unique_scores(np.asarray(scores, np.float64), np.asarray(targets, np.float64))
    values = np.clip(_pool_adjacent_violators(means, counts), 0.0, 1.0)
    keep = np.ones(len(values), bool)
    keep[1:-1] = (values[1:-1] != values[:-2]) | (values[1:-1] != values[2:])
    return scores[keep], values[keep]


def _held_out_values(train_probabilities, train_labels, test_probabilities):
    """`held_out_map` of `cross_validated_model_weight`: each class's map fitted on the training folds."""
    columns = []
    for j in range(train_probabilities.shape[1]):
        thresholds, values = isotonic_steps(train_probabilities[:, j], train_labels == j)
        columns.append(np.interp(test_probabilities[:, j], thresholds, values))
    return np.stack(columns, axis=1)


def fit_isotonic(outputs, labels, *, from_logits: bool = True):
    """Fits an `IsotonicCalibration` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    One `isotonic_steps` per class on `(p_j, y == j)`, with the floor `1 / n`.
    On a small set (a class with fewer than `MIN_EXAMPLES_PER_CLASS`
    examples) the floor is `1 / (n K)` and the output is mixed with the
    model's distribution with weight `m K / (n + m K)`, `m` cross-validated
    (`keras_ils.calibration.one_vs_rest`); the report's status is then
    `"few_examples"` (with a warning text). Each class's map is
    scikit-learn's either way.
    """
    probabilities, labels = fitting_probabilities(outputs, labels, from_logits)
    n, num_classes = probabilities.shape
    steps = [isotonic_steps(probabilities[:, j], labels == j) for j in range(num_classes)]
    width = max(2, *(len(thresholds) for thresholds, _ in steps))
    thresholds, values = np.zeros((num_classes, width)), np.zeros((num_classes, width))
    fitted = np.zeros_like(probabilities)
    for j, (class_thresholds, class_values) in enumerate(steps):
        m = len(class_thresholds)
        thresholds[j, :m], thresholds[j, m:] = class_thresholds, class_thresholds[-1]
        values[j, :m], values[j, m:] = class_values, class_values[-1]
        fitted[:, j] = np.interp(probabilities[:, j], class_thresholds, class_values)
    rare = rare_classes(labels, num_classes)
    prior = cross_validated_model_weight(_held_out_values, probabilities, labels) if rare else 0.0
    floor, model_weight = fitting_settings(n, num_classes, rare is not None, prior)
    layer = IsotonicCalibration(
        num_thresholds=width, floor=floor, from_logits=from_logits, model_weight=model_weight, trainable=False
    )
    layer.build((None, num_classes))
    layer.set_weights([thresholds, values])
    text = (
        message("isotonic", [small_set_clause([f"{n} validation examples", rare], floor, model_weight, prior, n)])
        if rare
        else None
    )
    nll = mean_nll(calibrated(fitted, probabilities, floor, model_weight), labels)
    return layer, CalibratorFit("isotonic", "few_examples" if text else "fitted", n, nll, nll, 0, text)
