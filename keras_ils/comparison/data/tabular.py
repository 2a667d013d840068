"""Tabular data the Keras way: a CSV file or a pandas DataFrame with a target column, as `Splits`.

`table_splits(table, target)` reads the table, label-encodes the target
column (its sorted distinct values are the classes, kept as
`Splits.class_names`), splits the rows by class into seeded train,
validation and test sets, and types every other column with
`keras.utils.FeatureSpace`, adapted on the training rows only:

| column                                                          | FeatureSpace feature, what the model sees      |
|-----------------------------------------------------------------|------------------------------------------------|
| floats; integers that are not categories                        | `float_normalized`: standardised (training     |
|                                                                 | mean and standard deviation; a column constant |
|                                                                 | in training is only centred)                   |
| integers >= 0 with at most `MAX_INTEGER_CATEGORIES` (10)        | `integer_categorical`: one-hot over the        |
| distinct values                                                 | training values, plus one for an unseen value  |
| booleans (a bool column; a CSV column of only true/false)       | `integer_categorical` on 0/1                   |
| strings (any other CSV column; a DataFrame's str, object or     | `string_categorical`: one-hot, as above        |
| category column); any column named in `categorical`, as text    |                                                |

A CSV is read with python's `csv` module, so pandas stays optional; its
cells are typed by what they hold (a column whose every cell is an integer
is integers, and so on). A DataFrame's columns are typed by their dtypes.
`categorical=[column, ...]` reads columns as categories whatever they hold
(their values as text). A column of text whose cells are mostly numbers, a
few typos (`3.1O`) away from a column of numbers, is refused naming the
column and the cells: correct them, or declare the column categorical.
The splits' features are the FeatureSpace's concatenated float32 vectors,
and `Splits.feature_space` keeps it: a model saved through
`splits.taking_stored_features` takes the raw columns, a dict
`{column: values}` (`model_inputs` reads one from a CSV file or a
DataFrame). A column's key there is its name with `_` for every character
other than ASCII letters, digits, `_`, `.` and `-` (TensorFlow's name
scopes hold no others): `od280/od315 (mean)` is `od280_od315__mean_`.
"""

from __future__ import annotations

import csv
import os
import re
import sys
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_ils.comparison.data.splits import (
    DEFAULT_VALIDATION_FRACTION,
    Splits,
    check_fraction,
    feature_statistics,
    split_rows,
)

__all__ = ["DEFAULT_TEST_FRACTION", "MAX_INTEGER_CATEGORIES", "MISSING_MARKERS", "model_inputs", "table_splits"]

DEFAULT_TEST_FRACTION = 0.2
MAX_INTEGER_CATEGORIES = 10  # integers >= 0 with at most this many distinct values are categories
# the cells pandas.read_csv reads as missing by default
MISSING_MARKERS = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA"}
    | {"NULL", "NaN", "None", "n/a", "nan", "null"}
)
_RESERVED = "preprocessing"  # the saved model's encoding sub-model (`splits.taking_stored_features`)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _listed(names, limit=20) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _csv_cells(path: str) -> tuple[dict, list]:
    """`({column: [cells as text]}, [line of each row])` of a CSV file with a header line (blank lines skipped,
    cells stripped)."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory, not a .csv file.")
    if not os.path.isfile(path):
        raise ValueError(f"No such .csv file: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            header = [name.strip() for name in next(reader, [])]
            rows, lines = [], []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise ValueError(
                        f"{path}, line {reader.line_num}: {len(row)} cells where the header line has {len(header)}."
                    )
                rows.append([cell.strip() for cell in row])
                lines.append(f"line {reader.line_num}")
    except (csv.Error, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a readable CSV file of UTF-8 text ({error}).") from error
    if not rows:
        raise ValueError(f"{path}: expected a header line of column names, then at least one row. Received none.")
    _check_names(header, path)
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}, lines


def _check_names(names, source):
    """Column names must be non-empty and unique, also as keys (`_key`)."""
    if "" in names:
        raise ValueError(f"{source}: column {names.index('') + 1} has no name. Name every column in the header line.")
    keys = [_key(name) for name in names]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(
            f"{source}: the column names {_listed(repeated)} appear more than once, once every character other "
            "than letters, digits, '_', '.' and '-' is '_' (as the saved models' inputs are named). Give every "
            "column its own name."
        )


def _key(name) -> str:
    """A column's key in the FeatureSpace and the saved model's inputs: its name, `_` for each character that a
    TensorFlow name scope cannot hold (`od280/od315 (mean)` -> `od280_od315__mean_`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))


def _parsed(cells: list) -> np.ndarray:
    """A CSV column's cells as booleans (only true/false), int64, float64 or, failing those, strings."""
    if {cell.lower() for cell in cells} <= {"true", "false"}:
        return np.array([cell.lower() == "true" for cell in cells])
    for kind, dtype in ((int, np.int64), (float, np.float64)):
        try:
            return np.array([kind(cell) for cell in cells], dtype=dtype)
        except (ValueError, OverflowError):
            pass
    return np.array(cells, dtype=object)


def _frame_column(series, name: str) -> np.ndarray:
    """A DataFrame column by its dtype: bool, int64, float64, or strings (str, object, category)."""
    kind = series.dtype.kind
    if kind in "biuf":
        return series.to_numpy(dtype={"b": bool, "i": np.int64, "u": np.int64, "f": np.float64}[kind])
    if kind in "OSU":
        return np.array([str(value) for value in series], dtype=object)
    raise ValueError(
        "Invalid value for argument `table`. Expected columns of numbers, booleans or strings. Received: column "
        f"{name!r} of dtype {series.dtype}"
    )


def _raw_columns(table) -> tuple[dict, str, Callable]:
    """`({column: raw column}, name, where)`: a CSV's cells as text, a DataFrame's columns as Series, missing
    refused; `where(i)` names row `i` in messages (`"line 7"`, `"row 'a'"`)."""
    if isinstance(table, (str, os.PathLike)):
        path = os.fspath(table)
        raw, lines = _csv_cells(path)
        where = lines.__getitem__
        missing = {name: sum(cell in MISSING_MARKERS for cell in cells) for name, cells in raw.items()}
        source = os.path.basename(path)
    else:
        pandas = sys.modules.get("pandas")  # a DataFrame implies pandas is loaded: never imported here
        if pandas is None or not isinstance(table, pandas.DataFrame):
            raise TypeError(
                "Invalid type for argument `table`. Expected a path to a CSV file or a pandas DataFrame. "
                f"Received: table of type {type(table).__name__}"
            )
        if table.empty:
            raise ValueError(
                f"Invalid value for argument `table`. Expected rows and columns. Received: a DataFrame of shape "
                f"{table.shape}"
            )
        _check_names([str(name) for name in table.columns], "The DataFrame")
        raw = {str(name): table[name] for name in table.columns}
        where = lambda i: f"row {_plain(table.index[i])!r}"  # noqa: E731
        missing = {name: int(column.isna().sum()) for name, column in raw.items()}
        source = "dataframe"
    missing = [(name, count) for name, count in missing.items() if count]
    if missing:
        counts = ", ".join(f"{count} in column {name!r}" for name, count in missing[:8])
        raise ValueError(
            f"Invalid value for argument `table`. Expected no missing values. Received: {source} has "
            f"{counts.replace(' in', ' missing values in', 1)} (of {len(next(iter(raw.values())))} rows). Fill or "
            "drop them first (e.g. DataFrame.fillna or DataFrame.dropna)."
        )
    return raw, source, where


def _plain(value):
    """A numpy scalar as the Python value it holds (its repr is `102`, not `np.int64(102)`)."""
    return value.item() if isinstance(value, np.generic) else value


def _typed(raw, name: str, category: bool = False) -> np.ndarray:
    """The column's values: a declared `category`'s as text, others by `_parsed` (a CSV) or `_frame_column`."""
    if category:
        return np.array(raw if isinstance(raw, list) else [str(value) for value in raw], dtype=object)
    return _parsed(raw) if isinstance(raw, list) else _frame_column(raw, name)


def _categories(categorical, names, target) -> frozenset:
    """The columns `categorical` declares categories (one name, or a list of names), checked against `names`."""
    if categorical is None:
        return frozenset()
    declared = [categorical] if isinstance(categorical, str) else list(categorical)
    others = [name for name in names if name != target]
    if any(str(name) not in others for name in declared):
        raise ValueError(
            f"Invalid value for argument `categorical` (on the command line: --categorical). Expected feature "
            f"columns of the table (the target {target!r} is read as classes): {_listed(others)}. Received: "
            f"categorical={categorical!r}"
        )
    return frozenset(map(str, declared))


def _check_numbers(name, values, where, source) -> None:
    """Refuses a column of text whose cells are mostly numbers: a few typos (`3.1O`) that made it a category."""
    if values.dtype != object:
        return
    distinct, inverse = np.unique(values, return_inverse=True)
    numbers = np.array([_is_number(text) for text in distinct])[inverse.reshape(-1)]
    bad = np.flatnonzero(~numbers)
    if not len(bad) or 2 * len(bad) >= len(values):  # no typo, or a column of text
        return
    cells = ", ".join(f"{values[i]!r} ({where(i)})" for i in bad[:5]) + (" ..." if len(bad) > 5 else "")
    count = f"{len(bad)} cell that is" if len(bad) == 1 else f"{len(bad)} cells that are"
    raise ValueError(
        f"Invalid value for argument `table`. Expected numbers in column {name!r} of {source}, as {int(numbers.sum())} "
        f"of its {len(values)} cells are. Received: {count} not: {cells}. Correct them, or declare the column a "
        f"category, `categorical=[{name!r}]` (on the command line: --categorical {name!r}), to read every cell as "
        "text."
    )


def _is_number(text) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _target_name(target, names) -> str:
    if str(target) not in names:
        raise ValueError(
            f"Invalid value for argument `target`. Expected one of the table's columns: {_listed(list(names))}. "
            f"Received: target={target!r}"
        )
    return str(target)


def _encoded_target(values: np.ndarray, name: str) -> tuple[np.ndarray, tuple]:
    """`(y, class_names)`: the target's values as indices into its sorted distinct values."""
    classes, y = np.unique(values, return_inverse=True)
    class_names = tuple(map(_plain, classes))
    if len(class_names) < 2:
        raise ValueError(
            f"Invalid value for argument `target`. Expected a column with at least 2 classes. Received: column "
            f"{name!r} holds only {class_names[0]!r} ({len(values)} rows)"
        )
    return y.astype(np.int32), class_names


def _kind(values: np.ndarray) -> str:
    """The column's FeatureSpace feature (see the module docstring)."""
    if values.dtype == bool:
        return "integer_categorical"
    if values.dtype.kind == "i":
        few = len(np.unique(values)) <= MAX_INTEGER_CATEGORIES
        return "integer_categorical" if few and values.min() >= 0 and values.max() < 2**31 else "float_normalized"
    return "float_normalized" if values.dtype.kind == "f" else "string_categorical"


_DTYPES = {"float_normalized": np.float32, "integer_categorical": np.int32, "string_categorical": object}


def _features(columns: dict, target: str, source: str) -> tuple[dict, dict]:
    """`({key: values as the model takes them}, {key: kind})` of the feature columns, checked."""
    if not columns:
        raise ValueError(
            f"Invalid value for argument `table`. Expected at least one feature column besides the target "
            f"{target!r}. Received: {source} has no other column"
        )
    if all(len(np.unique(values)) == 1 for values in columns.values()):
        constant = [f"{name}={values[0]!r}" for name, values in columns.items()]
        raise ValueError(
            "Invalid value for argument `table`. Expected at least one feature column whose values vary. Received: "
            f"every feature column of {source} is constant ({', '.join(constant[:8])}); nothing can predict "
            f"{target!r}"
        )
    if _RESERVED in map(_key, columns):
        raise ValueError(f"{source}: rename the column {_RESERVED!r}: a saved model names its encoding so.")
    kinds = {_key(name): _kind(values) for name, values in columns.items()}
    for name, values in columns.items():
        if kinds[_key(name)] == "float_normalized":
            bad = int((~(np.abs(values) <= _FLOAT32_MAX)).sum())  # NaN fails the test too
            if bad:
                raise ValueError(
                    f"Invalid value for argument `table`. Expected finite numbers within float32's range. Received: "
                    f"column {name!r} of {source} has {bad} values that are not"
                )
    return {_key(name): values.astype(_DTYPES[kinds[_key(name)]]) for name, values in columns.items()}, kinds


def _adapted_feature_space(features: dict, kinds: dict, train_rows) -> keras.utils.FeatureSpace:
    """The FeatureSpace of the columns, its statistics and vocabularies from the training rows only."""
    space = keras.utils.FeatureSpace
    specs = {}
    for key, kind in kinds.items():
        if kind == "float_normalized":  # the training rows' statistics, a constant column only centred
            mean, scale = feature_statistics(features[key][train_rows, None].astype(np.float64), key)
            layer = keras.layers.Normalization(mean=mean, variance=scale**2, name=f"{key}_preprocessor")
            specs[key] = space.feature(dtype="float32", preprocessor=layer, output_mode="float")
        else:
            specs[key] = getattr(space, kind)(name=key)
    feature_space = space(specs, output_mode="concat")
    feature_space.adapt(tf.data.Dataset.from_tensor_slices({k: v[train_rows] for k, v in features.items()}).batch(4096))
    return feature_space


def table_splits(
    table,
    target: str,
    *,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    seed: int = 0,
    name: str | None = None,
    categorical: Sequence[str] | str | None = None,
) -> Splits:
    """A table's rows as seeded, stratified train/validation/test `Splits`, its columns encoded by a FeatureSpace.

    Args:
        table: a path to a CSV file (a header line of column names, then
            one row per example) or a pandas DataFrame. No missing values.
        target: the column to predict: its sorted distinct values are the
            classes `0..K-1` (`Splits.class_names`), each with 3 rows or more.
        validation_fraction: validation's share of the rows left once the
            test rows are set aside, in `(0, 1)`. Defaults to `0.2`.
        test_fraction: the test set's share of all rows, in `(0, 1)`.
            Defaults to `0.2`.
        seed: seeds both splits. Defaults to `0`.
        name: the data's name in the results and messages. Defaults to
            `None`: the file's name, or `"dataframe"`.
        categorical: a feature column, or a list of them, to read as a
            category whatever its cells hold (`string_categorical` on their
            text), e.g. codes that look like numbers. Defaults to `None`.

    Returns:
        `Splits` whose features are the FeatureSpace's float32 vectors,
        with `feature_space` and `class_names` set.

    Raises:
        ValueError: naming the column: missing values, an unknown `target`,
            a one-class target, a class with fewer than 3 rows, no feature
            column that varies, a column of numbers with a few cells that are
            not (`3.1O`: named with their lines or rows; a column not
            declared in `categorical` whose cells are mostly numbers).

    Example:

    >>> import pandas as pd
    >>> rng = np.random.default_rng(0)
    >>> df = pd.DataFrame({"size": rng.normal(size=120), "colour": rng.choice(["red", "blue"], 120),
    ...                    "label": np.where(np.arange(120) % 3 == 0, "yes", "no")})
    >>> splits = table_splits(df, "label", seed=0)
    >>> splits.class_names, splits.input_shape, [int(d.cardinality()) for d in splits[:3]]
    (('no', 'yes'), (4,), [77, 19, 24])
    """
    check_fraction(validation_fraction)
    check_fraction(test_fraction, "test_fraction")
    raw, source, where = _raw_columns(table)
    target = _target_name(target, raw)
    name = name or source
    categories = _categories(categorical, raw, target)
    columns = {column: _typed(values, column, column in categories) for column, values in raw.items()}
    y, class_names = _encoded_target(columns.pop(target), target)
    for column, values in columns.items():
        if column not in categories and str(getattr(raw[column], "dtype", "")) != "category":  # declared too
            _check_numbers(column, values, where, name)
    features, kinds = _features(columns, target, name)
    train, validation, test = split_rows(
        y,
        len(class_names),
        test_fraction=test_fraction,
        validation_fraction=validation_fraction,
        seed=seed,
        source=f"{name} (target {target!r})",
        class_names=class_names,
    )
    feature_space = _adapted_feature_space(features, kinds, train)
    x = np.asarray(keras.ops.convert_to_numpy(feature_space(features)), dtype=np.float32)
    make = lambda rows: tf.data.Dataset.from_tensor_slices((x[rows], y[rows]))  # noqa: E731
    return Splits(
        make(train),
        make(validation),
        make(test),
        len(class_names),
        (x.shape[1],),
        name,
        {},
        feature_space=feature_space,
        class_names=class_names,
    )


def model_inputs(table, model) -> dict:
    """The columns of a CSV file or a DataFrame as a model saved from table `Splits` takes them.

    `{key: [n] values}` for each of `model`'s inputs, each column read as
    the model's input dtype (a CSV's cells as text where it takes strings);
    other columns (the target among them) are left out.

    Args:
        table: a path to a CSV file or a pandas DataFrame, with the columns
            the model was trained on (no missing values).
        model: a model that takes a dict of columns, e.g. a loaded
            `model_*.keras` of a `keras-ils run --dataset table.csv`.

    Returns:
        A dict to pass to `model.predict` or `model(...)`.
    """
    if not isinstance(model.input, dict):
        raise ValueError(
            "Invalid value for argument `model`. Expected a model that takes a dict of columns, as the models "
            f"saved from a table's Splits do. Received: a model whose input is {model.input}"
        )
    raw, source, _ = _raw_columns(table)
    keyed = {_key(name): values for name, values in raw.items()}
    missing = [key for key in model.input if key not in keyed]
    if missing:
        raise ValueError(
            f"Invalid value for argument `table`. Expected the columns the model takes, {_listed(list(model.input))}. "
            f"Received: {source} lacks {_listed(missing)}"
        )
    inputs = {}
    for key, tensor in model.input.items():
        if tensor.dtype == "string":
            values = keyed[key] if isinstance(keyed[key], list) else [str(value) for value in keyed[key]]
            inputs[key] = np.array(values, dtype=object)
            continue
        values = _typed(keyed[key], key)
        if values.dtype == object:
            raise ValueError(
                f"Invalid value for argument `table`. Expected numbers in column {key!r}, as the model was trained "
                f"on. Received: {source}'s column {key!r} holds text, e.g. {values[0]!r}"
            )
        inputs[key] = values.astype(tensor.dtype)
    return inputs
