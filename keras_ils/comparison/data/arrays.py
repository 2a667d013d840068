"""In-memory data as `Splits`: numpy arrays or a `tf.data.Dataset` of `(x, y)`, split into train, validation, test.

`keras_ils.compare(x, y)` reads its data here: the examples are split by
class into a test set (`test_fraction`) and the rest, whose validation share
(`validation_fraction`) is carved off the same way, all seeded (`split_rows`,
as a table's); the features are standardised with the training split's
statistics (per channel for images), as a `.npz` file's are
(`keras_ils.comparison.data.npz`), whose checks they pass too.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_ils._checks import integer_at_least
from keras_ils.comparison.data.splits import (
    Splits,
    check_features,
    check_fraction,
    check_labels,
    check_num_classes,
    checked_classes,
    split_rows,
    standardised_splits,
)

__all__ = ["array_splits", "dataset_arrays"]


def dataset_arrays(dataset: tf.data.Dataset, steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`(x, y)` as numpy arrays from a dataset of `(x, y)` pairs, batched or not (read once, in order).

    A dataset that may never end, of infinite cardinality (`repeat()`) or
    unknown (`filter`, `from_generator`), is refused before anything is read
    unless `steps` bounds it. The errors name the argument `x`, as
    `keras_ils.compare` takes the dataset.

    Args:
        dataset: yields `(features, label)` pairs, or batches of them.
        steps: read only the first `steps` elements of `dataset` (batches,
            when it is batched), as `dataset.take(steps)`. Defaults to
            `None`: all of them, which needs a known, finite cardinality.

    Example:

    >>> x, y = dataset_arrays(tf.data.Dataset.from_tensor_slices((np.ones((5, 2)), np.arange(5))).batch(2))
    >>> x.shape, y.tolist()
    ((5, 2), [0, 1, 2, 3, 4])
    >>> dataset_arrays(tf.data.Dataset.from_tensor_slices((np.ones((5, 2)), np.arange(5))).repeat(), steps=7)[1]
    array([0, 1, 2, 3, 4, 0, 1])
    """
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ValueError(
            "Invalid value for argument `x`: a tf.data.Dataset must yield `(features, label)` pairs. "
            f"Received a dataset whose elements are {spec}"
        )
    if steps is None:
        _check_bounded(dataset)
    else:
        dataset = dataset.take(integer_at_least("steps", steps, 1))
    batched = spec[1].shape.rank is not None and spec[1].shape.rank >= 1 and spec[1].shape[0] is None
    if batched:
        dataset = dataset.unbatch()
    xs, ys = [], []
    try:
        for x, y in dataset.as_numpy_iterator():
            xs.append(x)
            ys.append(y)
    except tf.errors.OpError as error:
        raise ValueError(
            f"Invalid value for argument `x`: reading the tf.data.Dataset failed after {len(xs)} examples: "
            f"{type(error).__name__}: {error.message.splitlines()[0]}"
        ) from error
    if not xs:
        raise ValueError("Invalid value for argument `x`: the dataset yields no examples.")
    try:
        return np.stack(xs), np.stack(ys)
    except ValueError as error:  # examples or labels of several shapes
        raise ValueError(
            f"Invalid value for argument `x`: the dataset's examples are not of one shape ({error})."
        ) from error


def _check_bounded(dataset) -> None:
    """Refuses a dataset whose reading may never end: infinite or unknown cardinality."""
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "Invalid value for argument `x`: the tf.data.Dataset is infinite (a `repeat()` without a count), so "
            "reading it would never end. Bound it: `x.take(n)` keeps its first n elements (batches, when it is "
            "batched); or pass `steps=n`."
        )
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        raise ValueError(
            "Invalid value for argument `x`: the tf.data.Dataset's cardinality is unknown (after `filter`, from a "
            "generator, ...), so reading it may never end. Pass `steps=n` to read its first n elements (batches, "
            "when it is batched), or state its length: `x.apply(tf.data.experimental.assert_cardinality(n))`."
        )


def array_splits(
    x,
    y,
    *,
    test_fraction: float,
    validation_fraction: float,
    seed: int = 0,
    num_classes: int | None = None,
    name: str = "arrays",
) -> Splits:
    """Features `x [n, ...]` and integer labels `y [n]` as seeded, stratified train/validation/test `Splits`.

    Args:
        x: numbers, `[n, features]` (`[n, 1]` for one feature), or images
            `[n, h, w]` / `[n, h, w, c]`; finite.
        y: `[n]` integer class indices in `[0, K)`, every class present.
        test_fraction: the test set's share of all examples, in `(0, 1)`.
        validation_fraction: validation's share of the rest, in `(0, 1)`.
        seed: seeds both splits.
        num_classes: `K`; defaults to one more than the largest label.
        name: the data's name in the results and messages.

    Returns:
        `Splits`, features standardised with the training split's statistics.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> splits = array_splits(rng.normal(size=(100, 3)), np.arange(100) % 2, test_fraction=0.2,
    ...                       validation_fraction=0.25)
    >>> [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)]
    [60, 20, 20]
    """
    check_fraction(test_fraction, "test_fraction")
    check_fraction(validation_fraction)
    check_num_classes(num_classes)
    x, y = np.asarray(x), np.asarray(y)
    check_features(x, "x", name)
    check_labels(y, x, "y", "x", name)
    num_classes = checked_classes(y, y, num_classes, name)
    if x.ndim == 3:  # grey images without a channel axis
        x = x[..., None]
    train, validation, test = split_rows(
        y, num_classes, test_fraction=test_fraction, validation_fraction=validation_fraction, seed=seed, source=name
    )
    rows = (train, validation, test)
    return standardised_splits([x[r] for r in rows], [y[r] for r in rows], num_classes, name, names=("x",) * 3)
