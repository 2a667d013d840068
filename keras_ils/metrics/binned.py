"""The binned calibration metrics: confidence ECE, MCE, classwise-ECE and the paper's printed cwECE."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from numpy.typing import ArrayLike

from keras_ils import _bad_input, _labels
from keras_ils._checks import integer_at_least

__all__ = [
    "ClassConditionalECE",
    "ClasswiseExpectedCalibrationError",
    "ExpectedCalibrationError",
    "MaximumCalibrationError",
    "bin_index",
]

_register = keras.saving.register_keras_serializable(package="keras_ils")


def bin_index(probabilities: ArrayLike, num_bins: int):
    """The paper's bin of each probability: `clip(ceil(p * N) - 1, 0, N - 1)`.

    A numpy array is binned in numpy, in its own dtype, and gives a numpy
    array (the numpy scores of `keras_ils.evaluation` bin chunks of their
    rows without a tensor copy); anything else gives a backend tensor. Both
    compute `p * N` in the input's float dtype, so float32 inputs get the
    same bins either way.

    Example:

    >>> keras.ops.convert_to_numpy(bin_index([0.0, 0.1, 1 / 3, 0.34, 1.0], 3))
    array([0, 0, 0, 1, 2], dtype=int32)
    """
    if isinstance(probabilities, np.ndarray):
        return np.clip(np.ceil(probabilities * num_bins).astype(np.int32) - 1, 0, num_bins - 1)
    probabilities = ops.convert_to_tensor(probabilities)
    index = ops.cast(ops.ceil(probabilities * num_bins), "int32") - 1
    return ops.clip(index, 0, num_bins - 1)


class _CalibrationMetric(_bad_input.CheckedMetric):
    """Shared argument handling: probabilities, hard labels and weights, flattened to rows, checked.

    Bad labels or probabilities raise `ValueError` when read eagerly; inside a
    compiled step they are counted and `result()` raises on the host
    (`keras_ils._bad_input.CheckedMetric`).
    """

    _reads_probabilities = True  # False where `from_logits` cannot change the value (the argmax)

    def __init__(
        self,
        num_classes: int | None = None,
        num_bins: int = 15,
        from_logits: bool = False,
        name: str | None = None,
        dtype: str | None = None,
        needs_classes: bool = False,
    ):
        super().__init__(name=name, dtype=dtype)
        if needs_classes or num_classes is not None:
            integer_at_least("num_classes", num_classes, 2)
        integer_at_least("num_bins", num_bins, 1)
        self.num_classes = num_classes
        self.num_bins = num_bins
        self.from_logits = bool(from_logits)
        self._direction = "down"

    def _zeros(self, name, size=None):
        return self.add_variable(
            shape=() if size is None else (size,), initializer="zeros", dtype=self.dtype, name=name
        )

    def _rows(self, y_true, y_pred, sample_weight):
        """Returns `(probabilities [n, K], log_probabilities [n, K], labels [n], weights [n])`."""
        y_pred = ops.convert_to_tensor(y_pred, dtype=self.dtype)
        _labels.check_metric_width(self, y_pred)
        num_classes = y_pred.shape[-1]
        with self.counting():
            labels = _labels.hard_labels(ops.convert_to_tensor(y_true), num_classes, len(y_pred.shape))
            if not self.from_logits and self._reads_probabilities:
                _labels.check_probabilities(y_pred)
        if self.from_logits:
            log_probabilities = ops.log_softmax(y_pred, axis=-1)
            probabilities = ops.exp(log_probabilities)
        else:
            probabilities = y_pred
            log_probabilities = ops.log(ops.clip(y_pred, keras.config.epsilon(), 1.0))
        if len(probabilities.shape) != 2:  # a sequence or image of predictions: one row each
            probabilities = ops.reshape(probabilities, (-1, num_classes))
            log_probabilities = ops.reshape(log_probabilities, (-1, num_classes))
            labels = ops.reshape(labels, (-1,))
        if sample_weight is None:
            weights = ops.ones_like(labels, dtype=self.dtype)
        else:
            weights = ops.reshape(ops.cast(sample_weight, self.dtype), (-1,))
            weights = ops.broadcast_to(weights, ops.shape(labels)) if weights.shape[0] == 1 else weights
        return probabilities, log_probabilities, labels, weights

    def _top_label(self, y_true, y_pred, sample_weight):
        """Confidence, correctness, bin, label and weight of each row's top prediction."""
        probabilities, _, labels, weights = self._rows(y_true, y_pred, sample_weight)
        confidence = ops.max(probabilities, axis=-1)
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(probabilities, axis=-1), "int32"), labels), self.dtype)
        return confidence, correct, bin_index(confidence, self.num_bins), labels, weights

    def reset_state(self):
        for variable in self.variables:
            variable.assign(ops.zeros(variable.shape, dtype=variable.dtype))

    def get_config(self):
        config = {"num_bins": self.num_bins, "from_logits": self.from_logits}
        if self.num_classes is not None:
            config["num_classes"] = self.num_classes
        return {**super().get_config(), **config}


class _TopLabelBins(_CalibrationMetric):
    """Per-bin count, confidence sum and correct sum of the top-label prediction."""

    def __init__(
        self, num_bins: int = 15, from_logits: bool = False, name: str | None = None, dtype: str | None = None
    ):
        super().__init__(num_bins=num_bins, from_logits=from_logits, name=name, dtype=dtype)
        self.counts = self._zeros("counts", num_bins)
        self.confidence_sums = self._zeros("confidence_sums", num_bins)
        self.correct_sums = self._zeros("correct_sums", num_bins)

    def update_state(self, y_true, y_pred, sample_weight=None):
        confidence, correct, bins, _, weights = self._top_label(y_true, y_pred, sample_weight)
        self.counts.assign_add(ops.segment_sum(weights, bins, self.num_bins))
        self.confidence_sums.assign_add(ops.segment_sum(weights * confidence, bins, self.num_bins))
        self.correct_sums.assign_add(ops.segment_sum(weights * correct, bins, self.num_bins))


@_register
class ExpectedCalibrationError(_TopLabelBins):
    """Confidence-ECE with the paper's equal-width bins.

    Formula:

    ```
    ECE = sum_n |B_n| / N * |accuracy(B_n) - confidence(B_n)|
    ```

    over the top-1 confidence `max_j p_j`.

    Args:
        num_bins: number of equal-width bins, `>= 1`. Defaults to `15`.
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"ece"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = ExpectedCalibrationError(num_bins=2)
    >>> m.update_state([0, 1, 1], [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(m.result()), 4)
    0.1333

    Usage with `compile()`:

    ```python
    model.compile(loss=keras_ils.ILSLoss(), metrics=[keras_ils.metrics.ExpectedCalibrationError(from_logits=True)])
    ```

    References:
        Maher & Kull (2021), §2.2, Eq. 1; Naeini et al. (2015).
    """

    def __init__(self, num_bins: int = 15, from_logits: bool = False, name: str = "ece", dtype: str | None = None):
        super().__init__(num_bins=num_bins, from_logits=from_logits, name=name, dtype=dtype)

    def _result(self):
        gaps = ops.abs(self.correct_sums - self.confidence_sums)
        return ops.divide_no_nan(ops.sum(gaps), ops.sum(self.counts))


@_register
class MaximumCalibrationError(_TopLabelBins):
    """Largest gap between accuracy and confidence over the non-empty bins.

    Formula:

    ```
    MCE = max_{n: |B_n| > 0} |accuracy(B_n) - confidence(B_n)|
    ```

    Args:
        num_bins: number of equal-width bins, `>= 1`. Defaults to `15`.
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"mce"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = MaximumCalibrationError(num_bins=4)
    >>> m.update_state([0, 1, 1], [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(m.result()), 4)
    0.35

    References:
        Naeini et al. (2015).
    """

    def __init__(self, num_bins: int = 15, from_logits: bool = False, name: str = "mce", dtype: str | None = None):
        super().__init__(num_bins=num_bins, from_logits=from_logits, name=name, dtype=dtype)

    def _result(self):
        gaps = ops.divide_no_nan(ops.abs(self.correct_sums - self.confidence_sums), self.counts)
        return ops.max(gaps)


@_register
class ClasswiseExpectedCalibrationError(_CalibrationMetric):
    """Classwise-ECE (paper Eq. 2, Kull et al. 2019), the package's cwECE.

    Every class `j` is binned on its own predicted probability `p_j`.

    Formula:

    ```
    cwECE = 1/K sum_j sum_n |B_nj| / N * |freq_j(B_nj) - mean p_j(B_nj)|
    ```

    where `freq_j(B_nj)` is the fraction of the bin's points whose true class
    is `j`. This is NOT the number printed in the paper's tables; for that see
    `ClassConditionalECE`.

    Args:
        num_classes: `K`, `>= 2`.
        num_bins: number of equal-width bins, `>= 1`. Defaults to `15`.
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"cwece"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = ClasswiseExpectedCalibrationError(num_classes=2, num_bins=2)
    >>> m.update_state([0, 1, 1], [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(m.result()), 4)
    0.3333

    References:
        Maher & Kull (2021), §2.2, Eq. 2; Kull et al. (2019).
    """

    def __init__(
        self,
        num_classes: int,
        num_bins: int = 15,
        from_logits: bool = False,
        name: str = "cwece",
        dtype: str | None = None,
    ):
        super().__init__(num_classes, num_bins, from_logits, name, dtype, needs_classes=True)
        size = num_classes * num_bins
        self.total = self._zeros("total")
        self.label_sums = self._zeros("label_sums", size)
        self.probability_sums = self._zeros("probability_sums", size)

    def update_state(self, y_true, y_pred, sample_weight=None):
        probabilities, _, labels, weights = self._rows(y_true, y_pred, sample_weight)
        size = self.num_classes * self.num_bins
        cell = bin_index(probabilities, self.num_bins) + ops.arange(self.num_classes, dtype="int32") * self.num_bins
        cell = ops.reshape(cell, (-1,))
        weights = weights[:, None]
        one_hot = ops.one_hot(labels, self.num_classes, dtype=self.dtype)
        self.total.assign_add(ops.sum(weights))
        self.label_sums.assign_add(ops.segment_sum(ops.reshape(one_hot * weights, (-1,)), cell, size))
        self.probability_sums.assign_add(ops.segment_sum(ops.reshape(probabilities * weights, (-1,)), cell, size))

    def _result(self):
        gaps = ops.sum(ops.abs(self.label_sums - self.probability_sums))
        return ops.divide_no_nan(gaps, self.total * self.num_classes)


@_register
class ClassConditionalECE(_CalibrationMetric):
    """The paper's printed "cwECE": mean over true classes of a top-label ECE.

    The authors' public code computes, for every true class `c`, the
    confidence-ECE of the points whose label is `c`, and averages over the
    classes present. That, not Eq. 2, reproduces the paper's printed cwECE
    (0.0234 for the synthetic task's Bayes-optimal model, where Eq. 2 gives
    about 0.007). Use it to set tables beside the paper's like for like; the
    package's classwise-ECE is `ClasswiseExpectedCalibrationError`.

    Formula:

    ```
    value = mean_{c present} sum_n |B_nc| / N_c * |accuracy(B_nc) - confidence(B_nc)|
    ```

    with `B_nc` the points of true class `c` whose top confidence is in bin `n`.

    Args:
        num_classes: `K`, `>= 2`.
        num_bins: number of equal-width bins, `>= 1`. Defaults to `15`.
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"class_conditional_ece"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = ClassConditionalECE(num_classes=2, num_bins=2)
    >>> m.update_state([0, 1, 1], [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(m.result()), 4)
    0.175
    """

    def __init__(
        self,
        num_classes: int,
        num_bins: int = 15,
        from_logits: bool = False,
        name: str = "class_conditional_ece",
        dtype: str | None = None,
    ):
        super().__init__(num_classes, num_bins, from_logits, name, dtype, needs_classes=True)
        size = num_classes * num_bins
        self.counts = self._zeros("counts", size)
        self.confidence_sums = self._zeros("confidence_sums", size)
        self.correct_sums = self._zeros("correct_sums", size)

    def update_state(self, y_true, y_pred, sample_weight=None):
        confidence, correct, bins, labels, weights = self._top_label(y_true, y_pred, sample_weight)
        size = self.num_classes * self.num_bins
        cell = labels * self.num_bins + bins
        self.counts.assign_add(ops.segment_sum(weights, cell, size))
        self.confidence_sums.assign_add(ops.segment_sum(weights * confidence, cell, size))
        self.correct_sums.assign_add(ops.segment_sum(weights * correct, cell, size))

    def _result(self):
        shape = (self.num_classes, self.num_bins)
        gaps = ops.sum(ops.reshape(ops.abs(self.correct_sums - self.confidence_sums), shape), axis=-1)
        counts = ops.sum(ops.reshape(self.counts, shape), axis=-1)
        present = ops.cast(counts > 0, self.dtype)
        return ops.divide_no_nan(ops.sum(ops.divide_no_nan(gaps, counts)), ops.sum(present))
