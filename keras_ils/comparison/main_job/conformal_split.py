"""The conformal calibration split: validation examples that no selection or fitting step of the main job sees.

Split conformal prediction keeps its guarantee, coverage of at least `1 - alpha` on the test set, only when its
calibration examples are exchangeable with the test examples given the model. The validation split is not: it chose
every hyperparameter, every early-stopping epoch and every temperature, so the models fit it better than they fit the
test set, and sets calibrated on it under-cover. With `RunConfig.conformal` (`compare(conformal=alpha)`,
`keras-ils run --conformal ALPHA`) the main job therefore carves `CALIBRATION_SHARE` of the validation split
(stratified by class, seeded by the run's seed) into `Splits.calibration` before anything trains: the rest is the
validation split of every search, early stop and post-hoc calibration, and the carved part is read only to calibrate
the prediction sets.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_ils import conformal
from keras_ils.comparison.data.splits import check_split, stratified_split

__all__ = ["CALIBRATION_SHARE", "calibration_split"]

CALIBRATION_SHARE = 0.5  # of the validation split, held out for the prediction sets


def calibration_split(splits, alpha: float, seed: int, argument: str = "conformal"):
    """`splits` with `CALIBRATION_SHARE` of its validation examples moved into `splits.calibration`.

    The carved examples are a stratified, seeded share of each class
    (`stratified_split`): every class of the validation split keeps at
    least one validation example. `splits` that already hold a calibration
    split are returned as they are, so carving twice carves once.

    Args:
        splits: a `keras_ils.comparison.data.splits.Splits`.
        alpha: the prediction sets' miscoverage, in `(0, 1)`.
        seed: seeds the carving.
        argument: the name `alpha` goes by in the error (`"conformal"` for
            `compare` and `RunConfig`, `"--conformal"` for the command).
            Defaults to `"conformal"`.

    Returns:
        `splits` with the remaining `validation` and the carved `calibration`.

    Raises:
        ValueError: `alpha` below `1 / (n + 1)` for the `n` carved examples,
            where split conformal's quantile does not exist (the sets would
            be every class). Refused before anything trains.

    Example:

    >>> from keras_ils.comparison.data.arrays import array_splits
    >>> x, y = np.arange(200.0)[:, None], np.arange(200) % 2
    >>> splits = array_splits(x, y, test_fraction=0.2, validation_fraction=0.25, seed=0)
    >>> carved = calibration_split(splits, alpha=0.1, seed=0)
    >>> [int(d.cardinality()) for d in (carved.validation, carved.calibration)]
    [20, 20]
    >>> calibration_split(splits, alpha=0.02, seed=0)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `conformal`. Expected at least 1 / (n + 1) = 0.04762 for the n = 20 \
calibration examples that the prediction sets get (half of the validation split's 40, held out from every selection \
and fit). Received: conformal=0.02. Give more validation data or a larger alpha.
    """
    if splits.calibration is not None:
        return splits
    labels = np.array([int(y) for y in splits.validation.map(lambda x, y: y).as_numpy_iterator()])
    kept, carved = stratified_split(labels, splits.num_classes, CALIBRATION_SHARE, seed)
    if len(carved) < conformal.minimum_examples(alpha):
        raise ValueError(
            f"Invalid value for argument `{argument}`. Expected at least 1 / (n + 1) = {1 / (len(carved) + 1):.4g} "
            f"for the n = {len(carved)} calibration examples that the prediction sets get (half of the validation "
            f"split's {len(labels)}, held out from every selection and fit). Received: {argument}={alpha:g}. Give "
            "more validation data or a larger alpha."
        )
    counts = [np.bincount(labels[rows], minlength=splits.num_classes) for rows in (kept, carved)]
    advice = f"Prediction sets (`{argument}`) take half of the validation split; a larger one gives both more."
    check_split(splits.name, *counts, advice, splits.class_names)  # warns of classes now scarce in validation
    validation, calibration = (_rows(splits.validation, rows, len(labels)) for rows in (kept, carved))
    return splits._replace(validation=validation, calibration=calibration)


def _rows(dataset, rows, size: int):
    """The elements of `dataset` (of `size` elements) at positions `rows`, in the dataset's order, counted."""
    wanted = np.zeros(size, bool)
    wanted[rows] = True
    chosen = dataset.enumerate().filter(lambda i, _: tf.gather(tf.constant(wanted), i))
    return chosen.map(lambda i, element: element).apply(tf.data.experimental.assert_cardinality(len(rows)))
