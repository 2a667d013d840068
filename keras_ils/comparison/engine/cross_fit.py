"""The cross-fitted teacher of `keras_ils.comparison.engine.students`: stratified folds, out-of-fold logits.

ILS1 reads the teacher's `p_t` on the teacher's own training examples, where
a network that fitted them says about 1 whatever their difficulty. With
`SearchSettings(teacher_folds=k)`, `k` more teachers train, each on all
training folds but one, and each example's logits come from the teacher that
never saw it; one temperature, fitted on the `k` teachers' pooled validation
logits, calibrates them as a whole.
"""

from __future__ import annotations

import numpy as np

from keras_ils import calibration
from keras_ils._checks import invalid
from keras_ils.comparison.engine import vectorised

__all__ = ["fold_rows", "out_of_fold_logits"]


def fold_rows(labels, folds: int, seed: int) -> list:
    """`folds` disjoint index arrays covering `labels`, stratified: each class's examples dealt round-robin in a
    seeded order, so the folds keep the class proportions.

    Example:

    >>> labels = np.array([0, 0, 1, 1, 1, 0])
    >>> [np.bincount(labels[rows], minlength=2).tolist() for rows in fold_rows(labels, 2, seed=0)]
    [[2, 1], [1, 2]]
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    assigned = np.empty(len(labels), np.int64)
    offset = 0
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        assigned[rows] = (np.arange(len(rows)) + offset) % folds
        offset += len(rows)
    return [np.flatnonzero(assigned == fold) for fold in range(folds)]


def out_of_fold_logits(train, validation, settings):
    """`(calibrated out-of-fold logits [n, K], the joint temperature fit's CalibratorFit)` of the cross-fitted
    teachers of `settings` (a `students.SearchSettings`): `train` is `(x, labels, num_classes)`, `validation`
    `(x, labels)`."""
    folds, seed, estimator = settings.teacher_folds, settings.seed, settings.temperature_estimator
    x, y, num_classes = train
    x_validation, y_validation = validation
    held_out = fold_rows(y, folds, seed)
    if min(len(rows) for rows in held_out) == 0:
        raise invalid("teacher_folds", f"at most the {len(y)} training examples", folds)
    raw = np.empty((len(y), num_classes), np.float32)
    val_logits = []
    by_size = {}
    for fold, rows in enumerate(held_out):
        by_size.setdefault(len(y) - len(rows), []).append(fold)
    for same_size in by_size.values():  # teachers on equally many examples train together
        keep = [np.setdiff1d(np.arange(len(y)), held_out[fold]) for fold in same_size]
        count = len(same_size)
        trained = vectorised.train_mlps(
            np.stack([x[rows] for rows in keep]),
            np.stack([np.eye(num_classes, dtype=np.float32)[y[rows]] for rows in keep]),
            np.broadcast_to(x_validation, (count,) + x_validation.shape),
            np.broadcast_to(y_validation, (count,) + y_validation.shape),
            seeds=[seed] * count,
            training=settings.training,
        )
        for row, fold in enumerate(same_size):
            weights = [(k[row : row + 1], b[row : row + 1]) for k, b in trained.weights]
            raw[held_out[fold]] = vectorised.mlp_logits(weights, x[held_out[fold]])[0]
            val_logits.append(vectorised.mlp_logits(weights, x_validation)[0])
    pooled_labels = np.tile(y_validation, folds)
    pooled = np.concatenate(val_logits)
    fit = calibration.fit_calibrator("temperature", pooled, pooled_labels, estimator=estimator, return_fit=True)[1]
    return (raw / fit.temperature).astype(np.float32), fit
