"""How good prediction sets are: coverage and size in numpy, and the same scores as streaming Keras metrics.

Every score reads sets as the `[n, K]` 0/1 masks that a conformalized model
outputs, and labels in any `y_true` form of the package. The per-example
values (`covered`, `set_size`) are computed once, in `keras.ops`; the numpy
scores and the metrics aggregate them. The stratified scores are vectors in
numpy (`size_stratified_coverage`: one coverage per set size;
`class_conditional_coverage`: one per class) and their worst entry as a
metric, whose result must be a scalar that Keras can log.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _bad_input, _labels
from keras_ils._checks import integer_at_least

__all__ = [
    "ClassConditionalCoverage",
    "MeanSetSize",
    "SetCoverage",
    "SizeStratifiedCoverage",
    "class_conditional_coverage",
    "coverage",
    "covered",
    "mean_set_size",
    "set_size",
    "size_stratified_coverage",
]

_register = keras.saving.register_keras_serializable(package="keras_ils")


def covered(labels, sets):
    """`[n]`: 1 where the set `sets [n, K]` holds the class `labels [n]` (integer), else 0."""
    sets = ops.convert_to_tensor(sets)
    return ops.take_along_axis(sets, ops.cast(ops.reshape(labels, (-1, 1)), "int32"), axis=-1)[:, 0]


def set_size(sets):
    """`[n]`: the number of classes in each set of `sets [n, K]`."""
    return ops.sum(ops.convert_to_tensor(sets), axis=-1)


def _checked(sets, labels=None) -> tuple:
    """`(sets as float32 [n, K], labels as int [n] or None)`: 0/1 masks of `n >= 1` sets, one label each."""
    sets = np.asarray(ops.convert_to_numpy(sets), dtype=np.float32)
    if sets.ndim != 2 or len(sets) == 0 or sets.shape[1] < 2:
        raise ValueError(f"Argument `sets` must have shape [n >= 1, K >= 2]. Received shape: {sets.shape}")
    if not np.isin(sets, (0.0, 1.0)).all():
        nan, inf = int(np.isnan(sets).sum()), int(np.isinf(sets).sum())
        found = f"{nan} NaN and {inf} inf values" if nan or inf else f"values in [{sets.min():.4g}, {sets.max():.4g}]"
        raise ValueError(
            "Invalid value for argument `sets`. Expected 0/1 masks (a conformalized model's outputs). Received "
            f"{found} that are not all 0 or 1."
        )
    if labels is None:
        return sets, None
    labels = ops.convert_to_numpy(_labels.hard_labels(labels, sets.shape[1], y_pred_rank=2)).reshape(-1)
    if len(labels) != len(sets):
        raise ValueError(f"`sets` and `labels` must have the same length. Received: {len(sets)} and {len(labels)}")
    return sets, labels


def _covered_and_sizes(sets, labels) -> tuple:
    return ops.convert_to_numpy(covered(labels, sets)), ops.convert_to_numpy(set_size(sets))


def coverage(sets, labels) -> float:
    """The fraction of sets that hold their true label (the target is `1 - alpha`).

    Example:

    >>> coverage([[1, 1, 0], [0, 0, 1], [1, 0, 0]], [1, 0, 0])
    0.6666666666666666
    """
    sets, labels = _checked(sets, labels)
    return float(np.mean(_covered_and_sizes(sets, labels)[0], dtype=np.float64))


def mean_set_size(sets) -> float:
    """The mean number of classes in a set (smaller is more informative at the same coverage).

    Example:

    >>> mean_set_size([[1, 1, 0], [0, 0, 1], [1, 0, 0]])
    1.3333333333333333
    """
    sets, _ = _checked(sets)
    return float(np.mean(ops.convert_to_numpy(set_size(sets)), dtype=np.float64))


def size_stratified_coverage(sets, labels) -> np.ndarray:
    """`[K + 1]`: the coverage among the sets of each size `0, ..., K`, `nan` for sizes no set has.

    A conformal method can meet `1 - alpha` on average by over-covering
    large sets and under-covering small ones; the worst stratum shows it
    (Angelopoulos et al. 2021, "size-stratified coverage").

    Example:

    >>> size_stratified_coverage([[1, 1, 0], [0, 0, 1], [1, 0, 0]], [1, 0, 0])
    array([nan, 0.5, 1. , nan])
    """
    sets, labels = _checked(sets, labels)
    hits, sizes = _covered_and_sizes(sets, labels)
    sizes, strata = sizes.astype(int), sets.shape[1] + 1
    return _ratios(np.bincount(sizes, hits, strata), np.bincount(sizes, None, strata))


def class_conditional_coverage(sets, labels) -> np.ndarray:
    """`[K]`: the coverage among the examples of each true class, `nan` for classes without examples.

    Marginal coverage can hide a class whose sets rarely hold it;
    `class_conditional=True` calibrates each class to `1 - alpha`.

    Example:

    >>> class_conditional_coverage([[1, 1, 0], [0, 0, 1], [1, 0, 0]], [1, 0, 0])
    array([0.5, 1. , nan])
    """
    sets, labels = _checked(sets, labels)
    hits, _ = _covered_and_sizes(sets, labels)
    k = sets.shape[1]
    return _ratios(np.bincount(labels, hits, k), np.bincount(labels, None, k))


def _ratios(hits, counts) -> np.ndarray:
    return np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)


def _check_masks(y_pred) -> None:
    """Refuses `y_pred` that are not 0/1 set masks (logits or probabilities given to a set metric), row by row."""
    is_mask = ops.logical_or(ops.equal(y_pred, 0), ops.equal(y_pred, 1))
    bad = ops.logical_not(ops.all(is_mask, axis=-1))

    def received():
        values = np.asarray(ops.convert_to_numpy(y_pred))
        return f"Received: values in [{np.nanmin(values):.4g}, {np.nanmax(values):.4g}]."

    message = (
        "Invalid value for argument `y_pred`. A set metric expects 0/1 masks, the outputs of a conformalized model "
        "(`keras_ils.conformal.conformalize`), not logits or probabilities."
    )
    _bad_input.report(_bad_input.NOT_SET_MASKS, message, bad, received)


class _SetMetric(_bad_input.CheckedMetric):
    """Weighted sums of the per-example `covered` and `set_size` of 0/1 set masks `y_pred [..., K]`."""

    def __init__(self, num_classes: int | None = None, name: str | None = None, dtype: str | None = None):
        super().__init__(name=name, dtype=dtype)
        self.num_classes = None if num_classes is None else integer_at_least("num_classes", num_classes, 2)

    def _zeros(self, name, size=None):
        return self.add_variable(
            shape=() if size is None else (size,), initializer="zeros", dtype=self.dtype, name=name
        )

    def _rows(self, y_true, y_pred, sample_weight) -> tuple:
        """`(covered [n], set sizes [n], labels [n], weights [n])`, one row per set."""
        y_pred = ops.convert_to_tensor(y_pred, dtype=self.dtype)
        _labels.check_metric_width(self, y_pred)
        num_classes = y_pred.shape[-1]
        with self.counting():
            labels = _labels.hard_labels(ops.convert_to_tensor(y_true), num_classes, len(y_pred.shape))
            _check_masks(y_pred)
        labels = ops.reshape(labels, (-1,))
        sets = ops.reshape(y_pred, (-1, num_classes))
        if sample_weight is None:
            weights = ops.ones_like(labels, dtype=self.dtype)
        else:
            weights = ops.broadcast_to(ops.reshape(ops.cast(sample_weight, self.dtype), (-1,)), ops.shape(labels))
        return covered(labels, sets), set_size(sets), labels, weights

    def reset_state(self):
        for variable in self.variables:
            variable.assign(ops.zeros(variable.shape, dtype=variable.dtype))

    def get_config(self):
        config = super().get_config()
        return config if self.num_classes is None else {**config, "num_classes": self.num_classes}


class _Mean(_SetMetric):
    def __init__(self, name, dtype):
        super().__init__(name=name, dtype=dtype)
        self.total, self.count = self._zeros("total"), self._zeros("count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        hits, sizes, _, weights = self._rows(y_true, y_pred, sample_weight)
        self.total.assign_add(ops.sum(weights * self._values(hits, sizes)))
        self.count.assign_add(ops.sum(weights))

    def _result(self):
        return ops.divide_no_nan(self.total, self.count)


@_register
class SetCoverage(_Mean):
    """The fraction of prediction sets that hold the true label, streamed (`coverage`).

    `y_pred` are the 0/1 set masks a conformalized model outputs.

    Args:
        name: Defaults to `"set_coverage"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = SetCoverage()
    >>> m.update_state([1, 0], [[1, 1, 0], [0, 0, 1]])
    >>> m.update_state([0], [[1, 0, 0]])
    >>> round(float(m.result()), 4)
    0.6667

    Usage over a dataset (a conformalized model has no loss for `evaluate`):

    ```python
    metrics = [keras_ils.conformal.SetCoverage(), keras_ils.conformal.MeanSetSize()]
    for x, y in test_ds:
        sets = conformal(x)
        for metric in metrics:
            metric.update_state(y, sets)
    ```
    """

    def __init__(self, name: str = "set_coverage", dtype: str | None = None):
        super().__init__(name=name, dtype=dtype)

    def _values(self, hits, sizes):
        return hits


@_register
class MeanSetSize(_Mean):
    """The mean number of classes in a prediction set, streamed (`mean_set_size`); lower is better.

    Args:
        name: Defaults to `"mean_set_size"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = MeanSetSize()
    >>> m.update_state([1, 0, 0], [[1, 1, 0], [0, 0, 1], [1, 0, 0]])
    >>> round(float(m.result()), 4)
    1.3333
    """

    def __init__(self, name: str = "mean_set_size", dtype: str | None = None):
        super().__init__(name=name, dtype=dtype)
        self._direction = "down"

    def _values(self, hits, sizes):
        return sizes


class _Worst(_SetMetric):
    """Per-stratum sums of hits and weights; the result is the lowest coverage among strata with examples."""

    def __init__(self, num_classes, strata, name, dtype):
        super().__init__(num_classes=num_classes, name=name, dtype=dtype)
        self.hits, self.counts = self._zeros("hits", strata), self._zeros("counts", strata)

    def update_state(self, y_true, y_pred, sample_weight=None):
        hits, sizes, labels, weights = self._rows(y_true, y_pred, sample_weight)
        # within range even for input the checks count, whose error `result()` raises (TensorFlow's CPU kernel would
        # fail first, on an id out of range, and an accelerator's would drop the row)
        stratum = ops.clip(ops.cast(self._stratum(sizes, labels), "int32"), 0, self.hits.shape[0] - 1)
        self.hits.assign_add(ops.segment_sum(weights * hits, stratum, self.hits.shape[0]))
        self.counts.assign_add(ops.segment_sum(weights, stratum, self.counts.shape[0]))

    def _result(self):
        present = self.counts > 0
        ratios = ops.divide_no_nan(self.hits, self.counts)
        return ops.where(ops.any(present), ops.min(ops.where(present, ratios, 1.0)), 0.0)


@_register
class SizeStratifiedCoverage(_Worst):
    """The lowest coverage among the sets of one size, streamed: the minimum of `size_stratified_coverage`.

    Args:
        num_classes: `K`, `>= 2` (sets have sizes `0, ..., K`).
        name: Defaults to `"size_stratified_coverage"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = SizeStratifiedCoverage(num_classes=3)
    >>> m.update_state([1, 0, 0], [[1, 1, 0], [0, 0, 1], [1, 0, 0]])
    >>> float(m.result())   # the sets of size 1 hold their label half the time
    0.5
    """

    def __init__(self, num_classes: int, name: str = "size_stratified_coverage", dtype: str | None = None):
        integer_at_least("num_classes", num_classes, 2)
        super().__init__(num_classes, num_classes + 1, name, dtype)

    def _stratum(self, sizes, labels):
        return ops.cast(sizes, "int32")


@_register
class ClassConditionalCoverage(_Worst):
    """The lowest coverage among the true classes, streamed: the minimum of `class_conditional_coverage`.

    Args:
        num_classes: `K`, `>= 2`.
        name: Defaults to `"class_conditional_coverage"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = ClassConditionalCoverage(num_classes=3)
    >>> m.update_state([1, 0, 0], [[1, 1, 0], [0, 0, 1], [1, 0, 0]])
    >>> float(m.result())   # class 0's sets hold it once in two
    0.5
    """

    def __init__(self, num_classes: int, name: str = "class_conditional_coverage", dtype: str | None = None):
        integer_at_least("num_classes", num_classes, 2)
        super().__init__(num_classes, num_classes, name, dtype)

    def _stratum(self, sizes, labels):
        return labels
