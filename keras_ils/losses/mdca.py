"""`MDCALoss` and `mdca_crossentropy`: cross-entropy plus the MDCA calibration penalty (Hebbalaguppe et al., CVPR 2022).

MDCA is a batch statistic, not a sum over examples. Each example's loss is
its own cross-entropy plus the whole batch's penalty, `CE_i + beta * MDCA`,
so that the default reduction (the mean over the batch) gives
`mean(CE) + beta * MDCA`, the authors' objective. `sample_weight` scales each
example's share, penalty included: with weights `w`, the reduced loss is
`mean(w * CE) + beta * MDCA * mean(w)`. The penalty itself is computed over
every example of the batch, unweighted (a zero-weighted example still enters
it; drop such examples from the batch to leave them out entirely).

The functions take the batch along `y_pred`'s second-to-last axis, one
batch per leading index (`[M, batch, K]`: one per model, each its own
penalty); `MDCALoss` takes every example it is given as one batch.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _bad_input
from keras_ils.losses import _common
from keras_ils.losses.forms import FunctionalForm
from keras_ils.losses.ils import ils_crossentropy

__all__ = ["MDCALoss", "mdca", "mdca_crossentropy", "mdca_penalty"]


def mdca(probabilities, targets):
    """The MDCA of a batch: the mean over classes of `|mean predicted probability - mean target|`.

    Formula:

    ```
    MDCA = (1/K) sum_j |(1/m) sum_i p_ij - (1/m) sum_i y_ij|
    ```

    Args:
        probabilities: `[m, K]` predicted probabilities (`[..., m, K]`: one
            batch per leading index).
        targets: `[m, K]` one-hot (or soft) targets.

    Returns:
        A scalar (`[...]`).

    Example:

    >>> round(float(mdca([[0.9, 0.1], [0.6, 0.4]], [[1.0, 0.0], [0.0, 1.0]])), 4)   # |0.75 - 0.5| twice
    0.25
    """
    p = ops.convert_to_tensor(probabilities)
    y = ops.cast(targets, p.dtype)
    return ops.mean(ops.abs(ops.mean(p, axis=-2) - ops.mean(y, axis=-2)), axis=-1)


def mdca_penalty(y_true, y_pred, beta: float = 1.0, from_logits: bool = True):
    """`beta * MDCA` of the batch, `[1]`: the term every example of `mdca_crossentropy` carries.

    `y_true` is read as `MDCALoss` reads it; `y_pred` may have leading axes
    (`[M, batch, K]`: each batch's own penalty, `[M, 1]`), and `beta` may
    hold one value per model (`[M, 1, 1]`).

    Example:

    >>> import numpy as np
    >>> round(float(mdca_penalty([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]), beta=2.0)[0]), 4)   # 2 * 0.25
    0.5
    """
    beta = _common.setting("beta", beta, _common.non_negative)
    y_pred = _common.predictions(y_pred, from_logits)
    targets, _ = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    p, _ = _common.probabilities(y_pred, from_logits)
    return _common.per_example(beta) * mdca(p, targets)[..., None]


@_bad_input.poisons_bad_input
def mdca_crossentropy(y_true, y_pred, beta: float = 1.0, from_logits: bool = True):
    """Per-example `CE_i + beta * MDCA(batch)`; the function behind `MDCALoss` (see the module's note).

    `y_true` is read as `MDCALoss` reads it; no reduction or weighting.
    `y_pred` may have leading axes (see `mdca_penalty`).

    Returns:
        `[batch]` losses.

    Example:

    >>> import numpy as np
    >>> loss = mdca_crossentropy([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]), beta=1.0)
    >>> np.round(keras.ops.convert_to_numpy(loss), 4).tolist()   # CE + 0.25
    [0.3554, 1.1663]
    """
    return ils_crossentropy(y_true, y_pred, method="none", from_logits=from_logits) + mdca_penalty(
        y_true, y_pred, beta, from_logits
    )


@keras.saving.register_keras_serializable(package="keras_ils")
class MDCALoss(keras.losses.Loss):
    """Cross-entropy plus the multi-class difference of confidence and accuracy (MDCA) over the batch.

    Hebbalaguppe et al. (2022) penalise, for every class, the gap between the
    batch's mean predicted probability of the class and the batch's share of
    it, averaged over the classes: a differentiable, class-wise version of
    "confidence equals accuracy" that is added to the cross-entropy (the
    authors' `ClassficationAndMDCA` with cross-entropy, `loss_cls + beta *
    loss_cal`, whose `MDCA` is `mean_j |mean_i p_ij - mean_i [y_i = j]|`).

    `y_true` may be sparse labels, one-hot or soft rows (the cross-entropy and
    the class shares are taken from them), or the package's teacher targets
    (their one-hot half). See the module's note on how the batch term is
    reported per example and how `sample_weight` acts.

    Formula:

    ```
    loss_i = CE_i + beta * (1/K) sum_j |(1/m) sum_k p_kj - (1/m) sum_k y_kj|
    ```

    Args:
        beta: the penalty's weight, `>= 0`. Defaults to `1.0` (the authors'
            grid is 1, 5, 10, 15, 20).
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"mdca_loss"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> loss = MDCALoss(beta=1.0)
    >>> round(float(loss([0, 1], np.log([[0.9, 0.1], [0.6, 0.4]]))), 4)   # mean CE 0.5108 + 0.25
    0.7608

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.losses.MDCALoss(beta=5.0))
    ```

    References:
        Hebbalaguppe, Prakash, Madan & Arora (2022), "A Stitch in Time Saves
        Nine: A Train-Time Regularizing Loss for Improved Neural Network
        Calibration", CVPR.
    """

    def __init__(
        self,
        beta: float = 1.0,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "mdca_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _common.non_negative("beta", beta)
        self.beta = beta
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return _common.flat_batch(lambda y, z: mdca_crossentropy(y, z, self.beta, self.from_logits), y_true, y_pred)

    def functional_form(self) -> FunctionalForm:
        """Cross-entropy (`ils_crossentropy`, method `"none"`) plus `mdca_penalty` as the batch term
        (`keras_ils.losses.functional_form`)."""
        return FunctionalForm(
            ils_crossentropy,
            {"method": "none", "from_logits": self.from_logits},
            batch_term=(mdca_penalty, {"beta": self.beta, "from_logits": self.from_logits}),
        )

    def get_config(self):
        config = super().get_config()
        config.update(beta=self.beta, from_logits=self.from_logits, dtype=self.dtype)
        return config
