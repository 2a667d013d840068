"""A tensorflow-datasets dataset by name, with a validation split carved from its training split(s)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_ils._checks import integer_at_least, invalid
from keras_ils.comparison.data.splits import (
    DEFAULT_VALIDATION_FRACTION,
    Splits,
    check_fraction,
    check_known_classes,
    check_num_classes,
    check_split,
)


def _count_labels(y, num_classes, source):
    """Per-class counts of a batch of tfds labels, which must lie in [0, num_classes)."""
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"{source}: labels outside [0, {num_classes}) (smallest {y.min()}, largest {y.max()}).")
    return np.bincount(y, minlength=num_classes)


def _tfds_split_strings(validation_fraction, validation_size, train_splits):
    """tfds split strings `(training, validation)`: the last share or count of the training splits validates."""
    if isinstance(train_splits, str) or not train_splits or not all(isinstance(s, str) and s for s in train_splits):
        raise invalid("train_splits", "a non-empty tuple of tfds split names, e.g. ('train', 'extra')", train_splits)
    *rest, last = train_splits
    if validation_size is not None:
        integer_at_least("validation_size", validation_size, 1)
        return "+".join([*rest, f"{last}[:-{validation_size}]"]), f"{last}[-{validation_size}:]"
    if rest:
        raise invalid("validation_size", "a count of validation examples when more than one split trains", None)
    check_fraction(validation_fraction)
    percent = validation_fraction * 100
    if abs(percent - round(percent)) > 1e-9:
        raise ValueError(
            "Invalid value for argument `validation_fraction`. Expected whole percent for tfds datasets "
            f"(0.1, 0.2, ...). Received: validation_fraction={validation_fraction!r}"
        )
    cut = 100 - int(round(percent))
    return f"{last}[:{cut}%]", f"{last}[{cut}%:]"


def load_tfds(
    name: str,
    data_dir: str | None = None,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    num_classes: int | None = None,
    *,
    validation_size: int | None = None,
    train_splits: tuple = ("train",),
) -> Splits:
    """A tensorflow-datasets dataset with `train` and `test` splits and supervised keys.

    The last `validation_fraction` of `train` (whole percent; 20 % by
    default, `0.1` is the paper's 45K/5K on CIFAR) is the validation split.
    `validation_size`, when given, replaces the share by a count: the last
    `validation_size` examples of the last of `train_splits`, all the others
    train. The paper's SVHN split (598K/6K) is
    `load_tfds("svhn_cropped", train_splits=("train", "extra"), validation_size=6000)`:
    training `train+extra[:-6000]`, validation `extra[-6000:]`. More than one
    training split needs `validation_size`.
    Its labels are counted: a class with no validation (or training) example
    is a `ValueError`, fewer than 5 validation examples a `UserWarning` (see
    the module docstring). Images are scaled to [0, 1] and standardised per
    channel with statistics of the training split. Downloading is tfds's
    business. `num_classes`, when given, must equal the dataset's.
    """
    try:
        import tensorflow_datasets as tfds
    except ModuleNotFoundError as error:
        raise ImportError(
            f"tfds:{name} needs tensorflow-datasets, which the `experiments` extra installs: "
            'pip install "keras-ils[experiments]" (or pip install tensorflow-datasets).'
        ) from error

    check_num_classes(num_classes)
    training_split, validation_split = _tfds_split_strings(validation_fraction, validation_size, train_splits)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"Unknown tensorflow-datasets name {name!r}.") from error
    info = builder.info
    if info.supervised_keys is None or "label" not in info.features:
        raise ValueError(f"tfds:{name} has no labels (no supervised keys); it cannot train a classifier.")
    known_classes = int(info.features["label"].num_classes)
    check_known_classes(f"tfds:{name}", known_classes, num_classes)
    train, validation, test = tfds.load(
        name,
        split=[training_split, validation_split, "test"],
        data_dir=data_dir,
        as_supervised=True,
        shuffle_files=False,
    )
    image_shape = tuple(info.features[info.supervised_keys[0]].shape)
    to_float = lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32))  # noqa: E731
    train, validation, test = (
        ds.map(to_float, num_parallel_calls=tf.data.AUTOTUNE) for ds in (train, validation, test)
    )
    total, squares, count = 0.0, 0.0, 0
    train_counts = np.zeros(known_classes, np.int64)
    for x, y in train.batch(1024):
        x = x.numpy().astype(np.float64)
        total = total + x.sum(axis=(0, 1, 2))
        squares = squares + (x**2).sum(axis=(0, 1, 2))
        count += x.shape[0] * x.shape[1] * x.shape[2]
        train_counts += _count_labels(y.numpy(), known_classes, f"tfds:{name}")
    if count == 0:
        raise ValueError(f"tfds:{name} has an empty training split.")
    source = f"tfds:{name} ({training_split} for training, {validation_split} for validation)"
    validation_counts = sum(
        (_count_labels(y.numpy(), known_classes, f"tfds:{name}") for _, y in validation.batch(1024)),
        np.zeros(known_classes, np.int64),
    )
    if validation_size is not None and validation_counts.sum() != validation_size:
        raise ValueError(
            "Invalid value for argument `validation_size`. Expected at most the examples of the last training split. "
            f"Received: validation_size={validation_size} ({source} has {validation_counts.sum()})"
        )
    check_split(source, train_counts, validation_counts, "A larger validation fraction may help.")
    mean = (total / count).astype(np.float32)
    std = (np.sqrt(np.maximum(squares / count - (total / count) ** 2, 0)) + 1e-7).astype(np.float32)
    standardise = lambda x, y: ((x - mean) / std, y)  # noqa: E731
    train, validation, test = (
        ds.map(standardise, num_parallel_calls=tf.data.AUTOTUNE) for ds in (train, validation, test)
    )
    stored = {"mean": (255.0 * mean.astype(np.float64)).tolist(), "scale": (255.0 * std.astype(np.float64)).tolist()}
    return Splits(train, validation, test, known_classes, image_shape, name, {}, stored)  # stored: uint8 pixels


__all__ = ["load_tfds"]
