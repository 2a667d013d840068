"""Reading the package's `y_true` forms (sparse labels, one-hot/soft targets, teacher targets); checking `y_pred`.

Private helpers shared by the losses, the metrics, the teacher code and the
numpy scores. The teacher-target layout itself is documented in
`keras_ils.targets` (`teacher_targets` builds it; `split_teacher_targets` and
`pack_teacher_targets` here are its only other readers and writers).

Every value check here (labels whole numbers in range, the teacher targets'
one-hot half, probabilities) hands a failure to `keras_ils._bad_input.report`,
which raises `ValueError` where the values are on the host and counts them,
with arithmetic only, inside a compiled step:

| values                                  | a failed check                                                   |
|-----------------------------------------|------------------------------------------------------------------|
| numpy, eager tensors (torch's `fit`)    | `ValueError` at once                                             |
| a compiled step (JAX, TensorFlow,       | no callback, no conditional: a loss's values become NaN, and a   |
| `torch.compile`)                        | package metric counts it and raises the `ValueError` on the host |
|                                         | (end of the epoch or of `evaluate`); see `keras_ils._bad_input`  |

The `tf.data` maps (`keras_ils.data`) check their labels with `tf.debugging`
assertions carrying the same messages (`WHOLE_NUMBERS_MESSAGE`, `range_message`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _bad_input

WHOLE_NUMBERS_MESSAGE = (
    "Invalid value for argument `labels`. Expected integer class indices; float labels must be whole numbers."
)
PROBABILITY_TOLERANCE = 1e-2  # |row sum - 1| and the excess over [0, 1] allowed (bfloat16 rounds by 0.4 %)


def range_message(num_classes) -> str:
    """The label range check's message."""
    return f"Invalid value for argument `labels`. Expected class indices in [0, {num_classes})."


def as_numpy(value) -> np.ndarray:
    """`value` as a numpy array: a numpy array itself (`keras.ops.convert_to_numpy` copies it), else converted."""
    return value if isinstance(value, np.ndarray) else np.asarray(ops.convert_to_numpy(value))


def _xp(value):
    return np if isinstance(value, np.ndarray) else ops


def one_hot_labels(labels, num_classes):
    """Checked class indices `labels` (`[batch]` or `[batch, 1]`) as float32 one-hot rows."""
    labels = labels if ops.is_tensor(labels) else np.asarray(labels)  # numpy stays numpy for the checks
    if len(labels.shape) >= 2 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    return ops.one_hot(class_indices(labels, num_classes), num_classes, dtype="float32")


def class_indices(labels, num_classes=None):
    """Sparse labels as int32 class indices, checked to be whole numbers in `[0, num_classes)`.

    Float labels are accepted when they hold whole numbers (Keras hands a loss
    its `y_true` in the loss's float dtype) and refused otherwise, never
    truncated; booleans are classes 0 and 1. The range is checked in the
    labels' own dtype, before the cast: an int64 label of 2**32 + 1 must not
    wrap to 1 (numpy labels are checked as numpy, before any backend tensor
    is made of them, since JAX without x64 would make int32 of them);
    `num_classes=None` checks whole numbers only.
    """
    if not ops.is_tensor(labels):  # numpy or Python values: checked as given
        labels = np.asarray(labels)
        if labels.dtype.kind not in "biuf":
            raise TypeError(f"Argument `labels` must be integer class indices. Received dtype: {labels.dtype}")
    elif not keras.backend.is_float_dtype(labels.dtype) and not keras.backend.is_int_dtype(labels.dtype):
        if keras.backend.standardize_dtype(labels.dtype) != "bool":
            raise TypeError(f"Argument `labels` must be integer class indices. Received dtype: {labels.dtype}")
    if keras.backend.standardize_dtype(labels.dtype) == "bool":
        labels = ops.cast(labels, "int32")
    if keras.backend.is_float_dtype(labels.dtype):
        xp = _xp(labels)

        def fractional():
            values = as_numpy(labels)
            return f"Received: labels containing {values[values != np.floor(values)].ravel()[:5].tolist()}"

        bad = xp.not_equal(labels, xp.floor(labels))
        _bad_input.report(_bad_input.FRACTIONAL_LABELS, WHOLE_NUMBERS_MESSAGE, bad, fractional)
    if num_classes is not None:
        check_labels_in_range(labels, num_classes)
    return ops.cast(labels, "int32")


def check_labels_in_range(labels, num_classes) -> None:
    """Refuses integer (or whole-number float) `labels` outside `[0, num_classes)`: the one label range check."""
    xp = _xp(labels)

    def received():
        values = as_numpy(labels)
        return f"Received: labels containing {values[(values < 0) | (values >= num_classes)].ravel()[:5].tolist()}"

    bad = xp.logical_or(labels < 0, labels >= num_classes)
    _bad_input.report(_bad_input.LABELS_OUT_OF_RANGE, range_message(num_classes), bad, received)


def pack_teacher_targets(one_hot, teacher_logits):
    """The layout itself, for callers whose labels are already one-hot and range-checked."""
    return ops.concatenate([ops.cast(one_hot, "float32"), ops.cast(teacher_logits, "float32")], axis=-1)


def y_true_kind(y_true, num_classes, y_pred_rank=None):
    """Which of the three accepted `y_true` forms this is: "sparse", "dense" or "teacher".

    Decided from static shapes: `[batch]`/`[batch, 1]` sparse labels,
    `[batch, K]` one-hot or soft targets, `[batch, 2K]` the teacher layout.
    """
    if num_classes is None or num_classes < 2:
        raise ValueError(
            f"The model's output must have a known number of classes K >= 2 in its last axis. Received K={num_classes}"
        )
    rank = len(y_true.shape)
    if y_pred_rank is not None and rank == y_pred_rank - 1:
        return "sparse"
    last = y_true.shape[-1] if rank else None
    if rank == 0 or last == 1:
        return "sparse"
    if last == num_classes:
        return "dense"
    if last == 2 * num_classes:
        return "teacher"
    raise ValueError(
        f"Cannot read `y_true` of shape {tuple(y_true.shape)} for a {num_classes}-class "
        f"output. Expected sparse labels [batch] or [batch, 1], one-hot/soft targets "
        f"[batch, {num_classes}], or teacher targets [batch, {2 * num_classes}] built by "
        "`keras_ils.teacher_targets` (a teacher with another class count gives this error too)."
    )


def split_teacher_targets(y_true, num_classes):
    """The one reader of the teacher layout: `(one_hot [..., K], teacher_logits [..., K])`, its first half checked.

    A `[batch, 2K]` `y_true` is read as teacher targets; `check_one_hot`
    refuses one whose first K columns are not one-hot (a 2K-class one-hot
    `y_true` given to a K-class model, say), which would otherwise train on
    garbage.
    """
    one_hot = y_true[..., :num_classes]
    check_one_hot(one_hot)
    return one_hot, y_true[..., num_classes:]


def check_one_hot(one_hot) -> None:
    """Refuses rows of `one_hot` that are not one-hot (entries 0 or 1, one 1 per row): teacher targets' first half."""
    num_classes = one_hot.shape[-1]
    message = (
        f"Invalid value for argument `y_true`. A y_true of {2 * num_classes} columns for a {num_classes}-class output "
        f"is read as teacher targets from `keras_ils.teacher_targets`: {num_classes} one-hot columns, then "
        f"{num_classes} teacher logits; its first {num_classes} columns must be one-hot (entries 0 or 1, one 1 per "
        f"row). One-hot labels for this output have {num_classes} columns."
    )
    xp = _xp(one_hot)
    binary = xp.all(xp.logical_or(xp.equal(one_hot, 0), xp.equal(one_hot, 1)), axis=-1)
    bad = xp.logical_not(xp.logical_and(binary, xp.equal(xp.sum(one_hot, axis=-1), 1)))

    def received():
        rows = as_numpy(one_hot).reshape(-1, num_classes)
        wrong = rows[~(np.isin(rows, (0, 1)).all(axis=-1) & (rows.sum(axis=-1) == 1))]
        return f"Received: first halves such as {wrong[:3].tolist()}"

    _bad_input.report(_bad_input.NOT_ONE_HOT, message, bad, received)


def hard_labels(y_true, num_classes, y_pred_rank=None):
    """Integer true classes from any accepted `y_true` form (soft targets: their argmax)."""
    y_true = y_true if ops.is_tensor(y_true) else np.asarray(y_true)  # numpy stays numpy for the checks
    kind = y_true_kind(y_true, num_classes, y_pred_rank)
    if kind == "sparse":
        labels = y_true
        if len(labels.shape) and labels.shape[-1] == 1 and (y_pred_rank is None or len(labels.shape) == y_pred_rank):
            labels = labels[..., 0]
        return class_indices(labels, num_classes)
    if kind == "teacher":  # exact one-hot: an integer argmax (a float one adds -0.0 handling to every step)
        one_hot, _ = split_teacher_targets(y_true, num_classes)
        return ops.cast(ops.argmax(ops.cast(one_hot > 0.5, "int32"), axis=-1), "int32")
    return ops.cast(ops.argmax(y_true, axis=-1), "int32")


def outputs_and_labels(outputs, labels, name: str = "logits") -> tuple:
    """`(outputs as float64 [n, K], labels as int [n])`, checked: what the post-hoc calibration fits read.

    `outputs` must be finite with `n >= 1` rows and `K >= 2` columns (`name`
    is the argument the errors name); `labels` any `y_true` form, one per row.
    """
    outputs = np.asarray(ops.convert_to_numpy(outputs), dtype=np.float64)
    if outputs.ndim != 2 or outputs.shape[1] < 2 or len(outputs) == 0:
        raise ValueError(f"Argument `{name}` must have shape [n >= 1, K >= 2]. Received shape: {outputs.shape}")
    bad = int(np.sum(~np.isfinite(outputs)))
    if bad:
        raise ValueError(f"Argument `{name}` must be finite. Received {bad} NaN or infinite values.")
    labels = ops.convert_to_numpy(hard_labels(labels, outputs.shape[1], y_pred_rank=2))
    if len(labels) != len(outputs):
        raise ValueError(f"`{name}` and `labels` must have the same length. Received: {len(outputs)} and {len(labels)}")
    return outputs, labels


def check_probabilities(y_pred) -> None:
    """Refuses `y_pred` that are not probabilities: rows with a value outside [0, 1] or not summing to 1."""
    message = (
        "Invalid value for argument `y_pred`. With `from_logits=False` the metric expects probabilities: values in "
        f"[0, 1] whose rows sum to 1 (within {PROBABILITY_TOLERANCE:g}). Pass `from_logits=True` for logits."
    )
    xp = _xp(y_pred)
    sums = xp.sum(y_pred, axis=-1)
    outside = xp.logical_or(y_pred < -PROBABILITY_TOLERANCE, y_pred > 1 + PROBABILITY_TOLERANCE)
    bad = xp.logical_or(xp.any(outside, axis=-1), xp.abs(sums - 1) > PROBABILITY_TOLERANCE)

    def received():
        values, row_sums = as_numpy(y_pred), as_numpy(sums)
        return (
            f"Received: values in [{values.min():.4g}, {values.max():.4g}], "
            f"row sums in [{row_sums.min():.4g}, {row_sums.max():.4g}]."
        )

    _bad_input.report(_bad_input.NOT_PROBABILITIES, message, bad, received)


def check_metric_width(metric, y_pred) -> None:
    """Refuses `y_pred` whose last axis is not the `num_classes` a metric was built for (when both are known)."""
    num_classes = y_pred.shape[-1]
    if metric.num_classes is not None and num_classes is not None and num_classes != metric.num_classes:
        raise ValueError(
            f"{type(metric).__name__} was built for num_classes={metric.num_classes} but `y_pred` has "
            f"{num_classes} classes."
        )
