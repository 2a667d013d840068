"""The numpy scores' door: every public score checks its inputs here, one helper per kind of input.

- `checked_outputs(outputs, from_logits)`: a model's outputs `[..., K]`, as
  `[n, K]` rows, finite, at least one, and of the kind `from_logits`
  declares (`keras_ils._outputs.check_outputs_kind`: a contradiction is
  refused with the fix);
- `checked_probabilities(probabilities)`: `[n, K]` probabilities, finite, in
  `[0, 1]`, rows summing to 1 (within `PROBABILITY_TOLERANCE`);
- `checked_labels(labels, num_classes, num_rows)`: integer labels `[n]`, whole
  numbers in `[0, K)`, one per row (`keras_ils._labels.class_indices`);
- `checked_rows(probabilities, labels)`: both of the above, what the
  functions of `probabilities [n, K]` and `labels [n]` call;
- `checked_label_rows(labels, outputs_shape)`: any `y_true` form of
  `scores`, as one integer label per row of `checked_outputs`.

Each failure is a `ValueError` naming the argument. The checks read the
arrays without copying them: the finite check is the minimum and maximum
(NaN and infinities propagate into them), and probabilities that pass
`is_distribution` are finite, so a 1,000,000 x 1,000 float32 set costs a
few passes and no temporary of its size.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_ils import _labels, _outputs
from keras_ils._labels import PROBABILITY_TOLERANCE

__all__ = ["checked_label_rows", "checked_labels", "checked_outputs", "checked_probabilities", "checked_rows"]


def _array(values, name: str, shape: str) -> np.ndarray:
    """`values` as a float array with at least one example of `K >= 2` classes (a view where it can be)."""
    values = np.asarray(ops.convert_to_numpy(values) if ops.is_tensor(values) else values)
    if values.dtype.kind not in "biuf":
        raise TypeError(f"Argument `{name}` must hold numbers. Received dtype: {values.dtype}")
    if values.dtype.kind != "f":
        values = values.astype(np.float64)
    wrong_rank = values.ndim < 2 or (shape == "[n, K]" and values.ndim != 2)
    if wrong_rank or values.shape[-1] < 2 or values.size == 0:
        raise ValueError(
            f"Invalid value for argument `{name}`. Expected at least one example of K >= 2 classes, shape {shape}. "
            f"Received: {name} of shape {values.shape}"
        )
    return values


def _check_finite(values, name: str) -> None:
    low, high = values.min(), values.max()  # NaN propagates into both, an infinity into one: no [n, K] temporary
    if not (np.isfinite(low) and np.isfinite(high)):
        bad = int(np.sum(~np.isfinite(values)))
        raise ValueError(
            f"Invalid value for argument `{name}`. Expected finite values. Received: {name} with {bad} NaN or "
            "infinite values"
        )


def checked_probabilities(probabilities, name: str = "probabilities") -> np.ndarray:
    """`probabilities` as `[n, K]` rows, or a `ValueError` naming `name` when they are not probabilities.

    Example:

    >>> checked_probabilities([[0.2, 0.8]]).tolist()
    [[0.2, 0.8]]
    >>> checked_probabilities([[0.2, 1.8]])
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `probabilities`. Expected probabilities: values in [0, 1] whose rows ...
    """
    probabilities = _array(probabilities, name, "[n, K]")
    if not _outputs.is_distribution(probabilities):  # never true of NaN or infinities
        _check_finite(probabilities, name)
        sums = probabilities.sum(axis=-1, dtype=np.float64)
        raise ValueError(
            f"Invalid value for argument `{name}`. Expected probabilities: values in [0, 1] whose rows sum to 1 "
            f"(within {PROBABILITY_TOLERANCE:g}); logits go through `keras_ils.evaluation.probabilities` first. "
            f"Received: values in [{probabilities.min():.4g}, {probabilities.max():.4g}], row sums in "
            f"[{sums.min():.4g}, {sums.max():.4g}]"
        )
    return probabilities


def checked_outputs(outputs, from_logits: bool, name: str = "outputs") -> np.ndarray:
    """`outputs [..., K]` as `[n, K]` finite rows of the kind `from_logits` declares, else a `ValueError`.

    Example:

    >>> checked_outputs(np.zeros((2, 5, 3)), from_logits=True).shape
    (10, 3)
    >>> checked_outputs([[np.nan, 1.0]], from_logits=True)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `outputs`. Expected finite values. Received: outputs with 1 NaN or ...
    """
    if not isinstance(from_logits, (bool, np.bool_)):
        raise TypeError(f"Argument `from_logits` must be True or False. Received: from_logits={from_logits!r}")
    outputs = _array(outputs, name, "[..., K]")
    _check_finite(outputs, name)
    _outputs.check_outputs_kind(outputs, bool(from_logits), name=name)
    return outputs.reshape(-1, outputs.shape[-1])


def checked_labels(labels, num_classes: int, num_rows: int, name: str = "probabilities") -> np.ndarray:
    """Integer `labels [n]`, whole numbers in `[0, num_classes)`, one per row of the argument `name`.

    Example:

    >>> checked_labels([0, 2.0], 3, 2).tolist()
    [0, 2]
    >>> checked_labels([0, 3], 3, 2)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `labels`. Expected class indices in [0, 3). Received: labels containing [3]
    """
    labels = np.asarray(ops.convert_to_numpy(labels) if ops.is_tensor(labels) else labels)
    if labels.shape != (num_rows,):
        raise ValueError(
            f"Arguments `{name}` and `labels` must have shapes [n, K] and [n]: one label per row. Received: "
            f"{num_rows} rows and labels of shape {labels.shape}"
        )
    labels = _labels.class_indices(labels, num_classes)
    return ops.convert_to_numpy(labels)


def checked_label_rows(labels, outputs_shape: tuple, name: str = "outputs") -> np.ndarray:
    """Any `y_true` form of `scores` (sparse, one-hot or soft, teacher targets) as one label per output row.

    `outputs_shape` is the outputs' shape as given (`[..., K]`); sparse
    labels are checked to be whole numbers in `[0, K)`.
    """
    num_classes, rank = outputs_shape[-1], len(outputs_shape)
    labels = labels if ops.is_tensor(labels) else np.asarray(labels)
    labels = np.asarray(ops.convert_to_numpy(_labels.hard_labels(labels, num_classes, rank))).reshape(-1)
    num_rows = int(np.prod(outputs_shape[:-1]))
    if len(labels) != num_rows:
        raise ValueError(
            f"Arguments `{name}` and `labels` must hold one prediction per label. Received: {num_rows} predictions "
            f"and {len(labels)} labels"
        )
    return labels


def checked_rows(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """`(probabilities [n, K], labels [n])`, checked: `checked_probabilities`, then `checked_labels`."""
    probabilities = checked_probabilities(probabilities)
    return probabilities, checked_labels(labels, probabilities.shape[-1], len(probabilities))
