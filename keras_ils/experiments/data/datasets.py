"""Datasets by name for the command line: the synthetic task, any tfds name, or a user's `.npz`.

Every loader returns `Splits`: unbatched `(x, y)` datasets in a fixed order,
features as float32 (images standardised per channel with training-set
statistics), labels int32.

Inputs are checked before anything is built: a `.npz` whose arrays cannot
carry the method (missing, empty, 1-D or non-numeric features, NaN or inf,
labels that are not class indices `0..K-1` each with training examples,
rows and labels of different lengths) is a `ValueError` that names the array.

Validation splits. The validation split is where the teacher's temperature
`T*` is fitted, where every model's best epoch is chosen and where
hyperparameters are searched, so it has to represent every class. The
default share is 20 % of `train` (Guo et al., 2017, and the paper, §5);
`validation_fraction=0.1` is the paper's 45K/5K split of CIFAR's training set.
A split with no validation example of some class (or, for tfds, no training
example) is a `ValueError` naming the class and its counts: `T*` and the
model selection would never see that class, and the run would report
calibration it never measured. A class with fewer than
`MIN_VALIDATION_PER_CLASS` (5) validation examples is only a `SmallValidationWarning` (a `UserWarning`):
the run is valid, but the temperature fit and the hyperparameter choice rest
on that few examples of the class, and a user with a rare class may accept
that knowingly.
"""

from __future__ import annotations

import os
import warnings
import zipfile
import zlib
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.experiments.data import synthetic

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
DEFAULT_VALIDATION_FRACTION = 0.2
MIN_VALIDATION_PER_CLASS = 5


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


class SmallValidationWarning(UserWarning):
    """A class with fewer than `MIN_VALIDATION_PER_CLASS` validation examples."""


def _check_fraction(validation_fraction):
    number_in("validation_fraction", validation_fraction, 0, 1, low_open=True, high_open=True)


def _check_num_classes(num_classes):
    if num_classes is None:
        return
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(
            "Invalid value for argument `num_classes`. Expected an integer >= 2 or None (read from the labels). "
            f"Received: num_classes={num_classes!r}"
        )


def _check_known_classes(source, known, num_classes):
    if num_classes is not None and num_classes != known:
        raise ValueError(
            f"Invalid value for argument `num_classes`. Expected {known}: {source} has {known} classes. "
            f"Received: num_classes={num_classes!r}"
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
    """Centres and scales every feature (channel, for images) by the training split's mean and standard deviation.

    A feature constant in the training split is only centred (scale 1, as
    scikit-learn's `StandardScaler` does): dividing by its zero spread would
    blow a value it takes elsewhere (a pixel that is blank in every training
    digit but one test digit) up to ~1e7 and the test NLL with it.

    Example:

    >>> train, test = _standardise(np.array([[0.0, 1.0], [2.0, 1.0]]), np.array([[1.0, 3.0]]))
    >>> train.tolist(), test.tolist()
    ([[-1.0, 0.0], [1.0, 0.0]], [[0.0, 2.0]])
    """
    axes = tuple(range(x_train.ndim - 1))
    mean, std = x_train.mean(axis=axes), x_train.std(axis=axes)
    scale = np.where(std > 1e-12 * np.maximum(np.abs(mean), 1.0), std, 1.0)
    return [((x - mean) / scale).astype(np.float32) for x in (x_train, *others)]


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


def _class_list(counts, classes, limit=8):
    """'class 2 (3), class 5 (1)' for the first `limit` classes, then '... and N more'."""
    shown = ", ".join(f"class {c} ({int(counts[c])})" for c in classes[:limit])
    return shown + (f" and {len(classes) - limit} more" if len(classes) > limit else "")


def _check_split(source, train_counts, validation_counts, advice):
    """Every class in training and validation (else ValueError), >= 5 validation examples (else UserWarning)."""
    for counts, split in ((train_counts, "training"), (validation_counts, "validation")):
        absent = np.flatnonzero(counts == 0)
        if len(absent):
            c, others = int(absent[0]), absent[1:].tolist()
            more = f", nor of classes {others[:8]}{' ...' if len(others) > 8 else ''}" if others else ""
            raise ValueError(
                f"{source}: the {split} split has no example of class {c} (training {int(train_counts[c])}, "
                f"validation {int(validation_counts[c])}){more}. The teacher's temperature T* and the model "
                "selection need every class in both splits." + (f" {advice}" if split == "validation" else "")
            )
    few = np.flatnonzero(validation_counts < MIN_VALIDATION_PER_CLASS)
    if len(few):
        warnings.warn(
            f"{source}: the validation split has fewer than {MIN_VALIDATION_PER_CLASS} examples of "
            f"{_class_list(validation_counts, few)}. The teacher's temperature T*, each model's best epoch and "
            "the hyperparameter choice rest on that many examples of those classes, so expect noisy "
            f"calibration for them. {advice}",
            SmallValidationWarning,
            stacklevel=3,
        )


def _stratified_split(y, num_classes, validation_fraction, seed):
    """`(train_rows, validation_rows)`: a seeded permutation of each class, its share in proportion.

    The validation split holds about `round(validation_fraction * len(y))`
    examples (more where the minimum of one per class needs them, fewer where
    the classes have no room to give more: never all of a class), shared among
    the classes in proportion to their counts (largest remainders): at least
    one of every class with two or more examples, never all of a class.
    """
    counts = np.bincount(y, minlength=num_classes)
    quota = validation_fraction * counts
    take = np.where(counts >= 2, np.maximum(np.floor(quota), 1), 0).astype(int)
    room = take < counts - 1  # the classes that can give one more
    remaining = int(round(validation_fraction * len(y))) - take.sum()
    if remaining > 0:
        order = [c for c in np.argsort(-(quota - take), kind="stable") if room[c]]
        take[order[:remaining]] += 1
    rng = np.random.default_rng(seed)
    train_rows, validation_rows = [], []
    for c, rows in enumerate(np.split(np.argsort(y, kind="stable"), np.cumsum(counts)[:-1])):
        rows = rng.permutation(rows)
        validation_rows.append(rows[: take[c]])
        train_rows.append(rows[take[c] :])
    return rng.permutation(np.concatenate(train_rows)), rng.permutation(np.concatenate(validation_rows))


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
    _check_fraction(validation_fraction)
    _check_num_classes(num_classes)
    x_train, y_train, x_test, y_test = _read_npz(path)
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        _check_features(x, f"x_{split}", path)
        _check_labels(y, x, f"y_{split}", f"x_{split}", path)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise _invalid(
            "x_test", path, f"examples shaped like those of x_train, {x_train.shape[1:]}", f"{x_test.shape[1:]}"
        )
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
    if x_train.ndim == 3:  # grey images without a channel axis
        x_train, x_test = x_train[..., None], x_test[..., None]
    train_rows, validation_rows = _stratified_split(y_train, num_classes, validation_fraction, seed)
    _check_split(
        path,
        np.bincount(y_train[train_rows], minlength=num_classes),
        np.bincount(y_train[validation_rows], minlength=num_classes),
        "Give each class more examples in y_train, or a larger validation fraction.",
    )
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
    _check_fraction(validation_fraction)
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
    import tensorflow_datasets as tfds

    _check_num_classes(num_classes)
    training_split, validation_split = _tfds_split_strings(validation_fraction, validation_size, train_splits)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"Unknown tensorflow-datasets name {name!r}.") from error
    info = builder.info
    if info.supervised_keys is None or "label" not in info.features:
        raise ValueError(f"tfds:{name} has no labels (no supervised keys); it cannot train a classifier.")
    known_classes = int(info.features["label"].num_classes)
    _check_known_classes(f"tfds:{name}", known_classes, num_classes)
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
    _check_split(source, train_counts, validation_counts, "A larger validation fraction may help.")
    mean = (total / count).astype(np.float32)
    std = (np.sqrt(np.maximum(squares / count - (total / count) ** 2, 0)) + 1e-7).astype(np.float32)
    standardise = lambda x, y: ((x - mean) / std, y)  # noqa: E731
    train, validation, test = (
        ds.map(standardise, num_parallel_calls=tf.data.AUTOTUNE) for ds in (train, validation, test)
    )
    return Splits(train, validation, test, known_classes, image_shape, name, {})


def load(
    spec: str,
    *,
    data_dir: str | None = None,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    seed: int = 0,
    num_classes: int | None = None,
    validation_size: int | None = None,
    train_splits: tuple = ("train",),
) -> Splits:
    """`"synthetic"`, `"tfds:NAME"` or a path ending in `.npz`.

    `validation_fraction` (default 20 %) applies to tfds and `.npz` data; the
    synthetic task has its own validation set (50 per class). `num_classes`,
    when given, must match the synthetic task's 3 and a tfds dataset's count,
    and bounds the labels of a `.npz`. `validation_size` and `train_splits`
    are `load_tfds`'s (tfds only): `load("tfds:svhn_cropped",
    train_splits=("train", "extra"), validation_size=6000)` is the paper's
    598K/6K SVHN split.

    Example:

    >>> load("synthetic").name
    'synthetic'
    """
    _check_num_classes(num_classes)
    if not spec.startswith("tfds:") and (validation_size is not None or tuple(train_splits) != ("train",)):
        raise ValueError(
            f"`validation_size` and `train_splits` apply to tfds datasets only. Received: validation_size="
            f"{validation_size!r}, train_splits={train_splits!r} for dataset {spec!r}"
        )
    if spec == "synthetic":
        _check_fraction(validation_fraction)
        _check_known_classes("the synthetic task", synthetic.NUM_CLASSES, num_classes)
        return load_synthetic(seed=seed)
    if spec.startswith("tfds:"):
        return load_tfds(
            spec[5:],
            data_dir=data_dir,
            validation_fraction=validation_fraction,
            num_classes=num_classes,
            validation_size=validation_size,
            train_splits=train_splits,
        )
    if spec.endswith(".npz"):
        return load_npz(spec, validation_fraction=validation_fraction, seed=seed, num_classes=num_classes)
    raise ValueError(
        f"Unknown dataset {spec!r}. Expected 'synthetic', 'tfds:NAME' (e.g. tfds:cifar10) or a path to a .npz file."
    )
