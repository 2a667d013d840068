"""Reading the package's `y_true` forms (sparse labels, one-hot/soft targets, teacher targets); checking `y_pred`.

Private helpers shared by the loss, the metrics, the `tf.data` maps and the
teacher code. The teacher-target layout itself is documented in
`keras_ils.targets` (`teacher_targets` builds it; `split_teacher_targets` and
`pack_teacher_targets` here are its only other readers and writers).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


def one_hot_labels(labels, num_classes):
    """Checked class indices `labels` (`[batch]` or `[batch, 1]`) as float32 one-hot rows."""
    labels = labels if ops.is_tensor(labels) else np.asarray(labels)  # numpy stays numpy for the checks
    if len(labels.shape) >= 2 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    labels, _ = class_indices(labels, num_classes)
    return ops.one_hot(labels, num_classes, dtype="float32")


def class_indices(labels, num_classes=None) -> tuple:
    """`(labels as int32, checks)`: sparse labels checked to be whole numbers in `[0, num_classes)`.

    Float labels are accepted when they hold whole numbers (Keras hands a loss
    its `y_true` in the loss's float dtype) and refused otherwise, never
    truncated; booleans are classes 0 and 1. The range is checked in the
    labels' own dtype, before the cast: an int64 label of 2**32 + 1 must not
    wrap to 1 (numpy labels are checked as numpy, before any backend tensor
    is made of them, since JAX without x64 would make int32 of them);
    `num_classes=None` checks whole numbers only. Where the checks run, and
    how they fail, is `_check`'s table; in a TensorFlow graph they are
    `tf.debugging` assertions, returned for `tf.data` maps to depend on.
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
    checks = _check_whole_numbers(labels) if keras.backend.is_float_dtype(labels.dtype) else []
    if num_classes is not None:
        checks += check_labels_in_range(labels, num_classes)
    return ops.cast(labels, "int32"), checks


def _in_tensorflow_graph() -> bool:
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


def _check(failed, raise_error, *values) -> None:
    """Calls `raise_error(*values as numpy)`, which raises `ValueError`, where the boolean scalar `failed` holds.

    The one place that decides when a value check can run (the TensorFlow
    graph case is each check's own `tf.debugging` assertions):

    | values                                            | the check                                   |
    |---------------------------------------------------|---------------------------------------------|
    | numpy, eager tensors (any backend; torch's        | runs now: `ValueError`                      |
    | `fit`/`evaluate`, which Keras runs eagerly)       |                                             |
    | a JAX trace (Keras' JAX `fit`/`evaluate`/         | runs with the step: `jax.debug.callback`    |
    | `predict` steps, `jax.jit`)                       | under `lax.cond(failed)` raises the same    |
    |                                                   | `ValueError`, which reaches the caller as   |
    |                                                   | `jax.errors.JaxRuntimeError` ending in its  |
    |                                                   | text; a step whose values pass costs one    |
    |                                                   | reduction, no transfer to the host          |
    """
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(failed, jax.core.Tracer):
            jax.lax.cond(failed, lambda: jax.debug.callback(raise_error, *values), lambda: None)
            return
    if bool(ops.convert_to_numpy(failed)):
        raise_error(*(np.asarray(ops.convert_to_numpy(value)) for value in values))


def _check_whole_numbers(labels) -> list:
    message = "Invalid value for argument `labels`. Expected integer class indices; float labels must be whole numbers."
    if _in_tensorflow_graph():
        import tensorflow as tf

        return [tf.debugging.assert_equal(labels, tf.floor(labels), message=message)]

    def raise_error(values):
        fractional = values[values != np.floor(values)]
        raise ValueError(f"{message} Received: labels containing {fractional.ravel()[:5].tolist()}")

    xp = np if isinstance(labels, np.ndarray) else ops
    _check(xp.any(xp.not_equal(labels, xp.floor(labels))), raise_error, labels)
    return []


def pack_teacher_targets(one_hot, teacher_logits):
    """The layout itself, for callers whose labels are already one-hot and range-checked."""
    return ops.concatenate([ops.cast(one_hot, "float32"), ops.cast(teacher_logits, "float32")], axis=-1)


def check_labels_in_range(labels, num_classes) -> list:
    """Raises when integer `labels` fall outside `[0, num_classes)`; the one label range check.

    Eager values raise `ValueError`; under a JAX trace the same `ValueError`
    is raised when the step runs (see `_check`). Inside a TensorFlow graph
    (`model.fit`, a `tf.data` map) the check is a pair of `tf.debugging`
    assertions carrying the same message; they are returned so that a
    `tf.data` map can make its output depend on them (`tf.function` runs
    them anyway; XLA drops them, so under TensorFlow's `jit_compile` only the
    input pipeline's maps check). Otherwise: `[]`.
    """
    message = f"Invalid value for argument `labels`. Expected class indices in [0, {num_classes})."
    if _in_tensorflow_graph():
        import tensorflow as tf

        return [
            tf.debugging.assert_non_negative(labels, message=message),
            tf.debugging.assert_less(labels, ops.cast(num_classes, labels.dtype), message=message),
        ]

    def raise_error(values):
        bad = values[(values < 0) | (values >= num_classes)]
        raise ValueError(f"{message} Received: labels containing {bad.ravel()[:5].tolist()}")

    xp = np if isinstance(labels, np.ndarray) else ops
    _check(xp.logical_or(xp.any(labels < 0), xp.any(labels >= num_classes)), raise_error, labels)
    return []


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
    one_hot = check_one_hot(y_true[..., :num_classes])
    return one_hot, y_true[..., num_classes:]


def check_one_hot(one_hot):
    """`one_hot`, checked to be one-hot rows (entries 0 or 1, one 1 per row): the first half of teacher targets.

    Eager values raise `ValueError`, and so does a JAX trace when its step
    runs (see `_check`). In a TensorFlow graph the check is a
    `tf.debugging` assertion with the same message, which `tf.function`
    runs; XLA (TensorFlow's `jit_compile`) drops assertions, so there the
    returned columns are also made NaN when the check fails: the loss is
    NaN (which Keras reports and `keras.callbacks.TerminateOnNaN` stops on)
    rather than a silent training on garbage.
    """
    num_classes = one_hot.shape[-1]
    message = (
        f"Invalid value for argument `y_true`. A y_true of {2 * num_classes} columns for a {num_classes}-class output "
        f"is read as teacher targets from `keras_ils.teacher_targets`: {num_classes} one-hot columns, then "
        f"{num_classes} teacher logits; its first {num_classes} columns must be one-hot (entries 0 or 1, one 1 per "
        f"row). One-hot labels for this output have {num_classes} columns."
    )
    xp = np if isinstance(one_hot, np.ndarray) else ops
    binary = xp.logical_or(xp.equal(one_hot, 0), xp.equal(one_hot, 1))
    sums = xp.sum(one_hot, axis=-1)
    if _in_tensorflow_graph():
        import tensorflow as tf

        one_hot_rows = tf.logical_and(tf.reduce_all(binary), tf.reduce_all(tf.equal(sums, 1)))
        with tf.control_dependencies([tf.debugging.assert_equal(one_hot_rows, True, message=message)]):
            return one_hot + tf.where(one_hot_rows, tf.zeros((), one_hot.dtype), tf.constant(np.nan, one_hot.dtype))

    def raise_error(values):
        rows = values.reshape(-1, num_classes)
        bad = rows[~(np.isin(rows, (0, 1)).all(axis=-1) & (rows.sum(axis=-1) == 1))]
        raise ValueError(f"{message} Received: first halves such as {bad[:3].tolist()}")

    _check(xp.logical_not(xp.logical_and(xp.all(binary), xp.all(xp.equal(sums, 1)))), raise_error, one_hot)
    return one_hot


def hard_labels(y_true, num_classes, y_pred_rank=None):
    """Integer true classes from any accepted `y_true` form (soft targets: their argmax)."""
    y_true = y_true if ops.is_tensor(y_true) else np.asarray(y_true)  # numpy stays numpy for the checks
    kind = y_true_kind(y_true, num_classes, y_pred_rank)
    if kind == "sparse":
        labels = y_true
        if len(labels.shape) and labels.shape[-1] == 1 and (y_pred_rank is None or len(labels.shape) == y_pred_rank):
            labels = labels[..., 0]
        labels, _ = class_indices(labels, num_classes)
        return labels
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


PROBABILITY_TOLERANCE = 1e-2  # |row sum - 1| and the excess over [0, 1] allowed (bfloat16 rounds by 0.4 %)


def check_probabilities(y_pred) -> None:
    """Refuses `y_pred` that are not probabilities: values outside [0, 1] or rows not summing to 1.

    Eager values raise `ValueError`, and so does a JAX trace when its step
    runs (see `_check`); in a TensorFlow graph the check is a
    `tf.debugging` assertion with the same message (XLA drops assertions).
    """
    message = (
        "Invalid value for argument `y_pred`. With `from_logits=False` the metric expects probabilities: values in "
        f"[0, 1] whose rows sum to 1 (within {PROBABILITY_TOLERANCE:g}). Pass `from_logits=True` for logits."
    )
    sums = ops.sum(y_pred, axis=-1)
    if _in_tensorflow_graph():
        import tensorflow as tf

        tolerance = ops.cast(PROBABILITY_TOLERANCE, y_pred.dtype)
        tf.debugging.assert_greater_equal(y_pred, -tolerance, message=message)
        tf.debugging.assert_less_equal(y_pred, 1 + tolerance, message=message)
        tf.debugging.assert_less_equal(ops.abs(sums - 1), tolerance, message=message)
        return

    def raise_error(values, sums):
        raise ValueError(
            f"{message} Received: values in [{values.min():.4g}, {values.max():.4g}], "
            f"row sums in [{sums.min():.4g}, {sums.max():.4g}]."
        )

    failed = ops.logical_or(
        ops.logical_or(ops.any(y_pred < -PROBABILITY_TOLERANCE), ops.any(y_pred > 1 + PROBABILITY_TOLERANCE)),
        ops.any(ops.abs(sums - 1) > PROBABILITY_TOLERANCE),
    )
    _check(failed, raise_error, y_pred, sums)


def check_metric_width(metric, y_pred) -> None:
    """Refuses `y_pred` whose last axis is not the `num_classes` a metric was built for (when both are known)."""
    num_classes = y_pred.shape[-1]
    if metric.num_classes is not None and num_classes is not None and num_classes != metric.num_classes:
        raise ValueError(
            f"{type(metric).__name__} was built for num_classes={metric.num_classes} but `y_pred` has "
            f"{num_classes} classes."
        )
