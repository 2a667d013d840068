"""A user's `.npz` (`x_train, y_train, x_test, y_test`): read, checked array by array, split and standardised."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from keras_ils.comparison.data.splits import (
    DEFAULT_VALIDATION_FRACTION,
    Splits,
    check_fraction,
    check_num_classes,
    check_split,
    standardised_splits,
    stratified_split,
)

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


_UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, zlib.error)
_SAVE_HINT = "Save one with np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)."


def _read_npz(path):
    """`(x_train, y_train, x_test, y_test)` from `path`, or a `ValueError` saying why they cannot be read."""
    if not os.path.isfile(path):
        raise ValueError(f"No such .npz file: {path}")
    try:
        stored = np.load(path, allow_pickle=False)
    except ValueError as error:  # what np.load says of a file that is neither a zip archive nor a .npy array
        raise ValueError(f"{path} is not a .npz file: np.load finds no arrays in it. {_SAVE_HINT}") from error
    except _UNREADABLE as error:
        raise ValueError(f"{path} is not a readable .npz file ({error}). {_SAVE_HINT}") from error
    if not isinstance(stored, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} holds a single .npy array, not the four arrays of a .npz. {_SAVE_HINT}")
    with stored:
        missing = [k for k in NPZ_KEYS if k not in stored.files]
        if missing:
            raise ValueError(f"{path} lacks the arrays {missing}; expected {list(NPZ_KEYS)}.")
        arrays = []
        for k in NPZ_KEYS:
            try:
                arrays.append(np.asarray(stored[k]))
            except ValueError as error:  # np.load reads no pickled (object) arrays
                raise _invalid(k, path, "an array of numbers", "an object array") from error
            except _UNREADABLE as error:
                raise ValueError(f"{path}: the array `{k}` cannot be read ({error}); the file is damaged.") from error
    return arrays


def _invalid(name, source, expected, received):
    return ValueError(f"Invalid value for array `{name}` in {source}. Expected {expected}. Received: {received}.")


def _check_features(x, name, source):
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating) or x.dtype == bool):
        raise _invalid(name, source, "real numbers (an integer, float or bool dtype)", f"dtype {x.dtype}")
    if x.ndim < 2:
        raise _invalid(
            name,
            source,
            f"shape [n, features] (one feature per example is [n, 1]: {name}[:, None])",
            f"shape {x.shape}",
        )
    if x.size == 0:
        raise _invalid(name, source, "at least one example with at least one feature", f"shape {x.shape}")
    if np.issubdtype(x.dtype, np.floating):
        nan, inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
        if nan or inf:
            raise _invalid(name, source, "finite numbers", f"{nan} NaN and {inf} inf among its {x.size} values")


def _check_labels(y, x, name, x_name, source):
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise _invalid(
            name,
            source,
            "a 1-D array of integer class indices (one-hot rows: y.argmax(1); whole floats: y.astype(int))",
            f"dtype {y.dtype}, shape {y.shape}",
        )
    if len(y) != len(x):
        raise _invalid(
            name, source, f"one label per row of {x_name}", f"{x_name} has {len(x)} rows but {name} has {len(y)}"
        )
    negative = y < 0
    if negative.any():
        raise _invalid(
            name, source, "class indices >= 0", f"{int(negative.sum())} negative labels (smallest {int(y.min())})"
        )


def _missing_classes(present, num_classes, limit=8):
    """The first `limit` classes in [0, num_classes) absent from the sorted unique labels `present`."""
    have, missing, c = set(present.tolist()), [], 0
    while len(missing) < limit and c < num_classes:
        if c not in have:
            missing.append(c)
        c += 1
    return missing


def _checked_classes(y_train, y_test, num_classes, path):
    """`K`: `num_classes` or one more than the largest label, once every class has training examples and
    `y_test` holds only classes `y_train` has."""
    largest = int(max(y_train.max(), y_test.max()))
    if num_classes is not None and largest >= num_classes:
        name, y = ("y_train", y_train) if y_train.max() >= num_classes else ("y_test", y_test)
        raise _invalid(
            name,
            path,
            f"class indices in [0, {num_classes}) (num_classes={num_classes})",
            f"{int((y >= num_classes).sum())} labels >= {num_classes} (largest {int(y.max())})",
        )
    num_classes = num_classes or largest + 1
    if num_classes < 2:
        raise _invalid("y_train", path, "at least 2 classes", "only class 0")
    present = np.unique(y_train)
    unseen = np.setdiff1d(np.unique(y_test), present)
    if len(unseen):
        raise _invalid(
            "y_test",
            path,
            "only classes that y_train has examples of",
            f"labels {unseen.tolist()[:8]} that never appear in y_train (a model cannot learn them)",
        )
    if len(present) < num_classes:
        raise _invalid(
            "y_train",
            path,
            f"at least one example of every class in [0, {num_classes})",
            f"no example of class(es) {_missing_classes(present, num_classes)} ({num_classes - len(present)} of "
            f"{num_classes} classes; labels must be 0..K-1 with none skipped: renumber them, e.g. with "
            "np.unique(y, return_inverse=True))",
        )
    return num_classes


def load_npz(
    path: str,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    seed: int = 0,
    num_classes: int | None = None,
) -> Splits:
    """A user's `.npz` with `x_train, y_train, x_test, y_test`; a stratified validation split carved from train.

    Each class is permuted with `seed` and gives its share of
    `validation_fraction` to validation, so the split keeps the class
    proportions, every class with two or more training examples gets at least
    one validation example, and the same seed gives the same split. A class
    with a single training example is a `ValueError` (it cannot be in both
    splits); fewer than 5 validation examples of a class is a `SmallValidationWarning`
    (see the module docstring).

    Args:
        path: the `.npz` file. `x_train`, `x_test`: numbers, `[n, features...]`
            (`[n, 1]` for one feature; `[n, h, w]` grey images get a channel
            axis), finite. `y_train`, `y_test`: 1-D integer class indices.
        validation_fraction: share of `x_train` set aside for validation, in
            (0, 1). Defaults to `0.2`; `0.1` is the paper's 45K/5K on CIFAR.
        seed: seed of the split. Defaults to `0`.
        num_classes: the number of classes `K`; labels must lie in `[0, K)`.
            Defaults to `None`: one more than the largest label of `y_train`
            and `y_test`. Either way every class needs a training example, and
            `y_test` may only hold classes that `y_train` has.

    Returns:
        `Splits`, features standardised with training-split statistics.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
    >>> rng = np.random.default_rng(0)
    >>> np.savez(path, x_train=rng.normal(size=(100, 4)), y_train=np.arange(100) % 4,
    ...          x_test=rng.normal(size=(20, 4)), y_test=np.arange(20) % 4)
    >>> splits = load_npz(path)
    >>> [int(d.cardinality()) for d in (splits.train, splits.validation, splits.test)], splits.num_classes
    ([80, 20, 20], 4)
    """
    check_fraction(validation_fraction)
    check_num_classes(num_classes)
    x_train, y_train, x_test, y_test = _read_npz(path)
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        _check_features(x, f"x_{split}", path)
        _check_labels(y, x, f"y_{split}", f"x_{split}", path)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise _invalid(
            "x_test", path, f"examples shaped like those of x_train, {x_train.shape[1:]}", f"{x_test.shape[1:]}"
        )
    num_classes = _checked_classes(y_train, y_test, num_classes, path)
    if x_train.ndim == 3:  # grey images without a channel axis
        x_train, x_test = x_train[..., None], x_test[..., None]
    train_rows, validation_rows = stratified_split(y_train, num_classes, validation_fraction, seed)
    check_split(
        path,
        np.bincount(y_train[train_rows], minlength=num_classes),
        np.bincount(y_train[validation_rows], minlength=num_classes),
        "Give each class more examples in y_train, or a larger validation fraction.",
    )
    return standardised_splits(
        (x_train[train_rows], x_train[validation_rows], x_test),
        (y_train[train_rows], y_train[validation_rows], y_test),
        num_classes,
        os.path.basename(path),
        names=("x_train", "x_train", "x_test"),
    )


__all__ = ["NPZ_KEYS", "load_npz"]
