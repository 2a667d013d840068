"""`ILSLoss` and `ils_crossentropy`: cross-entropy against no-LS, LS, ILS1, ILS2 or ILS targets.

`from_logits` defaults differ on purpose: `True` for the loss (as for the
calibration layers; `keras_ils.calibrate` reads it from the model), `False`
for the metrics of `keras_ils.metrics` (as for Keras' own metrics). The loss
is meant for models whose last layer is linear: on logits it is a
log-softmax, the numerically stable form, and the calibrators act on logits.
Keras' `CategoricalCrossentropy` defaults to `from_logits=False`: a model
ending in a softmax needs `ILSLoss(from_logits=False)`. Its values cannot
show the loss that mistake (a softmax of probabilities is a valid
distribution; Keras' own cross-entropy warns where the graph shows a softmax
op), while the other one is refused: with `from_logits=False` the loss, like
the metrics, checks that `y_pred` can be probabilities and refuses logits
with an error naming `from_logits=True` (see `keras_ils.losses`).
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from keras_ils import _bad_input, _labels
from keras_ils import targets as _targets
from keras_ils.losses import _common
from keras_ils.losses.forms import FunctionalForm

__all__ = ["ILSLoss", "ils_crossentropy"]


def ils_crossentropy(
    y_true,
    y_pred,
    method: _targets.Method = "ils",
    epsilon: float = 0.1,
    p1: float = 0.9,
    p2: float = 1.0,
    temperature: float = 1.0,
    max_epsilon: float = 0.2,
    family: _targets.Family = "quadratic",
    from_logits: bool = True,
):
    """Per-example cross-entropy against the targets of `method`; the function behind `ILSLoss`.

    `y_true` is read as `ILSLoss` reads it: teacher targets
    (`keras_ils.teacher_targets`, `[batch, 2K]`), sparse labels or one-hot /
    soft rows. The arguments are `ILSLoss`'s; no reduction or weighting.

    Returns:
        `[batch]` losses.

    Example:

    >>> import numpy as np
    >>> import keras_ils
    >>> y = keras_ils.teacher_targets([0], np.log([[0.7, 0.2, 0.1]]))
    >>> logits = np.log([[0.9, 0.0667, 0.0333]])
    >>> np.round(keras.ops.convert_to_numpy(ils_crossentropy(y, logits, method="ils2", epsilon=0.1)), 4).tolist()
    [0.3887]
    """
    hyperparameters = _targets.validate_hyperparameters(method, epsilon, p1, p2, temperature, max_epsilon, family)
    return _crossentropy(y_true, y_pred, hyperparameters, from_logits)


@_bad_input.poisons_bad_input
def _crossentropy(y_true, y_pred, hyperparameters, from_logits):
    """`ils_crossentropy` on checked hyperparameters (`validate_hyperparameters`' dict)."""
    y_pred = _common.predictions(y_pred, from_logits)
    y_true = ops.convert_to_tensor(y_true, dtype=y_pred.dtype)
    targets = _targets_of(y_true, y_pred.shape[-1], len(y_pred.shape), hyperparameters)
    return _common.crossentropy(ops.cast(targets, y_pred.dtype), y_pred, from_logits)


def _targets_of(y_true, num_classes, rank, hyperparameters):
    """The targets of `method` for `y_true` in any of its forms (`rank`: `y_pred`'s)."""
    kind = _labels.y_true_kind(y_true, num_classes, rank)
    if kind == "dense":
        smoothed = hyperparameters["method"] == "ls"  # Keras' `label_smoothing`: one formula on one-hot and soft rows
        return _targets.targets_from_one_hot(y_true, **hyperparameters) if smoothed else y_true
    if kind == "teacher":
        one_hot, teacher_logits = _labels.split_teacher_targets(y_true, num_classes)
        return _targets.targets_from_one_hot(one_hot, teacher_logits, **hyperparameters)
    labels = _labels.hard_labels(y_true, num_classes, rank)
    hard_method = "ls" if hyperparameters["method"] == "ls" else "none"
    return _targets.targets_from_one_hot(
        ops.one_hot(labels, num_classes), method=hard_method, epsilon=hyperparameters["epsilon"]
    )


@_bad_input.poisons_bad_input
def _fixed_targets(y_true, num_classes, hyperparameters):
    """`FunctionalForm.targets` of `ILSLoss`: its targets for one-hot or soft rows, or teacher targets, in their
    dtype."""
    y_true = ops.convert_to_tensor(y_true)
    return ops.cast(_targets_of(y_true, num_classes, len(y_true.shape), hyperparameters), y_true.dtype)


@keras.saving.register_keras_serializable(package="keras_ils")
class ILSLoss(keras.losses.Loss):
    """Cross-entropy against instance-based label-smoothed targets.

    What the loss trains against depends on the form of `y_true`:

    - teacher targets from `keras_ils.teacher_targets` (`[batch, 2K]`): the
      targets of `method` with this loss's hyperparameters (see
      `keras_ils.ils_targets`);
    - sparse integer labels (`[batch]` or `[batch, 1]`): plain cross-entropy,
      except that `method="ls"` applies standard label smoothing (which
      Keras' own sparse cross-entropy cannot);
    - one-hot or soft targets (`[batch, K]`): cross-entropy against them;
      `method="ls"` smooths them first, `y * (1 - epsilon) + epsilon / K`,
      exactly as `keras.losses.CategoricalCrossentropy(label_smoothing=epsilon)`
      does (the other methods need a teacher and take them as given).

    So one compiled model trains on teacher targets and validates on hard
    labels, and `val_loss` is then the paper's selection criterion, the
    cross-entropy against hard labels (for `method="ls"` it is smoothed; the
    `keras_ils.metrics.NegativeLogLikelihood` metric is the criterion for
    every method).

    Formula:

    ```
    loss = -sum_j y_j * log_softmax(y_pred)_j,   y = ils_targets(...)
    ```

    Args:
        method: `"none"`, `"ls"`, `"ils1"`, `"ils2"` or `"ils"`.
            Defaults to `"ils"`.
        epsilon: smoothing mass for `"ls"` and `"ils2"`, in `[0, 1)`.
            Defaults to `0.1`.
        p1: ILS1's `P1`, in `(0, 1]`. Defaults to `0.9`.
        p2: ILS1's `P2`, `>= 0`. Defaults to `1.0`.
        temperature: ILS2's temperature on the calibrated teacher logits,
            `> 0`. Defaults to `1.0`.
        max_epsilon: clip of ILS1's smoothing factor, in `[0, 1)`.
            Defaults to `0.2`.
        family: ILS1's curve, `"quadratic"` or `"sinusoidal"`.
            Defaults to `"quadratic"`.
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"ils_loss"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> import keras_ils
    >>> y = keras_ils.teacher_targets([0], np.log([[0.7, 0.2, 0.1]]))
    >>> loss = ILSLoss(method="ils2", epsilon=0.1)
    >>> round(float(loss(y, np.log([[0.9, 0.0667, 0.0333]]))), 4)   # the targets' entropy
    0.3887
    >>> round(float(loss([0], np.log([[0.9, 0.0667, 0.0333]]))), 4)
    0.1054

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.ILSLoss(method="ils", p1=0.8, p2=2.0))
    model.fit(train_ds_with_teacher_targets, validation_data=val_ds_with_labels)
    ```

    References:
        Maher & Kull (2021), §4.
    """

    def __init__(
        self,
        method: _targets.Method = "ils",
        epsilon: float = 0.1,
        p1: float = 0.9,
        p2: float = 1.0,
        temperature: float = 1.0,
        max_epsilon: float = 0.2,
        family: _targets.Family = "quadratic",
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "ils_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self._hyperparameters = _targets.validate_hyperparameters(
            method, epsilon, p1, p2, temperature, max_epsilon, family
        )
        self.method = method
        self.epsilon = epsilon
        self.p1 = p1
        self.p2 = p2
        self.temperature = temperature
        self.max_epsilon = max_epsilon
        self.family = family
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return _crossentropy(
            ops.convert_to_tensor(y_true, dtype=self.dtype), y_pred, self._hyperparameters, self.from_logits
        )

    def functional_form(self) -> FunctionalForm:
        """Cross-entropy (`ils_crossentropy`, method `"none"`) against the targets this loss makes from `y_true`,
        which depend on it alone (`keras_ils.losses.functional_form`)."""
        targets = functools.partial(_fixed_targets, hyperparameters=dict(self._hyperparameters))
        return FunctionalForm(ils_crossentropy, {"method": "none", "from_logits": self.from_logits}, targets=targets)

    def get_config(self):
        config = super().get_config()
        config.update(
            method=self.method,
            epsilon=self.epsilon,
            p1=self.p1,
            p2=self.p2,
            temperature=self.temperature,
            max_epsilon=self.max_epsilon,
            family=self.family,
            from_logits=self.from_logits,
            dtype=self.dtype,
        )
        return config
