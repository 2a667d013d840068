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


def splits_maker(x, y, target, validation_split, test_split, num_classes) -> Callable:
    """`seed -> Splits` of the data in whatever form `compare` takes them."""
    if is_table(x) or (isinstance(x, (str, os.PathLike)) and str(x).lower().endswith(".csv")):
        if y is not None:
            raise ValueError("Argument `y` must be None for a table: name its label column with `target=`.")
        return lambda seed: tabular.table_splits(
            x, target, validation_fraction=validation_split, test_fraction=test_split, seed=seed
        )
    if target is not None:
        raise ValueError(
            f"Argument `target` names a column of a table (a pandas DataFrame or a .csv path); received x of type "
            f"{type(x).__name__}. Received: target={target!r}"
        )
    if isinstance(x, (str, os.PathLike)):  # the CLI's names: "synthetic", "tfds:NAME", a .npz path
        if y is not None:
            raise ValueError(f"Argument `y` must be None for the dataset {x!r}, which holds its labels.")
        return lambda seed: datasets.load(
            str(x), validation_fraction=validation_split, seed=seed, num_classes=num_classes
        )
    if isinstance(x, tf.data.Dataset):
        if y is not None:
            raise ValueError("Argument `y` must be None for a tf.data.Dataset, which yields (x, y) pairs.")
        x, y = arrays.dataset_arrays(x)
    elif y is None:
        raise ValueError("Argument `y` is required with array features `x`: the labels, [n] class indices.")
    return lambda seed: arrays.array_splits(
        x, y, test_fraction=test_split, validation_fraction=validation_split, seed=seed, num_classes=num_classes
    )


def is_table(x) -> bool:
    return type(x).__name__ == "DataFrame" and hasattr(x, "columns")
