"""`MMCELoss` and `mmce_crossentropy`: cross-entropy plus the MMCE calibration penalty (Kumar et al., ICML 2018).

MMCE is a batch statistic, not a sum over examples. Each example's loss is
its own cross-entropy plus the whole batch's penalty, `CE_i + weight * MMCE`,
so that the default reduction (the mean over the batch) gives
`mean(CE) + weight * MMCE`, the authors' objective. `sample_weight` scales
each example's share, penalty included: with weights `w`, the reduced loss
is `mean(w * CE) + weight * MMCE * mean(w)`. The penalty itself is computed
over every example of the batch, unweighted (a zero-weighted example still
enters it; drop such examples from the batch to leave them out entirely).

The functions take the batch along `y_pred`'s second-to-last axis, one
batch per leading index (`[M, batch, K]`: one per model, each its own
penalty); `MMCELoss` takes every example it is given as one batch.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _bad_input
from keras_ils.losses import _common
from keras_ils.losses.forms import FunctionalForm
from keras_ils.losses.ils import ils_crossentropy

__all__ = ["MMCELoss", "mmce", "mmce_crossentropy", "mmce_penalty"]

KERNEL_WIDTH = 0.4  # the Laplacian kernel's width in the paper and in both of the authors' codes


def mmce(confidences, correct):
    """The MMCE estimate of a batch, `sqrt(MMCE^2)`, from its top-label confidences and correctness.

    Formula:

    ```
    MMCE^2 = (1/m^2) sum_ij (c_i - r_i)(c_j - r_j) exp(-|r_i - r_j| / 0.4)
    ```

    Args:
        confidences: `[m]` top-label probabilities `r` (`[..., m]`: one
            batch per leading index).
        correct: `[m]` 1 where the top label is right, else 0 (`c`).

    Returns:
        A scalar (`[...]`), in float32 whatever the inputs' dtype (the
        double sum is too coarse in half precision).

    Example:

    >>> round(float(mmce([0.9, 0.6], [1.0, 0.0])), 4)
    0.2799
    """
    r = ops.cast(confidences, "float32")
    gap = ops.cast(correct, "float32") - r
    kernel = ops.exp(-ops.abs(r[..., :, None] - r[..., None, :]) / KERNEL_WIDTH)
    count = ops.cast(ops.shape(r)[-1], "float32")
    return _common.safe_sqrt(ops.sum(gap[..., :, None] * gap[..., None, :] * kernel, axis=(-2, -1)) / count**2)


def mmce_penalty(y_true, y_pred, weight: float = 2.0, from_logits: bool = True):
    """`weight * MMCE` of the batch, `[1]`: the term every example of `mmce_crossentropy` carries.

    `y_true` is read as `MMCELoss` reads it; `y_pred` may have leading axes
    (`[M, batch, K]`: each batch's own penalty, `[M, 1]`), and `weight` may
    hold one value per model (`[M, 1, 1]`).

    Example:

    >>> import numpy as np
    >>> round(float(mmce_penalty([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]), weight=2.0)[0]), 4)   # 2 * 0.2799
    0.5597
    """
    weight = _common.setting("weight", weight, _common.non_negative)
    y_pred = _common.predictions(y_pred, from_logits)
    _, labels = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    p, _ = _common.probabilities(y_pred, from_logits)
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(p, axis=-1), "int32"), labels), "float32")
    return ops.cast(_common.per_example(weight) * mmce(ops.max(p, axis=-1), correct)[..., None], y_pred.dtype)


@_bad_input.poisons_bad_input
def mmce_crossentropy(y_true, y_pred, weight: float = 2.0, from_logits: bool = True):
    """Per-example `CE_i + weight * MMCE(batch)`; the function behind `MMCELoss` (see the module's note).

    `y_true` is read as `MMCELoss` reads it; no reduction or weighting.
    `y_pred` may have leading axes (see `mmce_penalty`).

    Returns:
        `[batch]` losses.

    Example:

    >>> import numpy as np
    >>> loss = mmce_crossentropy([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]), weight=1.0)
    >>> np.round(keras.ops.convert_to_numpy(loss), 4).tolist()   # CE + 0.2799
    [0.3852, 1.1962]
    """
    return ils_crossentropy(y_true, y_pred, method="none", from_logits=from_logits) + mmce_penalty(
        y_true, y_pred, weight, from_logits
    )


@keras.saving.register_keras_serializable(package="keras_ils")
class MMCELoss(keras.losses.Loss):
    """Cross-entropy plus the maximum mean calibration error (MMCE), a kernel calibration penalty.

    Kumar et al. (2018) embed the gap between correctness and confidence in a
    reproducing-kernel Hilbert space: with `r` the top-label confidence, `c`
    whether the top label is right and a Laplacian kernel of width 0.4, MMCE
    is zero when the predictions are calibrated, and it is differentiable.
    The loss adds `weight` times MMCE over the batch to the cross-entropy.
    `c` carries no gradient; `r` does, in the gap and in the kernel.

    Which MMCE: the paper's unweighted estimator `MMCE_m` and its square root,
    as the paper's objective has it. The authors' code differs in two ways:
    its unweighted `calibration_unbiased_loss` returns `MMCE^2` without the
    root (torrvision/focal_calibration's MMCE, used as a baseline by later
    papers, also adds `MMCE^2`), and the loss it trains with is the weighted
    `MMCE_w`, whose root is taken of `MMCE_w^2 + 1e-10`. This loss takes the
    root exactly, with a zero gradient where `MMCE^2 = 0`.

    `y_true` may be sparse labels, one-hot or soft rows (the cross-entropy is
    against them; `c` compares the prediction with their argmax), or the
    package's teacher targets (their one-hot half). See the module's note on
    how the batch term is reported per example and how `sample_weight` acts.

    Formula:

    ```
    loss_i = CE_i + weight * sqrt((1/m^2) sum_jk (c_j - r_j)(c_k - r_k) exp(-|r_j - r_k| / 0.4))
    ```

    Args:
        weight: the penalty's weight `lambda`, `>= 0`. Defaults to `2.0`
            (the grid used here is 1, 2, 4, 8).
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"mmce_loss"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> loss = MMCELoss(weight=1.0)
    >>> round(float(loss([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]))), 4)   # mean CE 0.5108 + 0.2799
    0.7907

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.losses.MMCELoss(weight=4.0))
    ```

    References:
        Kumar, Sarawagi & Jain (2018), "Trainable Calibration Measures for
        Neural Networks from Kernel Mean Embeddings", ICML.
    """

    def __init__(
        self,
        weight: float = 2.0,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "mmce_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _common.non_negative("weight", weight)
        self.weight = weight
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return _common.flat_batch(lambda y, z: mmce_crossentropy(y, z, self.weight, self.from_logits), y_true, y_pred)

    def functional_form(self) -> FunctionalForm:
        """Cross-entropy (`ils_crossentropy`, method `"none"`) plus `mmce_penalty` as the batch term
        (`keras_ils.losses.functional_form`)."""
        return FunctionalForm(
            ils_crossentropy,
            {"method": "none", "from_logits": self.from_logits},
            batch_term=(mmce_penalty, {"weight": self.weight, "from_logits": self.from_logits}),
        )

    def get_config(self):
        config = super().get_config()
        config.update(weight=self.weight, from_logits=self.from_logits, dtype=self.dtype)
        return config
