"""`Splits`, the loaders' result, and the split machinery: the stratified split, its checks, the standardisation."""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from keras_ils import _warnings
from keras_ils._checks import number_in

DEFAULT_VALIDATION_FRACTION = 0.2
MIN_VALIDATION_PER_CLASS = 5


class Splits(NamedTuple):
    """What every loader returns: unbatched `(x, y)` datasets in a fixed order and what they hold.

    Attributes:
        train, validation, test: unbatched `(x, y)` datasets, features
            float32 (standardised with the training split's statistics),
            labels int32.
        num_classes: `K`.
        input_shape: one example's feature shape, e.g. `(2,)` or `(32, 32, 3)`.
        name: the dataset's name (`"synthetic"`, the tfds name, the file's name).
        test_groups: `{name: boolean mask over the test set}`, e.g. the
            synthetic task's dense and sparse regions; `{}` for most data.
        preprocessing: how the stored features became the splits' features,
            `{"mean": [...], "scale": [...]}` per feature (channel, for
            images): `(stored - mean) / scale`; `None` when they are used as
            stored. `preprocessing_layer` makes it a Keras layer, so a saved
            model can take the stored features.
        feature_space: for a table (`tabular.table_splits`), the adapted
            `keras.utils.FeatureSpace` that encodes its raw columns (a dict
            `{column: values}`) as the splits' features; `None` otherwise.
        class_names: the target's class names, class `i` being
            `class_names[i]` (a table's sorted distinct target values);
            `None` when the labels are class indices already.
        calibration: validation examples held out from every selection and
            fit, where the main job calibrates its conformal prediction sets
            (`keras_ils.comparison.main_job.conformal_split`); `None` (what
            the loaders return) when there are none.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    test: tf.data.Dataset
    num_classes: int
    input_shape: tuple
    name: str
    test_groups: dict  # {name: boolean mask over the test set}, e.g. the synthetic dense/sparse split
    preprocessing: dict | None = None  # {"mean": [...], "scale": [...]}: (stored - mean) / scale, per feature
    feature_space: keras.utils.FeatureSpace | None = None  # a table's raw columns -> the features
    class_names: tuple | None = None  # class i's name, e.g. a table's target value
    calibration: tf.data.Dataset | None = None  # carved from validation for conformal sets, seen by nothing else

    @property
    def is_image(self) -> bool:
        """Whether the examples are images (`[height, width, channels]`)."""
        return len(self.input_shape) == 3


class SmallValidationWarning(UserWarning):
    """A class with fewer than `MIN_VALIDATION_PER_CLASS` validation examples."""


def check_fraction(fraction: float, name: str = "validation_fraction") -> None:
    """`fraction` must be a float in (0, 1) (a `ValueError` naming the argument `name` otherwise)."""
    number_in(name, fraction, 0, 1, low_open=True, high_open=True)


def check_num_classes(num_classes: int | None) -> None:
    """`num_classes` must be `None` (read from the labels) or an int >= 2."""
    if num_classes is None:
        return
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(
            "Invalid value for argument `num_classes`. Expected an integer >= 2 or None (read from the labels). "
            f"Received: num_classes={num_classes!r}"
        )


def check_known_classes(source: str, known: int, num_classes: int | None) -> None:
    """`num_classes`, when given, must equal the `known` class count of `source` (a dataset's name)."""
    if num_classes is not None and num_classes != known:
        raise ValueError(
            f"Invalid value for argument `num_classes`. Expected {known}: {source} has {known} classes. "
            f"Received: num_classes={num_classes!r}"
        )


def standardise(
    x_train, *others, names: tuple = ("x_train", "x_validation", "x_test"), statistics: tuple | None = None
) -> list:
    """Centres and scales every feature (channel, for images) by the training split's mean and standard deviation.

    A feature constant in the training split is only centred (scale 1, as
    scikit-learn's `StandardScaler` does): dividing by its zero spread would
    blow a value it takes elsewhere (a pixel that is blank in every training
    digit but one test digit) up to ~1e7 and the test NLL with it.

    The statistics and the scaling are computed in float64 and the results
    stored as float32. In float32, features of about 1e19 or more overflow
    (their squares pass float32's largest number, 3.4e38): the standard
    deviation becomes infinite and every feature 0, in silence. Features that
    even float64 cannot standardise (a mean or standard deviation that is not
    finite, from values beyond about 1e154) or whose standardised values do
    not fit float32 are refused.

    Args:
        x_train: `[n, features...]` the training split, whose statistics scale every array.
        *others: more arrays shaped like `x_train` (validation, test).
        names: the arrays' names in error messages, `x_train`'s first.
            Defaults to `("x_train", "x_validation", "x_test")`.
        statistics: `feature_statistics(x_train)` when the caller already
            has them (they are not computed again). Defaults to `None`.

    Returns:
        `[x_train, *others]` standardised, float32.

    Raises:
        ValueError: naming the array whose standardised features are not finite.

    Example:

    >>> train, test = standardise(np.array([[0.0, 1.0], [2.0, 1.0]]), np.array([[1.0, 3.0]]))
    >>> train.tolist(), test.tolist()
    ([[-1.0, 0.0], [1.0, 0.0]], [[0.0, 2.0]])
    >>> standardise(np.array([[1e30], [3e30]], dtype="float32"))[0].tolist()   # 0 in float32 arithmetic
    [[-1.0], [1.0]]
    """
    mean, scale = feature_statistics(x_train, names[0]) if statistics is None else statistics
    scaled = []
    for i, x in enumerate((x_train, *others)):
        with np.errstate(over="ignore", invalid="ignore"):
            x = ((x - mean) / scale).astype(np.float32)
        if not np.isfinite(x).all():
            name = names[i] if i < len(names) else f"array {i}"
            raise ValueError(
                f"Invalid value for argument `{name}`. Expected features that stay within float32's range once "
                f"standardised with {names[0]}'s mean and standard deviation. Received: "
                f"{int((~np.isfinite(x)).sum())} values that do not"
            )
        scaled.append(x)
    return scaled


def invalid_array(name, source, expected, received) -> ValueError:
    """The `ValueError` of an array `name` of `source` that is not what `expected` says."""
    return ValueError(f"Invalid value for array `{name}` in {source}. Expected {expected}. Received: {received}.")


def check_features(x, name: str, source: str) -> None:
    """Features `x` must be real, finite numbers shaped `[n, features...]` with an example: a `ValueError` naming
    the array `name` of `source` otherwise."""
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating) or x.dtype == bool):
        raise invalid_array(name, source, "real numbers (an integer, float or bool dtype)", f"dtype {x.dtype}")
    if x.ndim < 2:
        raise invalid_array(
            name,
            source,
            f"shape [n, features] (one feature per example is [n, 1]: {name}[:, None])",
            f"shape {x.shape}",
        )
    if x.size == 0:
        raise invalid_array(name, source, "at least one example with at least one feature", f"shape {x.shape}")
    if np.issubdtype(x.dtype, np.floating):
        nan, inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
        if nan or inf:
            raise invalid_array(name, source, "finite numbers", f"{nan} NaN and {inf} inf among its {x.size} values")


def check_labels(y, x, name: str, x_name: str, source: str) -> None:
    """Labels `y` must be 1-D integer class indices >= 0, one per row of `x` (the array `x_name`)."""
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise invalid_array(
            name,
            source,
            "a 1-D array of integer class indices (one-hot rows: y.argmax(1); whole floats: y.astype(int))",
            f"dtype {y.dtype}, shape {y.shape}",
        )
    if len(y) != len(x):
        raise invalid_array(
            name, source, f"one label per row of {x_name}", f"{x_name} has {len(x)} rows but {name} has {len(y)}"
        )
    negative = y < 0
    if negative.any():
        raise invalid_array(
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


def checked_classes(y_train, y_test, num_classes, path):
    """`K`: `num_classes` or one more than the largest label, once every class has training examples and
    `y_test` holds only classes `y_train` has."""
    largest = int(max(y_train.max(), y_test.max()))
    if num_classes is not None and largest >= num_classes:
        name, y = ("y_train", y_train) if y_train.max() >= num_classes else ("y_test", y_test)
        raise invalid_array(
            name,
            path,
            f"class indices in [0, {num_classes}) (num_classes={num_classes})",
            f"{int((y >= num_classes).sum())} labels >= {num_classes} (largest {int(y.max())})",
        )
    num_classes = num_classes or largest + 1
    if num_classes < 2:
        raise invalid_array("y_train", path, "at least 2 classes", "only class 0")
    present = np.unique(y_train)
    unseen = np.setdiff1d(np.unique(y_test), present)
    if len(unseen):
        raise invalid_array(
            "y_test",
            path,
            "only classes that y_train has examples of",
            f"labels {unseen.tolist()[:8]} that never appear in y_train (a model cannot learn them)",
        )
    if len(present) < num_classes:
        raise invalid_array(
            "y_train",
            path,
            f"at least one example of every class in [0, {num_classes})",
            f"no example of class(es) {_missing_classes(present, num_classes)} ({num_classes - len(present)} of "
            f"{num_classes} classes; labels must be 0..K-1 with none skipped: renumber them, e.g. with "
            "np.unique(y, return_inverse=True))",
        )
    return num_classes


def feature_statistics(x_train, name: str = "x_train") -> tuple[np.ndarray, np.ndarray]:
    """`(mean, scale)` per feature (channel, for images) of `x_train`, in float64: what `standardise` divides by.

    `scale` is the standard deviation, or 1 for a feature constant in
    `x_train`. Features whose mean or standard deviation are not finite in
    float64 are refused with a `ValueError` naming `name`.

    Example:

    >>> mean, scale = feature_statistics(np.array([[0.0, 1.0], [2.0, 1.0]]))
    >>> mean.tolist(), scale.tolist()
    ([1.0, 1.0], [1.0, 1.0])
    """
    axes = tuple(range(x_train.ndim - 1))
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.mean(x_train, axis=axes, dtype=np.float64)
        std = np.std(x_train, axis=axes, dtype=np.float64)
    unscalable = ~(np.isfinite(mean) & np.isfinite(std))
    if unscalable.any():
        raise ValueError(
            f"Invalid value for argument `{name}`. Expected features whose mean and standard deviation are "
            "finite in float64 (magnitudes below about 1e154). Received: "
            f"{int(unscalable.sum())} of {unscalable.size} features that are not (largest magnitude "
            f"{float(np.max(np.abs(x_train))):.3g})"
        )
    scale = np.where(std > 1e-12 * np.maximum(np.abs(mean), 1.0), std, 1.0)
    return mean, scale


def standardised_splits(features, labels, num_classes: int, name: str, names: tuple) -> Splits:
    """`Splits` of train, validation and test `features` and integer `labels`, the features standardised with the
    training part's statistics (`Splits.preprocessing` holds them); `names` name the three parts in errors.

    Example:

    >>> parts = [np.array([[0.0], [2.0]]), np.array([[1.0]]), np.array([[3.0]])]
    >>> splits = standardised_splits(parts, [np.array([0, 1]), np.array([0]), np.array([1])], 2, "d", ("x",) * 3)
    >>> splits.preprocessing, [float(x[0]) for x, _ in splits.test]
    ({'mean': [1.0], 'scale': [1.0]}, [2.0])
    """
    mean, scale = feature_statistics(features[0], names[0])
    parts = standardise(*features, names=names, statistics=(mean, scale))
    sets = [tf.data.Dataset.from_tensor_slices((x, y.astype(np.int32))) for x, y in zip(parts, labels, strict=True)]
    preprocessing = {"mean": mean.tolist(), "scale": scale.tolist()}
    return Splits(*sets, num_classes, tuple(parts[0].shape[1:]), name, {}, preprocessing)


def preprocessing_layer(preprocessing: dict | None):
    """The Keras layer that maps stored features to a model's inputs as `Splits.preprocessing` says, or `None`.

    A `keras.layers.Normalization` holding `mean` and `scale ** 2` as its mean
    and variance: `(x - mean) / scale` (Keras floors the scale at
    `keras.config.epsilon()`), so a model that starts with it takes the
    features as the data file stores them.

    Example:

    >>> layer = preprocessing_layer({"mean": [1.0, 2.0], "scale": [2.0, 1.0]})
    >>> keras.ops.convert_to_numpy(layer(np.array([[3.0, 2.0]]))).tolist()
    [[1.0, 0.0]]
    """
    if preprocessing is None:
        return None
    mean, scale = (np.asarray(preprocessing[key], np.float64) for key in ("mean", "scale"))
    return keras.layers.Normalization(mean=mean, variance=scale**2, name="preprocessing")


def taking_stored_features(model, splits):
    """`model` preceded by the data's preprocessing, so that the saved model takes the features as the data stores
    them; `model` itself when the features are used as stored.

    The preprocessing is `Splits.preprocessing`'s standardisation, or for a
    table `Splits.feature_space`: the wrapped model then takes the table's raw
    columns, a dict `{column: [n] values}`, as Keras' FeatureSpace models do.
    """
    if splits.feature_space is not None:
        return _taking_raw_columns(model, splits.feature_space)
    layer = preprocessing_layer(splits.preprocessing)
    if layer is None:
        return model
    inputs = keras.Input(shape=splits.input_shape, name="features")
    return keras.Model(inputs, model(layer(inputs)), name=model.name)


def _taking_raw_columns(model, feature_space):
    """`model` preceded by `feature_space`'s encoding, a sub-model named "preprocessing", on one input per column."""
    columns = dict(feature_space.get_inputs())  # a plain dict: Keras warns of a tracked one's "structure" per call
    preprocessing = keras.Model(columns, feature_space.get_encoded_features(), name="preprocessing")
    inputs = {key: keras.Input(shape=(1,), dtype=column.dtype, name=key) for key, column in columns.items()}
    if model.name in inputs:  # a functional model's layer names are unique: a column named like the model
        model = keras.Sequential([model], name=f"{model.name}_model")
    return keras.Model(inputs, model(preprocessing(inputs)), name=model.name)


def as_trained(saved):
    """The model inside a saved `taking_stored_features` model, which takes the splits' (preprocessed) features."""
    wraps = len(saved.layers) >= 3 and saved.layers[-2].name == "preprocessing"
    return saved.layers[-1] if wraps else saved


def _class(c, class_names=None) -> str:
    """'class 2', or "class 2 ('setosa')" where the classes have names."""
    return f"class {c}" if class_names is None else f"class {c} ({class_names[c]!r})"


def _class_list(counts, classes, limit=8, class_names=None):
    """'class 2 (3), class 5 (1)' for the first `limit` classes, then '... and N more'."""
    shown = ", ".join(f"{_class(c, class_names)} ({int(counts[c])})" for c in classes[:limit])
    return shown + (f" and {len(classes) - limit} more" if len(classes) > limit else "")


def check_split(source: str, train_counts, validation_counts, advice: str, class_names=None) -> None:
    """Every class in training and validation (else ValueError), >= 5 validation examples (else UserWarning).

    Args:
        source: the dataset's name in the messages.
        train_counts, validation_counts: `[K]` examples per class in each split.
        advice: what the user can do, appended to the messages.
        class_names: `[K]` names the messages give beside the class
            indices. Defaults to `None`: indices only.

    Raises:
        ValueError: a class with no training or no validation example.

    Example:

    >>> check_split("d.npz", np.array([4, 3]), np.array([2, 0]), "More data helps.")
    Traceback (most recent call last):
    ...
    ValueError: d.npz: the validation split has no example of class 1 (training 3, validation 0). The teacher's \
temperature T* and the model selection need every class in both splits. More data helps.
    """
    for counts, split in ((train_counts, "training"), (validation_counts, "validation")):
        absent = np.flatnonzero(counts == 0)
        if len(absent):
            c, others = int(absent[0]), absent[1:].tolist()
            more = f", nor of classes {others[:8]}{' ...' if len(others) > 8 else ''}" if others else ""
            raise ValueError(
                f"{source}: the {split} split has no example of {_class(c, class_names)} (training "
                f"{int(train_counts[c])}, "
                f"validation {int(validation_counts[c])}){more}. The teacher's temperature T* and the model "
                "selection need every class in both splits." + (f" {advice}" if split == "validation" else "")
            )
    few = np.flatnonzero(validation_counts < MIN_VALIDATION_PER_CLASS)
    if len(few):
        _warnings.warn(
            f"{source}: the validation split has fewer than {MIN_VALIDATION_PER_CLASS} examples of "
            f"{_class_list(validation_counts, few, class_names=class_names)}. The teacher's temperature T*, each "
            "model's best epoch and the hyperparameter choice rest on that many examples of those classes, so expect "
            f"noisy calibration for them. {advice}",
            SmallValidationWarning,
        )


def stratified_split(y, num_classes: int, validation_fraction: float, seed: int) -> tuple:
    """`(train_rows, validation_rows)`: a seeded permutation of each class, its share in proportion.

    The validation split holds about `round(validation_fraction * len(y))`
    examples (more where the minimum of one per class needs them, fewer where
    the classes have no room to give more: never all of a class), shared among
    the classes in proportion to their counts (largest remainders): at least
    one of every class with two or more examples, never all of a class.

    Example:

    >>> y = np.array([0] * 8 + [1] * 2)
    >>> train_rows, validation_rows = stratified_split(y, 2, 0.2, seed=0)
    >>> np.bincount(y[validation_rows]).tolist(), len(train_rows)
    ([1, 1], 8)
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


def split_rows(
    y, num_classes: int, *, test_fraction: float, validation_fraction: float, seed: int, source: str, class_names=None
) -> tuple:
    """`(train_rows, validation_rows, test_rows)`: a seeded stratified test split, then validation from the rest.

    `test_fraction` is the test set's share of all rows, `validation_fraction`
    validation's share of the rest, both drawn by `stratified_split` with
    `seed`. A class needs three rows, one for each split: one with fewer is a
    `ValueError` from `check_split` (a class that is short of validation
    examples is short of training ones too).

    Example:

    >>> y = np.array([0] * 50 + [1] * 25)
    >>> train, validation, test = split_rows(y, 2, test_fraction=0.2, validation_fraction=0.25, seed=0,
    ...                                      source="t.csv")
    >>> [np.bincount(y[rows]).tolist() for rows in (train, validation, test)]
    [[30, 15], [10, 5], [10, 5]]
    """
    check_fraction(test_fraction, "test_fraction")
    check_fraction(validation_fraction)
    rest, test = stratified_split(y, num_classes, test_fraction, seed)
    train, validation = (rest[rows] for rows in stratified_split(y[rest], num_classes, validation_fraction, seed))
    check_split(
        source,
        np.bincount(y[train], minlength=num_classes),
        np.bincount(y[validation], minlength=num_classes),
        "Give the rare classes more examples (each class needs 3 or more: one for training, validation and test).",
        class_names,
    )
    return train, validation, test


__all__ = [
    "DEFAULT_VALIDATION_FRACTION",
    "MIN_VALIDATION_PER_CLASS",
    "SmallValidationWarning",
    "Splits",
    "check_features",
    "check_fraction",
    "check_known_classes",
    "check_labels",
    "check_num_classes",
    "check_split",
    "checked_classes",
    "invalid_array",
    "feature_statistics",
    "as_trained",
    "preprocessing_layer",
    "split_rows",
    "standardise",
    "standardised_splits",
    "stratified_split",
    "taking_stored_features",
]
