"""`InputCheck`: a metric that checks what a model trains and is evaluated on, as the package's losses read it."""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _bad_input, _labels
from keras_ils.losses import _common

__all__ = ["InputCheck"]


@keras.saving.register_keras_serializable(package="keras_ils")
class InputCheck(_bad_input.CheckedMetric):
    """Raises the package's `ValueError` for bad `y_true` or `y_pred`, from a compiled step, at the end of the epoch.

    It checks what the package's losses check, as they read it: sparse labels
    (whole numbers in `[0, K)`), the one-hot half of teacher targets and,
    with `from_logits=False`, that `y_pred` are probabilities. Inside a
    compiled step (Keras' JAX steps, TensorFlow's `tf.function`, with or
    without XLA, `torch.compile`) no check can raise without making the
    accelerator wait for the host, so a package loss makes a bad batch's loss
    NaN and cannot say why: Keras carries no state for a loss. A metric has
    state: this one counts the bad labels and rows, and its `result()`, which
    Keras reads on the host at the end of every epoch and of `evaluate`,
    raises the `ValueError` the eager check raises, naming what was wrong.
    Every metric of `keras_ils.metrics` checks its own inputs the same way;
    add this one to a model compiled with a package loss and no package
    metric. Eager calls raise at once.

    Its value is the number of bad labels and rows counted since the last
    reset; on the host it is 0 or an error.

    Args:
        from_logits: whether `y_pred` are logits, as the loss is told.
            Defaults to `True` (the package's losses' default).
        name: Defaults to `"bad_input"`.
        dtype: Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> check = InputCheck()
    >>> check.update_state([0, 2], np.zeros((2, 3)))
    >>> float(check.result())
    0.0
    >>> check.update_state([0, 3], np.zeros((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `labels`. Expected class indices in [0, 3). Received: labels containing [3]

    Usage with `compile()`:

    ```python
    model.compile(optimizer="adam", loss=keras_ils.ILSLoss(), metrics=[keras_ils.metrics.InputCheck()])
    ```
    """

    def __init__(self, from_logits: bool = True, name: str = "bad_input", dtype: str | None = None):
        super().__init__(name=name, dtype=dtype)
        self.from_logits = bool(from_logits)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred)
        with self.counting():
            _labels.hard_labels(ops.convert_to_tensor(y_true), y_pred.shape[-1], len(y_pred.shape))
            _common.predictions(y_pred, self.from_logits)

    def _result(self):
        return ops.cast(ops.sum(self._bad_input), self.dtype)

    def reset_state(self):
        self._bad_input.assign(ops.zeros(self._bad_input.shape, dtype=self._bad_input.dtype))

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}
