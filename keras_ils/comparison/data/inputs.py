"""`compare`'s data: `x` (and `y`) in every form it takes, as a function `seed -> Splits`.

Arrays and `tf.data` datasets go to `arrays`, tables (a DataFrame, a `.csv`
path) to `tabular`, dataset names (`"synthetic"`, `"tfds:NAME"`, a `.npz`
path) to `datasets`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import tensorflow as tf

from keras_ils.comparison.data import arrays, datasets, tabular

__all__ = ["is_table", "splits_maker"]


def splits_maker(x, y, *, target, categorical, steps, validation_split, test_split, num_classes) -> Callable:
    """`seed -> Splits` of the data in whatever form `compare` takes them; the arguments that do not apply to
    that form are refused, naming them (a dataset is read here, once)."""
    table = is_table(x) or (isinstance(x, (str, os.PathLike)) and str(x).lower().endswith(".csv"))
    dataset = isinstance(x, tf.data.Dataset)
    for name, value, applies, form in (
        ("target", target, table, "names a column of a table (a pandas DataFrame or a .csv path)"),
        ("categorical", categorical, table, "names columns of a table (a pandas DataFrame or a .csv path)"),
        ("steps", steps, dataset, "bounds a tf.data.Dataset `x`"),
    ):
        if value is not None and not applies:
            raise ValueError(
                f"Argument `{name}` {form}; received x of type {type(x).__name__}. Received: {name}={value!r}"
            )
    if table:
        if y is not None:
            raise ValueError("Argument `y` must be None for a table: name its label column with `target=`.")
        return lambda seed: tabular.table_splits(
            x,
            target,
            validation_fraction=validation_split,
            test_fraction=test_split,
            seed=seed,
            categorical=categorical,
        )
    if isinstance(x, (str, os.PathLike)):  # the CLI's names: "synthetic", "tfds:NAME", a .npz path
        if y is not None:
            raise ValueError(f"Argument `y` must be None for the dataset {x!r}, which holds its labels.")
        return lambda seed: datasets.load(
            str(x), validation_fraction=validation_split, seed=seed, num_classes=num_classes
        )
    if dataset:
        if y is not None:
            raise ValueError("Argument `y` must be None for a tf.data.Dataset, which yields (x, y) pairs.")
        x, y = arrays.dataset_arrays(x, steps)
    elif y is None:
        raise ValueError("Argument `y` is required with array features `x`: the labels, [n] class indices.")
    return lambda seed: arrays.array_splits(
        x, y, test_fraction=test_split, validation_fraction=validation_split, seed=seed, num_classes=num_classes
    )


def is_table(x) -> bool:
    return type(x).__name__ == "DataFrame" and hasattr(x, "columns")
