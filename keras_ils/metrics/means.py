"""The per-example means as streaming metrics (NLL, Brier, top-label accuracy) and the package's metric set."""

from __future__ import annotations

import keras
from keras import ops

from keras_ils.metrics.binned import (
    ClasswiseExpectedCalibrationError,
    ExpectedCalibrationError,
    MaximumCalibrationError,
    _CalibrationMetric,
)

__all__ = ["BrierScore", "NegativeLogLikelihood", "TopLabelAccuracy", "calibration_metrics"]

_register = keras.saving.register_keras_serializable(package="keras_ils")


class _WeightedMean(_CalibrationMetric):
    """Weighted mean of a per-example value; subclasses define `_values`."""

    def __init__(self, from_logits: bool = False, name: str | None = None, dtype: str | None = None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self.total = self._zeros("total")
        self.count = self._zeros("count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        probabilities, log_probabilities, labels, weights = self._rows(y_true, y_pred, sample_weight)
        one_hot = ops.one_hot(labels, probabilities.shape[-1], dtype=self.dtype)
        values = self._values(probabilities, log_probabilities, one_hot)
        self.total.assign_add(ops.sum(weights * values))
        self.count.assign_add(ops.sum(weights))

    def _result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        config = super().get_config()
        del config["num_bins"]
        return config


@_register
class NegativeLogLikelihood(_WeightedMean):
    """Mean negative log-probability of the true class (cross-entropy on hard labels).

    Args:
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"nll"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = NegativeLogLikelihood()
    >>> m.update_state([0, 1], [[0.5, 0.5], [0.2, 0.8]])
    >>> round(float(m.result()), 4)
    0.4581
    """

    def __init__(self, from_logits: bool = False, name: str = "nll", dtype: str | None = None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)

    def _values(self, probabilities, log_probabilities, one_hot):
        return -ops.sum(one_hot * log_probabilities, axis=-1)


@_register
class BrierScore(_WeightedMean):
    """Mean multi-class Brier score, `sum_j (p_j - y_j)^2` per example (range [0, 2]).

    Args:
        from_logits: whether `y_pred` are logits. Defaults to `False`.
        name: Defaults to `"brier"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = BrierScore()
    >>> m.update_state([0, 1], [[0.5, 0.5], [0.2, 0.8]])
    >>> round(float(m.result()), 4)
    0.29

    References:
        Brier (1950).
    """

    def __init__(self, from_logits: bool = False, name: str = "brier", dtype: str | None = None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)

    def _values(self, probabilities, log_probabilities, one_hot):
        return ops.sum(ops.square(probabilities - one_hot), axis=-1)


@_register
class TopLabelAccuracy(_WeightedMean):
    """Top-1 accuracy that reads every `y_true` form of the package, teacher targets included.

    The fraction of examples whose highest-scoring class is the true class.
    Keras' own accuracy metrics would compare against the teacher-target
    columns; use this one when training on `keras_ils.teacher_targets`. (It
    was called `Accuracy` before 0.2, a name that shadowed
    `keras.metrics.Accuracy`, which compares values element by element; a
    model saved with the old name still loads.)

    Args:
        from_logits: ignored by the argmax; kept for a uniform signature.
            Defaults to `False`.
        name: Defaults to `"top_label_accuracy"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> m = TopLabelAccuracy()
    >>> m.update_state([0, 1], [[0.5, 0.4], [0.7, 0.3]])
    >>> float(m.result())
    0.5
    """

    _reads_probabilities = False

    def __init__(self, from_logits: bool = False, name: str = "top_label_accuracy", dtype: str | None = None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self._direction = "up"

    def _values(self, probabilities, log_probabilities, one_hot):
        predicted = ops.argmax(probabilities, axis=-1)
        return ops.take_along_axis(one_hot, predicted[:, None], axis=-1)[:, 0]


# `.keras` files saved before the rename name the class `keras_ils>Accuracy`.
keras.saving.get_custom_objects()["keras_ils>Accuracy"] = TopLabelAccuracy


def calibration_metrics(num_classes: int, num_bins: int = 15, from_logits: bool = False) -> list:
    """The evaluation set used across the package: accuracy, NLL, ECE, cwECE, Brier, MCE.

    Example:

    >>> [m.name for m in calibration_metrics(num_classes=3)]
    ['top_label_accuracy', 'nll', 'ece', 'cwece', 'brier', 'mce']
    """
    return [
        TopLabelAccuracy(from_logits=from_logits),
        NegativeLogLikelihood(from_logits=from_logits),
        ExpectedCalibrationError(num_bins, from_logits),
        ClasswiseExpectedCalibrationError(num_classes, num_bins, from_logits),
        BrierScore(from_logits=from_logits),
        MaximumCalibrationError(num_bins, from_logits),
    ]
