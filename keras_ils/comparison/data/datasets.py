"""Datasets by name for the command line: the synthetic task, a user's `.npz` or `.csv` table, `PREFIX:NAME`.

`PREFIX:NAME` names a dataset of a registered catalogue (`register_source`):
`import keras_ils_experiments` registers `tfds`, tensorflow-datasets' (`tfds:cifar10`).

Every loader returns `Splits`: unbatched `(x, y)` datasets in a fixed order,
features as float32 (images standardised per channel with training-set
statistics), labels int32.

Inputs are checked before anything is built: a `.npz` whose arrays cannot
carry the method (missing, empty, 1-D or non-numeric features, NaN or inf,
labels that are not class indices `0..K-1` each with training examples,
rows and labels of different lengths) is a `ValueError` that names the array.
A `.csv` table (`tabular.table_splits`, with the `target` column to predict)
gets one naming the column: missing values, an unknown target, a one-class
target, no feature column that varies.

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

from collections.abc import Sequence

import tensorflow as tf

from keras_ils._checks import integer_at_least
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.data.npz import NPZ_KEYS, load_npz
from keras_ils.comparison.data.splits import (
    DEFAULT_VALIDATION_FRACTION,
    MIN_VALIDATION_PER_CLASS,
    SmallValidationWarning,
    Splits,
    check_fraction,
    check_known_classes,
    check_num_classes,
)
from keras_ils.comparison.data.tabular import table_splits

# datasets named `PREFIX:NAME`, by prefix; `register_source` adds one (`import keras_ils_experiments` adds `tfds`,
# tensorflow-datasets' catalogue)
_SOURCES = {}


def register_source(prefix: str, loader) -> None:
    """Makes `load("PREFIX:NAME", ...)` call `loader(NAME, **settings)`, for a catalogue of datasets by name.

    `loader` takes the name and the keywords `data_dir`, `validation_fraction`, `num_classes`, `seed`,
    `validation_size` and `train_splits` (`load`'s, passed on), and returns `Splits`. A prefix registered
    again is replaced.
    """
    if not (isinstance(prefix, str) and prefix.isidentifier()):
        raise ValueError(f"Invalid value for argument `prefix`. Expected an identifier. Received: prefix={prefix!r}")
    if not callable(loader):
        raise TypeError(f"Argument `loader` must be a function. Received: loader={loader!r}")
    _SOURCES[prefix] = loader


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


def _check_target(spec: str, target, categorical) -> None:
    """A `.csv` table needs the `target` column's name; no other dataset takes one, nor `categorical` columns."""
    if spec.endswith(".csv") and (not isinstance(target, str) or not target):
        raise ValueError(
            "Invalid value for argument `target`. Expected the name of the column to predict of the table "
            f"{spec!r} (on the command line: --target COLUMN). Received: target={target!r}"
        )
    for name, value in (("target", target), ("categorical", categorical)):
        if value is not None and not spec.endswith(".csv"):
            raise ValueError(
                f"Argument `{name}` applies to .csv tables only. Received: {name}={value!r} for dataset {spec!r}"
            )


def _per_class(validation_size) -> int:
    """The synthetic task's validation examples per class: `validation_size / 3`, 50 when `None`."""
    if validation_size is None:
        return 50
    classes = synthetic.NUM_CLASSES
    integer_at_least("validation_size", validation_size, 2 * classes)
    if validation_size % classes:
        raise ValueError(
            f"Invalid value for argument `validation_size`. Expected a multiple of {classes} for the synthetic task "
            f"(as many examples of each class). Received: validation_size={validation_size}"
        )
    return validation_size // classes


def load(
    spec: str,
    *,
    data_dir: str | None = None,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    seed: int = 0,
    num_classes: int | None = None,
    validation_size: int | None = None,
    train_splits: tuple = ("train",),
    target: str | None = None,
    categorical: Sequence[str] | str | None = None,
) -> Splits:
    """`"synthetic"`, `"tfds:NAME"`, a path ending in `.npz`, or one ending in `.csv` with a `target` column.

    `validation_fraction` (default 20 %) applies to tfds, `.npz` and `.csv`
    data (for a table, the share of the rows left once its test set, 20 %, is
    set aside); the synthetic task draws its own validation set, 150
    examples (50 per class), or `validation_size` (a multiple of 3: as
    many per class). `num_classes`, when given, must match the synthetic
    task's 3, a tfds dataset's and a table's count, and bounds the labels of
    a `.npz`. `validation_size` and `train_splits` are otherwise a registered
    catalogue's (`load_tfds`'s): `load("tfds:svhn_cropped",
    train_splits=("train", "extra"), validation_size=6000)` is the paper's
    598K/6K SVHN split. `categorical` names a `.csv` table's columns to read
    as categories (`table_splits`).

    Example:

    >>> load("synthetic").name
    'synthetic'
    """
    check_num_classes(num_classes)
    _check_target(spec, target, categorical)
    prefix, colon, name = spec.partition(":")
    registered = colon and prefix in _SOURCES
    synthetic_size = spec == "synthetic" and tuple(train_splits) == ("train",)
    if not (registered or synthetic_size) and (validation_size is not None or tuple(train_splits) != ("train",)):
        raise ValueError(
            f"`validation_size` and `train_splits` apply to tfds datasets only (and `validation_size` to the "
            f"synthetic task). Received: validation_size="
            f"{validation_size!r}, train_splits={train_splits!r} for dataset {spec!r}"
        )
    if spec == "synthetic":
        check_fraction(validation_fraction)
        check_known_classes("the synthetic task", synthetic.NUM_CLASSES, num_classes)
        return load_synthetic(seed=seed, n_validation=_per_class(validation_size))
    if colon and prefix == "tfds" and prefix not in _SOURCES:
        raise ValueError(
            f"tfds datasets come with the paper's machinery: install `keras-ils[experiments]` (it brings "
            f"tensorflow-datasets) and `import keras_ils_experiments` (the command does). Received: dataset={spec!r}"
        )
    if registered:
        return _SOURCES[prefix](
            name,
            data_dir=data_dir,
            validation_fraction=validation_fraction,
            num_classes=num_classes,
            seed=seed,
            validation_size=validation_size,
            train_splits=train_splits,
        )
    if spec.endswith(".npz"):
        return load_npz(spec, validation_fraction=validation_fraction, seed=seed, num_classes=num_classes)
    if spec.endswith(".csv"):
        splits = table_splits(spec, target, validation_fraction=validation_fraction, seed=seed, categorical=categorical)
        check_known_classes(spec, splits.num_classes, num_classes)
        return splits
    sources = ", ".join(f"{known}:NAME" for known in sorted(_SOURCES)) or "tfds:NAME with keras_ils_experiments"
    raise ValueError(
        f"Unknown dataset {spec!r}. Expected 'synthetic', a path to a .npz file, a path to a .csv file (with "
        f"`target`) or a registered catalogue's name ({sources}, e.g. tfds:cifar10)."
    )


__all__ = [
    "DEFAULT_VALIDATION_FRACTION",
    "MIN_VALIDATION_PER_CLASS",
    "NPZ_KEYS",
    "SmallValidationWarning",
    "Splits",
    "load",
    "load_npz",
    "load_synthetic",
    "register_source",
    "table_splits",
]
