"""The engine's training loss: cross-entropy against each slot's targets, plus the calibration losses' terms.

Every slot computes its loss on its own mini-batch, so a loss made of batch
statistics (MMCE, MDCA) is per slot too. Without terms the loss is the
engine's plain one, the mean over the batch of `-sum_j t_j log p_j`. A term
has per-slot parameters (`PARAMETERS`: each a column of the pool's
loss-parameter matrix, 0 where a slot does not use it) and is compiled into
an epoch only when some model of the `train_mlps` call has a non-zero
value of one of them (`parameter_matrix`), so models without terms train
exactly as they did before terms existed. The terms, per slot, on its batch
of `m` examples:

- `focal` (`keras_ils.losses.FocalLoss`): each class's cross-entropy term
  weighted by `max(1 - p_j, epsilon)^gamma`, `gamma = focal_gamma`, or with
  `flsd53 = 1` FLSD-53's 5 where `p_t < 0.2` and 3 elsewhere (no gradient
  through the choice). A slot with gamma 0 gets cross-entropy: the floor at
  Keras' epsilon keeps the gradient of `x^0` finite where `p_j = 1`.
- `mbls` (`keras_ils.losses.MarginLabelSmoothingLoss`): plus, per example,
  `mbls_alpha * mean_j relu(max_k z_k - z_j - mbls_margin)`.
- `mmce` (`keras_ils.losses.MMCELoss`): plus `mmce_weight` times the MMCE of
  the slot's batch (top-label confidence, Laplacian kernel of width 0.4).
- `mdca` (`keras_ils.losses.MDCALoss`): plus `mdca_beta` times the MDCA of the
  slot's batch, `mean_j |mean_i p_ij - mean_i t_ij|`.
- `ols` (`keras_ils.losses.OnlineLabelSmoothing` with its callback): the
  targets become `(1 - w) t + w S[label]`, `w = ols_weight` (`1 - alpha`),
  `S` the slot's soft-label matrix, a state of the pool that starts uniform
  (`initial_state`); every step counts the batch's correctly classified
  predictions per true class (`online_statistics`) and the epoch's end makes
  them the next `S` (`online_soft_labels`), as the callback does.

Each slot's loss equals its Keras loss on the same batch, in value and
gradient, and a slot trains as `model.fit` with that loss does
(tests/experiments/engine/test_loss_terms.py). `keras_ils.methods.Method.engine_loss`
says which parameters a method's loss takes.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf

from keras_ils._checks import invalid
from keras_ils.losses.mmce import KERNEL_WIDTH

__all__ = [
    "PARAMETERS",
    "TERMS",
    "batch_losses",
    "columns",
    "initial_state",
    "online_soft_labels",
    "online_statistics",
    "online_targets",
    "parameter_matrix",
]

# every loss parameter and its term, in the order of the loss-parameter matrix's columns
PARAMETERS = {
    "focal_gamma": "focal",
    "flsd53": "focal",
    "mbls_margin": "mbls",
    "mbls_alpha": "mbls",
    "mmce_weight": "mmce",
    "mdca_beta": "mdca",
    "ols_weight": "ols",
}
TERMS = ("focal", "mbls", "mmce", "mdca", "ols")


def columns(terms) -> tuple[str, ...]:
    """The loss-parameter columns of `terms`, in `PARAMETERS` order.

    Example:

    >>> columns(("mmce", "focal"))
    ('focal_gamma', 'flsd53', 'mmce_weight')
    """
    return tuple(name for name, term in PARAMETERS.items() if term in terms)


def parameter_matrix(parameters: Mapping | None, num_models: int) -> tuple[tuple[str, ...], np.ndarray]:
    """`(terms, [num_models, P] float32 matrix)` of `train_mlps`' `loss_parameters`, checked.

    A term is kept when some model has a non-zero value of one of its
    parameters; the matrix holds the kept terms' `columns` (absent
    parameters 0).

    Example:

    >>> terms, matrix = parameter_matrix({"focal_gamma": [0.0, 2.0], "mdca_beta": [0.0, 0.0]}, 2)
    >>> terms, matrix.tolist()
    (('focal',), [[0.0, 0.0], [2.0, 0.0]])
    """
    parameters = dict(parameters or {})
    values = {}
    for name, column in parameters.items():
        if name not in PARAMETERS:
            raise invalid("loss_parameters", f"a dict with keys among {tuple(PARAMETERS)}", sorted(parameters))
        column = np.asarray(column, np.float32)
        if column.shape != (num_models,) or not np.all(np.isfinite(column)) or np.any(column < 0):
            raise invalid(
                "loss_parameters", f"{num_models} finite values >= 0 (one per model) for {name!r}", f"{column!r}"
            )
        values[name] = column
    terms = tuple(term for term in TERMS if any(np.any(values[n] != 0) for n in columns((term,)) if n in values))
    matrix = np.zeros((num_models, len(columns(terms))), np.float32)
    for index, name in enumerate(columns(terms)):
        matrix[:, index] = values.get(name, 0.0)
    return terms, matrix


def initial_state(terms, num_models: int, num_classes: int) -> dict:
    """`{name: [num_models, ...] initial values}` of the pool's loss state: OLS's uniform soft labels, if used.

    Example:

    >>> initial_state(("ols",), 2, 3)["soft_labels"].shape, initial_state(("focal",), 2, 3)
    ((2, 3, 3), {})
    """
    if "ols" not in terms:
        return {}
    return {"soft_labels": np.full((num_models, num_classes, num_classes), 1.0 / num_classes, np.float32)}


def online_targets(targets, soft_labels, weight):
    """OLS's targets `(1 - w) t + w S[argmax t]` of each slot: `targets` `[S, m, K]`, `soft_labels` `[S, K, K]`,
    `weight` `[S]` (`w = 0`: the targets as they are)."""
    rows = tf.gather(soft_labels, tf.argmax(targets, axis=-1, output_type=tf.int32), batch_dims=1)
    weight = weight[:, None, None]
    return (1.0 - weight) * targets + weight * rows


def online_statistics(logits, targets, sums, counts):
    """`(sums [S, K, K], counts [S, K])` plus the batch's: per true class (`argmax t`), the predicted distributions
    of the correctly classified examples and their number (no gradient)."""
    p = tf.stop_gradient(tf.exp(tf.nn.log_softmax(logits)))
    labels = tf.argmax(targets, axis=-1, output_type=tf.int32)
    correct = tf.cast(tf.equal(tf.argmax(p, axis=-1, output_type=tf.int32), labels), p.dtype)
    members = tf.one_hot(labels, tf.shape(p)[-1], dtype=p.dtype) * correct[..., None]
    return sums + tf.matmul(members, p, transpose_a=True), counts + tf.reduce_sum(members, axis=1)


def online_soft_labels(sums, counts, previous):
    """The next soft labels: row `y` the normalised sum of class `y`'s correct predictions, or `previous` row where
    there was none (`keras_ils.losses.online.soft_labels_from_statistics`)."""
    totals = tf.reduce_sum(sums, axis=-1, keepdims=True)
    seen = (counts > 0) & (totals[..., 0] > 0)
    return tf.where(seen[..., None], sums / tf.where(totals > 0, totals, tf.ones_like(totals)), previous)


def _safe_sqrt(x):
    """`sqrt(max(x, 0))` with a zero, not infinite, gradient where `x <= 0` (as `MMCELoss` takes it)."""
    positive = x > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))), tf.zeros_like(x))


def _focal_weights(targets, p, gamma, flsd53):
    """`targets * max(1 - p, epsilon)^gamma` with each slot's gamma, or FLSD-53's per example (no gradient)."""
    p_t = tf.stop_gradient(tf.reduce_sum(targets * p, axis=-1, keepdims=True))
    gamma = tf.where(flsd53[:, None, None] > 0, tf.where(p_t < 0.2, 5.0, 3.0), gamma[:, None, None])
    return targets * tf.pow(tf.maximum(1.0 - p, keras.config.epsilon()), gamma)


def _mmce(p, targets):
    """`[S]` the MMCE of each slot's batch: `sqrt((1/m^2) sum_ij (c_i - r_i)(c_j - r_j) exp(-|r_i - r_j| / 0.4))`."""
    confidence = tf.reduce_max(p, axis=-1)
    correct = tf.cast(tf.equal(tf.argmax(p, axis=-1), tf.argmax(targets, axis=-1)), p.dtype)
    gap = correct - confidence
    kernel = tf.exp(-tf.abs(confidence[:, :, None] - confidence[:, None, :]) / KERNEL_WIDTH)
    count = tf.cast(tf.shape(confidence)[1], p.dtype)
    return _safe_sqrt(tf.reduce_sum(gap[:, :, None] * gap[:, None, :] * kernel, axis=[1, 2]) / count**2)


def batch_losses(logits, targets, parameters, terms=()):
    """Each slot's loss on its mini-batch: `logits`, `targets` `[S, m, K]`, `parameters` `[S, P]` (the `columns`
    of `terms`) -> `[S]`, the mean over the batch as Keras' default reduction takes it."""
    log_p = tf.nn.log_softmax(logits)
    if not terms:  # the engine's plain cross-entropy, exactly as it has always been computed
        return -tf.reduce_mean(tf.reduce_sum(targets * log_p, axis=-1), axis=-1)
    value = dict(zip(columns(terms), tf.unstack(parameters, num=len(columns(terms)), axis=-1), strict=True))
    p = tf.exp(log_p)
    weights = _focal_weights(targets, p, value["focal_gamma"], value["flsd53"]) if "focal" in terms else targets
    per_example = -tf.reduce_sum(weights * log_p, axis=-1)
    if "mbls" in terms:
        gaps = tf.reduce_max(logits, axis=-1, keepdims=True) - logits
        hinge = tf.reduce_mean(tf.nn.relu(gaps - value["mbls_margin"][:, None, None]), axis=-1)
        per_example += value["mbls_alpha"][:, None] * hinge
    loss = tf.reduce_mean(per_example, axis=-1)
    if "mmce" in terms:
        loss += value["mmce_weight"] * _mmce(p, targets)
    if "mdca" in terms:
        gap = tf.abs(tf.reduce_mean(p, axis=1) - tf.reduce_mean(targets, axis=1))
        loss += value["mdca_beta"] * tf.reduce_mean(gap, axis=-1)
    return loss
