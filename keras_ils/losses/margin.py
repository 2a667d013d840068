"""`MarginLabelSmoothingLoss` and `margin_label_smoothing_crossentropy`: MbLS (Liu et al., CVPR 2022)."""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _bad_input
from keras_ils.losses import _common
from keras_ils.losses.forms import FunctionalForm

__all__ = ["MarginLabelSmoothingLoss", "margin_label_smoothing_crossentropy"]


@_bad_input.poisons_bad_input
def margin_label_smoothing_crossentropy(
    y_true, y_pred, margin: float = 10.0, alpha: float = 0.1, from_logits: bool = True
):
    """Per-example MbLS loss, cross-entropy plus a hinge on logit gaps; the math of `MarginLabelSmoothingLoss`.

    `y_true` is read as `MarginLabelSmoothingLoss` reads it; no reduction or
    weighting. `y_pred` may have leading axes (`[M, batch, K]`, one batch per
    model), and `margin` and `alpha` may hold one value per model (`[M, 1, 1]`).

    Returns:
        `[batch]` losses (`[M, batch]` with a models axis).

    Example:

    >>> loss = margin_label_smoothing_crossentropy([0], [[12.0, 0.0, 1.0]], margin=10.0, alpha=0.1)
    >>> round(float(loss[0]), 4)   # CE 2.2e-5 + 0.1 * (2 + 1 + 0) / 3
    0.1
    """
    margin = _common.setting("margin", margin, _common.non_negative)
    alpha = _common.setting("alpha", alpha, _common.non_negative)
    y_pred = _common.predictions(y_pred, from_logits)
    targets, _ = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    crossentropy = _common.crossentropy(targets, y_pred, from_logits)
    logits = y_pred if from_logits else _common.probabilities(y_pred, False)[1]  # log p: logits up to a shift
    gaps = ops.max(logits, axis=-1, keepdims=True) - logits
    return crossentropy + _common.per_example(alpha) * ops.mean(ops.relu(gaps - margin), axis=-1)


@keras.saving.register_keras_serializable(package="keras_ils")
class MarginLabelSmoothingLoss(keras.losses.Loss):
    """Margin-based label smoothing (MbLS): cross-entropy plus a hinge on logit distances beyond a margin.

    Liu et al. (2022) show that label smoothing amounts to pushing every
    logit distance `max_k z_k - z_j` towards zero, and relax it to an
    inequality: distances up to `margin` are free, larger ones cost `alpha`
    per unit. The penalty is on logits and averaged over all K classes (the
    top class's distance is 0), as in the authors' code (`LogitMarginL1`,
    `F.relu(diff - margin).mean()`), whose batch mean this loss's mean
    reduction reproduces. With `from_logits=False` the logits are `log p`,
    which differ from the model's logits by a shift per row that the
    distances do not see.

    `y_true` may be sparse labels, one-hot or soft rows (the cross-entropy
    is against them), or the package's teacher targets (their one-hot half).

    Formula:

    ```
    loss = CE(y, softmax(z)) + alpha * (1/K) sum_j relu(max_k z_k - z_j - margin)
    ```

    Args:
        margin: logit distance that costs nothing, `>= 0`. Defaults to
            `10.0` (the authors' default; their grid is 2, 4, 6, 8, 10).
        alpha: weight of the penalty, `>= 0`. Defaults to `0.1`.
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"margin_label_smoothing_loss"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> loss = MarginLabelSmoothingLoss(margin=2.0, alpha=0.1)
    >>> round(float(loss([0], [[4.0, 1.0, 0.0]])), 4)   # CE 0.0659 + 0.1 * (0 + 1 + 2) / 3
    0.1659

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.losses.MarginLabelSmoothingLoss(margin=6.0))
    ```

    References:
        Liu et al. (2022), "The Devil is in the Margin: Margin-based Label
        Smoothing for Network Calibration", CVPR.
    """

    def __init__(
        self,
        margin: float = 10.0,
        alpha: float = 0.1,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "margin_label_smoothing_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _common.non_negative("margin", margin)
        _common.non_negative("alpha", alpha)
        self.margin = margin
        self.alpha = alpha
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return margin_label_smoothing_crossentropy(y_true, y_pred, self.margin, self.alpha, self.from_logits)

    def functional_form(self) -> FunctionalForm:
        """`margin_label_smoothing_crossentropy` with this loss's settings (`keras_ils.losses.functional_form`)."""
        arguments = {"margin": self.margin, "alpha": self.alpha, "from_logits": self.from_logits}
        return FunctionalForm(margin_label_smoothing_crossentropy, arguments)

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, alpha=self.alpha, from_logits=self.from_logits, dtype=self.dtype)
        return config
