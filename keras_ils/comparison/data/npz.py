"""A user's `.npz` (`x_train, y_train, x_test, y_test`): read, checked array by array, split and standardised."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from keras_ils.comparison.data.splits import (
    DEFAULT_VALIDATION_FRACTION,
    Splits,
    check_features,
    check_fraction,
    check_labels,
    check_num_classes,
    check_split,
    checked_classes,
    invalid_array,
    standardised_splits,
    stratified_split,
)

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


_UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, zlib.error)
_SAVE_HINT = "Save one with np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)."


def _read_npz(path):
    """`(x_train, y_train, x_test, y_test)` from `path`, or a `ValueError` saying why they cannot be read."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory, not a .npz file.")
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
                raise invalid_array(k, path, "an array of numbers", "an object array") from error
            except _UNREADABLE as error:
                raise ValueError(f"{path}: the array `{k}` cannot be read ({error}); the file is damaged.") from error
    return arrays


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
        check_features(x, f"x_{split}", path)
        check_labels(y, x, f"y_{split}", f"x_{split}", path)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise invalid_array(
            "x_test", path, f"examples shaped like those of x_train, {x_train.shape[1:]}", f"{x_test.shape[1:]}"
        )
    num_classes = checked_classes(y_train, y_test, num_classes, path)
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
