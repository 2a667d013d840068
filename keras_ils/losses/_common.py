"""What the calibration losses share: reading `y_true` into target rows and labels, probabilities, a safe sqrt.

Private to `keras_ils.losses`. Every calibration loss reads the package's
three `y_true` forms (`keras_ils._labels`): sparse labels become one-hot rows,
teacher targets give their one-hot half, one-hot or soft rows are taken as
given (their argmax is the class where a formula needs one).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _labels
from keras_ils._checks import number_in

__all__ = ["probabilities", "read_targets", "safe_sqrt", "non_negative"]


def read_targets(y_true, y_pred):
    """`(targets [..., K] in y_pred's dtype, labels [...] int32)` from any accepted `y_true` form.

    Sparse labels are checked (whole numbers in `[0, K)`) and one-hot encoded;
    teacher targets (`[..., 2K]`) give their one-hot half; one-hot or soft
    rows are used as they are, their argmax being the label.
    """
    num_classes = y_pred.shape[-1]
    rank = len(y_pred.shape)
    kind = _labels.y_true_kind(y_true, num_classes, rank)
    labels = _labels.hard_labels(y_true, num_classes, rank)
    if kind == "sparse":
        targets = ops.one_hot(labels, num_classes, dtype=y_pred.dtype)
    elif kind == "teacher":
        targets, _ = _labels.split_teacher_targets(y_true, num_classes)
    else:
        targets = y_true
    return ops.cast(targets, y_pred.dtype), labels


def probabilities(y_pred, from_logits: bool):
    """`(probabilities, log-probabilities)` of `y_pred [..., K]`, in its dtype.

    Logits go through `log_softmax`. Probabilities are normalised to sum to 1
    and clipped to `[epsilon, 1]` before the log, as Keras' own
    cross-entropies do.
    """
    if from_logits:
        log_p = ops.log_softmax(y_pred, axis=-1)
        return ops.exp(log_p), log_p
    p = y_pred / ops.sum(y_pred, axis=-1, keepdims=True)
    return p, ops.log(ops.clip(p, keras.config.epsilon(), 1.0))


def safe_sqrt(x):
    """`sqrt(max(x, 0))` whose gradient is 0, not infinite, where `x <= 0`."""
    positive = x > 0
    return ops.where(positive, ops.sqrt(ops.where(positive, x, ops.ones_like(x))), ops.zeros_like(x))


def non_negative(name: str, value) -> float:
    """`value` as a float when it is a finite real number >= 0, else the package's `ValueError`."""
    return number_in(name, value, 0.0, expected="a float >= 0")
