"""What the losses share: reading `y_pred` and `y_true`, settings, probabilities, the cross-entropy, a safe sqrt.

Private to `keras_ils.losses`. Every loss reads `y_pred` through
`predictions`, which refuses values that cannot be probabilities when the
loss was told `from_logits=False`, and the package's three `y_true` forms
(`keras_ils._labels`) through `read_targets`: sparse labels become one-hot
rows, teacher targets give their one-hot half, one-hot or soft rows are taken
as given (their argmax is the class where a formula needs one).

The functional forms take `y_pred` with leading axes beyond the batch's
(`[M, batch, K]`: one batch per model) and settings that are numbers or hold
one value per model (`[M, 1, 1]`, broadcasting against `y_pred`): `setting`
checks the numbers and passes the others, `per_example` shapes them for
per-example values (`[M, 1]`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _bad_input, _labels
from keras_ils._checks import number_in

__all__ = [
    "crossentropy",
    "flat_batch",
    "flattened",
    "non_negative",
    "per_example",
    "predictions",
    "probabilities",
    "read_targets",
    "safe_sqrt",
    "setting",
]


def predictions(y_pred, from_logits: bool):
    """`y_pred` as a tensor; with `from_logits=False`, checked to be probabilities.

    Probabilities lie in `[0, 1]` and their rows sum to 1 (within
    `keras_ils._labels.PROBABILITY_TOLERANCE`); logits given to a loss told
    `from_logits=False` would otherwise train silently on a wrong loss. The
    check is `keras_ils._labels.check_probabilities`, the metrics' own: an
    eager call raises `ValueError` naming `from_logits=True`; inside a
    compiled step the loss is NaN (`keras_ils._bad_input`).

    In a TensorFlow graph, a `y_pred` computed by a softmax op (a model
    ending in `activation="softmax"` or `keras.layers.Softmax()`) is a
    distribution by construction: it is not checked, and costs nothing, as
    Keras' own cross-entropy reads that op at trace time.
    """
    y_pred = ops.convert_to_tensor(y_pred)
    if not from_logits and not _softmax_output(y_pred):
        _labels.check_probabilities(ops.stop_gradient(y_pred))  # a check, not part of the loss (and under a JAX grad)
    return y_pred


def _softmax_output(y_pred) -> bool:
    """Whether `y_pred` is, in a TensorFlow graph, the output of a softmax op (read at trace time, no values)."""
    if keras.backend.backend() != "tensorflow" or not _bad_input.traced(y_pred):
        return False
    return getattr(getattr(y_pred, "op", None), "type", None) == "Softmax"


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


def crossentropy(targets, y_pred, from_logits: bool):
    """Per-example `-sum_j t_j log p_j` of `targets` and `y_pred` (`[..., K]` both): the package's cross-entropy.

    On logits it is `-sum(targets * log_softmax(y_pred))`, the vectorised
    engine's form since it was written (TensorFlow's fused
    `softmax_cross_entropy_with_logits`, which `keras.ops.categorical_crossentropy`
    runs, rounds differently); on probabilities it is Keras'
    `categorical_crossentropy` (rows normalised, clipped to `[epsilon, 1 - epsilon]`).
    """
    if from_logits:
        return -ops.sum(targets * ops.log_softmax(y_pred, axis=-1), axis=-1)
    return ops.categorical_crossentropy(targets, y_pred, from_logits=False)


def setting(name: str, value, check):
    """`value` checked by `check(name, value)` when it is a Python value; a tensor or array (one value per model,
    `[M, 1, 1]`) as given, its values checked where it was made."""
    if ops.is_tensor(value) or isinstance(value, np.ndarray):
        return value
    return check(name, value)


def per_example(value):
    """A setting shaped to multiply per-example values `[..., batch]`: a number as it is, one value per model
    `[M, 1, 1]` as `[M, 1]`."""
    return ops.squeeze(value, axis=-1) if ops.is_tensor(value) or isinstance(value, np.ndarray) else value


def flattened(y_true, y_pred):
    """`(y_true, y_pred)` with every axis of `y_pred [..., K]` but the classes' merged into one batch axis, `y_true`
    (any of its forms) with it: a batch statistic (MMCE's, MDCA's, OLS's) of a loss class then spans every example
    it is given, whatever their rank."""
    y_true = ops.convert_to_tensor(y_true)
    kept = tuple(y_true.shape[len(y_pred.shape) - 1 :])  # () for sparse labels [...], (1,) or (W,) otherwise
    return ops.reshape(y_true, (-1, *kept)), ops.reshape(y_pred, (-1, y_pred.shape[-1]))


def flat_batch(function, y_true, y_pred):
    """`function(y_true, y_pred)` (per-example values) on the `flattened` batch, shaped back to `y_pred`'s leading
    axes; called as it is on a `[batch, K]` `y_pred`."""
    if len(y_pred.shape) <= 2:
        return function(y_true, y_pred)
    return ops.reshape(function(*flattened(y_true, y_pred)), ops.shape(y_pred)[:-1])


def safe_sqrt(x):
    """`sqrt(max(x, 0))` whose gradient is 0, not infinite, where `x <= 0`."""
    positive = x > 0
    return ops.where(positive, ops.sqrt(ops.where(positive, x, ops.ones_like(x))), ops.zeros_like(x))


def non_negative(name: str, value) -> float:
    """`value` as a float when it is a finite real number >= 0, else the package's `ValueError`."""
    return number_in(name, value, 0.0, expected="a float >= 0")
