"""`FocalLoss` and `focal_crossentropy`: focal loss with a fixed gamma or the FLSD-53 schedule (Mukhoti et al. 2020).

With a float `gamma` the loss is Keras' `CategoricalFocalCrossentropy` with
`alpha=1.0`; what it adds is the package's `y_true` forms (sparse labels,
teacher targets) and the sample-dependent `gamma="flsd53"`. On probabilities
(`from_logits=False`) it calls `keras.losses.categorical_focal_crossentropy`
itself. On logits it uses `log_softmax` instead: Keras' function takes the
softmax, clips it to `[1e-7, 1 - 1e-7]` and then the log, so an example whose
true class has probability below `1e-7` (the badly wrong ones) gets no
gradient at all; the values agree elsewhere (tested).
"""

from __future__ import annotations

from typing import Literal

import keras
from keras import ops

from keras_ils import _bad_input
from keras_ils._checks import invalid
from keras_ils.losses import _common
from keras_ils.losses.forms import FunctionalForm

__all__ = ["FocalLoss", "focal_crossentropy"]

Gamma = float | Literal["flsd53"]
_EXPECTED_GAMMA = "a float >= 0 or 'flsd53'"


def _check_gamma(name, gamma) -> Gamma:
    if isinstance(gamma, str):
        if gamma != "flsd53":
            raise invalid(name, _EXPECTED_GAMMA, gamma)
        return gamma
    try:
        return _common.non_negative(name, gamma)
    except ValueError:
        raise invalid(name, _EXPECTED_GAMMA, gamma) from None


@_bad_input.poisons_bad_input
def focal_crossentropy(y_true, y_pred, gamma: Gamma = 3.0, from_logits: bool = True):
    """Per-example focal loss `-sum_j y_j (1 - p_j)^gamma log p_j`; the function behind `FocalLoss`.

    `y_true` is read as `FocalLoss` reads it; no reduction or weighting.
    `y_pred` may have leading axes (`[M, batch, K]`, one batch per model),
    and a float `gamma` may hold one value per model (`[M, 1, 1]`).

    Returns:
        `[batch]` losses (`[M, batch]` with a models axis).

    Example:

    >>> import numpy as np
    >>> loss = focal_crossentropy([0], np.log([[0.6, 0.3, 0.1]]), gamma=2.0)
    >>> round(float(loss[0]), 4)   # (1 - 0.6)^2 * -log(0.6)
    0.0817
    >>> round(float(focal_crossentropy([0], np.log([[0.1, 0.6, 0.3]]), gamma="flsd53")[0]), 4)   # p_t < 0.2: gamma 5
    1.3596
    """
    gamma = _common.setting("gamma", gamma, _check_gamma)
    y_pred = _common.predictions(y_pred, from_logits)
    targets, _ = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    p, log_p = _common.probabilities(y_pred, from_logits)
    if isinstance(gamma, str):  # Mukhoti et al.'s schedule: 5 below p_t = 0.2, else 3; no gradient through it
        p_t = ops.stop_gradient(ops.sum(targets * p, axis=-1, keepdims=True))
        gamma = ops.cast(ops.where(p_t < 0.2, 5.0, 3.0), y_pred.dtype)
    if not from_logits:
        return keras.losses.categorical_focal_crossentropy(targets, y_pred, alpha=1.0, gamma=gamma)
    # 1 - p floored at epsilon: (1 - p)^gamma has an infinite slope at p = 1 when gamma < 1 (0 * inf = NaN)
    modulating = ops.power(ops.maximum(1.0 - p, keras.config.epsilon()), gamma)
    return -ops.sum(targets * modulating * log_p, axis=-1)


@keras.saving.register_keras_serializable(package="keras_ils")
class FocalLoss(keras.losses.Loss):
    """Focal loss, a calibration loss: cross-entropy down-weighted on confident predictions.

    Mukhoti et al. (2020) show that focal loss trains better calibrated
    networks than cross-entropy, and propose FLSD-53, a sample-dependent
    `gamma`: 5 for examples whose true-class probability `p_t` is below 0.2,
    3 otherwise (no gradient flows through the choice). That is
    `gamma="flsd53"`, as in the authors' code (`focal_loss_adaptive_gamma.py`,
    whose thresholds 0.2 and 0.5 give 5 below 0.2 and 3 from 0.2 on).

    `y_true` may be sparse labels (`[batch]` or `[batch, 1]`), one-hot or soft
    rows (`[batch, K]`, each class weighted by `y_j`, as in Keras), or the
    package's teacher targets (`[batch, 2K]`, their one-hot half). With a
    float `gamma` it equals `keras.losses.CategoricalFocalCrossentropy(
    alpha=1.0, gamma=gamma)` on one-hot rows. The authors sum over the batch;
    Keras' default reduction averages, which only rescales the learning rate.

    Formula:

    ```
    loss = -sum_j y_j * (1 - p_j)^gamma * log p_j      (one-hot y: -(1 - p_t)^gamma log p_t)
    flsd53: gamma = 5 where p_t < 0.2, else 3,  p_t = sum_j y_j p_j
    ```

    Args:
        gamma: focusing parameter, a float `>= 0` (0 is cross-entropy), or
            `"flsd53"`. Defaults to `3.0`.
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"focal_loss"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> loss = FocalLoss(gamma=2.0)
    >>> round(float(loss([0, 1], np.log([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1]]))), 4)
    0.0569

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.losses.FocalLoss(gamma="flsd53"))
    ```

    References:
        Lin et al. (2017), "Focal Loss for Dense Object Detection";
        Mukhoti et al. (2020), "Calibrating Deep Neural Networks using Focal
        Loss", NeurIPS (FLSD-53).
    """

    def __init__(
        self,
        gamma: Gamma = 3.0,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "focal_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _check_gamma("gamma", gamma)
        self.gamma = gamma
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return focal_crossentropy(y_true, y_pred, gamma=self.gamma, from_logits=self.from_logits)

    def functional_form(self) -> FunctionalForm:
        """`focal_crossentropy` with this loss's `gamma` and `from_logits` (see `keras_ils.losses.functional_form`)."""
        return FunctionalForm(focal_crossentropy, {"gamma": self.gamma, "from_logits": self.from_logits})

    def get_config(self):
        config = super().get_config()
        config.update(gamma=self.gamma, from_logits=self.from_logits, dtype=self.dtype)
        return config
