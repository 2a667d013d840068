"""Datasets by name for the command line: the synthetic task, any tfds name, or a user's `.npz`.

Every loader returns `Splits`: unbatched `(x, y)` datasets in a fixed order,
features as float32 (images standardised per channel with training-set
statistics), labels int32.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_ils.experiments import synthetic

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


class Splits(NamedTuple):
    train: tf.data.Dataset
    validation: tf.data.Dataset
    test: tf.data.Dataset
    num_classes: int
    input_shape: tuple
    name: str
    test_groups: dict  # {name: boolean mask over the test set}, e.g. the synthetic dense/sparse split

    @property
    def is_image(self) -> bool:
        return len(self.input_shape) == 3


def _check_fraction(validation_fraction):
    if not 0 < validation_fraction < 1:
        raise ValueError(
            "Invalid value for argument `validation_fraction`. Expected a float in (0, 1). "
            f"Received: validation_fraction={validation_fraction!r}"
        )


def load_synthetic(seed: int = 0, n_train: int = 50, n_validation: int = 50, n_test: int = 5000) -> Splits:
    """The paper's synthetic protocol: train/validation 50 per class, test 5000 per class (§3).

    Example:

    >>> splits = load_synthetic(n_test=10)
    >>> splits.num_classes, int(splits.train.cardinality()), sorted(splits.test_groups)
    (3, 150, ['dense', 'sparse'])
    """
    train = synthetic.make_dataset(n_train, seed=seed)
    validation = synthetic.make_dataset(n_validation, seed=seed + 10_000)
    test = synthetic.make_dataset(n_test, seed=seed + 20_000)
    make = lambda d: tf.data.Dataset.from_tensor_slices((d.x, d.y))  # noqa: E731
    groups = {"dense": test.dense, "sparse": ~test.dense}
    return Splits(make(train), make(validation), make(test), synthetic.NUM_CLASSES, (2,), "synthetic", groups)


def _standardise(x_train, *others):
    axes = tuple(range(x_train.ndim - 1))
    mean, std = x_train.mean(axis=axes), x_train.std(axis=axes) + 1e-7
    return [((x - mean) / std).astype(np.float32) for x in (x_train, *others)]


def load_npz(path: str, validation_fraction: float = 0.1, seed: int = 0) -> Splits:
    """A user's `.npz` with `x_train, y_train, x_test, y_test`; validation carved from train.

    A seeded permutation of the training set puts `validation_fraction` of it
    (10 % by default, the paper's 45K/5K on CIFAR) aside for validation.
    """
    _check_fraction(validation_fraction)
    if not os.path.isfile(path):
        raise ValueError(f"No such .npz file: {path}")
    with np.load(path, allow_pickle=False) as stored:
        missing = [k for k in NPZ_KEYS if k not in stored]
        if missing:
            raise ValueError(f"{path} lacks the arrays {missing}; expected {list(NPZ_KEYS)}.")
        x_train, y_train, x_test, y_test = (np.asarray(stored[k]) for k in NPZ_KEYS)
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise ValueError(f"{path}: x_{split} must be numeric; it has dtype {x.dtype}.")
        if len(x) != len(y):
            raise ValueError(f"{path}: x_{split} has {len(x)} rows but y_{split} has {len(y)}.")
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"{path}: y_{split} must be a 1-D array of integer labels; got {y.dtype} {y.shape}.")
    if x_train.ndim == 3:  # grey images without a channel axis
        x_train, x_test = x_train[..., None], x_test[..., None]
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if min(y_train.min(), y_test.min()) < 0 or num_classes < 2:
        raise ValueError(f"{path}: labels must be class indices in [0, K) with K >= 2.")
    order = np.random.default_rng(seed).permutation(len(x_train))
    n_validation = max(1, int(round(validation_fraction * len(x_train))))
    validation_rows, train_rows = order[:n_validation], order[n_validation:]
    x_train, x_validation, x_test = _standardise(x_train[train_rows], x_train[validation_rows], x_test)
    make = lambda x, y: tf.data.Dataset.from_tensor_slices((x, y.astype(np.int32)))  # noqa: E731
    return Splits(
        make(x_train, y_train[train_rows]),
        make(x_validation, y_train[validation_rows]),
        make(x_test, y_test),
        num_classes,
        tuple(x_train.shape[1:]),
        os.path.basename(path),
        {},
    )


def load_tfds(name: str, data_dir: str | None = None, validation_fraction: float = 0.1) -> Splits:
    """A tensorflow-datasets dataset with `train` and `test` splits and supervised keys.

    The last `validation_fraction` of `train` (whole percent) is the
    validation split. Images are scaled to [0, 1] and standardised per channel
    with statistics of the training split. Downloading is tfds's business.
    """
    import tensorflow_datasets as tfds

    _check_fraction(validation_fraction)
    percent = validation_fraction * 100
    if abs(percent - round(percent)) > 1e-9:
        raise ValueError(
            "Invalid value for argument `validation_fraction`. Expected whole percent for tfds datasets "
            f"(0.1, 0.2, ...). Received: validation_fraction={validation_fraction!r}"
        )
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"Unknown tensorflow-datasets name {name!r}.") from error
    info = builder.info
    if info.supervised_keys is None or "label" not in info.features:
        raise ValueError(f"tfds:{name} has no labels (no supervised keys); it cannot train a classifier.")
    cut = 100 - int(round(percent))
    train, validation, test = tfds.load(
        name,
        split=[f"train[:{cut}%]", f"train[{cut}%:]", "test"],
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
    for x, _ in train.batch(1024):
        x = x.numpy().astype(np.float64)
        total = total + x.sum(axis=(0, 1, 2))
        squares = squares + (x**2).sum(axis=(0, 1, 2))
        count += x.shape[0] * x.shape[1] * x.shape[2]
    if count == 0:
        raise ValueError(f"tfds:{name} has an empty training split.")
    mean = (total / count).astype(np.float32)
    std = (np.sqrt(np.maximum(squares / count - (total / count) ** 2, 0)) + 1e-7).astype(np.float32)
    standardise = lambda x, y: ((x - mean) / std, y)  # noqa: E731
    train, validation, test = (
        ds.map(standardise, num_parallel_calls=tf.data.AUTOTUNE) for ds in (train, validation, test)
    )
    num_classes = int(info.features["label"].num_classes)
    return Splits(train, validation, test, num_classes, image_shape, name, {})


def load(spec: str, *, data_dir: str | None = None, validation_fraction: float = 0.1, seed: int = 0) -> Splits:
    """`"synthetic"`, `"tfds:NAME"` or a path ending in `.npz`.

    Example:

    >>> load("synthetic").name
    'synthetic'
    """
    if spec == "synthetic":
        return load_synthetic(seed=seed)
    if spec.startswith("tfds:"):
        return load_tfds(spec[5:], data_dir=data_dir, validation_fraction=validation_fraction)
    if spec.endswith(".npz"):
        return load_npz(spec, validation_fraction=validation_fraction, seed=seed)
    raise ValueError(
        f"Unknown dataset {spec!r}. Expected 'synthetic', 'tfds:NAME' (e.g. tfds:cifar10) or a path to a .npz file."
    )
