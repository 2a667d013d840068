"""Online label smoothing (Zhang et al., IEEE TIP 2021): `OnlineLabelSmoothing`, its callback and functional form.

The loss trains against `alpha * one-hot + (1 - alpha) * S[y]`, where row
`y` of the K x K matrix `S` is what the model itself predicted, on average,
for the training examples of class `y` it got right in the previous epoch.

How the pieces fit:

- `OnlineLabelSmoothing` holds `S` (`soft_labels`) and the running epoch
  statistics (`correct_sums`, `correct_counts`) as Keras variables. Each
  training step adds the predicted distributions of the correctly classified
  examples of the batch, per true class, to the statistics.
- `OnlineLabelSmoothingCallback` zeroes the statistics when an epoch begins
  and turns them into the new `S` when it ends. The statistics are read
  before validation starts (`on_test_begin`), since the loss also runs on the
  validation batches.
- Without the callback `S` never changes, and the loss is label smoothing
  with `epsilon = 1 - alpha`. The loss cannot see epochs end, so it says so
  where it can: at its first call (the first `fit` or `evaluate` step, which
  Keras traces, or an eager call), a loss for which no callback was made and
  whose `S` was never learned (set by the callback or loaded with a model)
  issues one `OnlineLabelSmoothingWarning`. A loss whose `S` was learned and
  that trains again without its callback keeps that `S` without a warning.
- `S` is saved with a `.keras` model compiled with the loss and restored
  when it loads; under `tf.distribute` the statistics are summed over the
  replicas (build the loss inside `strategy.scope()`, as the model).

TensorFlow only for training: the statistics grow by variable assignment
inside the training step, which TensorFlow's stateful graphs keep; Keras'
JAX trainer is stateless and threads only the model's, optimizer's and
metrics' variables through its jitted step, so a loss's assignments would be
dropped and `S` read as a constant. Under JAX the loss computes (with the `S`
it holds) but the callback refuses to train with it.
"""

from __future__ import annotations

import functools
import warnings

import keras
import numpy as np
from keras import ops

from keras_ils import _bad_input
from keras_ils._checks import integer_at_least, number_in
from keras_ils.losses import _common
from keras_ils.losses.forms import EpochState, FunctionalForm

__all__ = [
    "OnlineLabelSmoothing",
    "OnlineLabelSmoothingCallback",
    "OnlineLabelSmoothingWarning",
    "correct_statistics",
    "online_label_smoothing_crossentropy",
    "soft_labels_from_statistics",
]


@_bad_input.poisons_bad_input
def online_label_smoothing_crossentropy(y_true, y_pred, soft_labels, alpha: float = 0.5, from_logits: bool = True):
    """Per-example cross-entropy against `alpha * y + (1 - alpha) * soft_labels[label]`; the math of
    `OnlineLabelSmoothing` (equal to `alpha * CE(y) + (1 - alpha) * CE(soft_labels[label])`).

    `y_pred` may have leading axes (`[M, batch, K]`, one batch per model),
    with one `soft_labels` per model (`[M, K, K]`) and `alpha` a number or
    one value per model (`[M, 1, 1]`).

    Args:
        y_true: sparse labels, one-hot or soft rows (the first term is against
            them; the label is their argmax), or teacher targets.
        y_pred: `[batch, K]` logits, or probabilities with `from_logits=False`.
        soft_labels: the `[K, K]` soft-label matrix `S`.
        alpha: weight of the hard-label term, in `[0, 1]`. Defaults to `0.5`.
        from_logits: whether `y_pred` are logits. Defaults to `True`.

    Returns:
        `[batch]` losses.

    Example:

    >>> import numpy as np
    >>> uniform = np.full((3, 3), 1 / 3)   # S at the start: label smoothing with epsilon = 1 - alpha
    >>> loss = online_label_smoothing_crossentropy([0], np.log([[0.8, 0.1, 0.1]]), uniform, alpha=0.5)
    >>> round(float(loss[0]), 4)
    0.9163
    """
    alpha = _common.setting("alpha", alpha, lambda name, value: number_in(name, value, 0.0, 1.0))
    y_pred = _common.predictions(y_pred, from_logits)
    targets, labels = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    rows = ops.one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
    soft = ops.matmul(rows, ops.cast(soft_labels, y_pred.dtype))  # row `label` of S, exactly
    return _common.crossentropy(alpha * targets + (1.0 - alpha) * soft, y_pred, from_logits)


@_bad_input.poisons_bad_input
def correct_statistics(y_true, y_pred, from_logits: bool = True):
    """`(sums [K, K], counts [K])` of a batch: per true class, the predicted distributions of its correctly
    classified examples, summed, and their number (no gradient); `OnlineLabelSmoothing`'s epoch statistics.

    `y_pred` may have leading axes (`[M, batch, K]`: `([M, K, K], [M, K])`,
    each batch's own).

    Example:

    >>> import numpy as np
    >>> sums, counts = correct_statistics([0, 0, 1], np.log([[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]]))
    >>> np.round(keras.ops.convert_to_numpy(sums), 4).tolist(), keras.ops.convert_to_numpy(counts).tolist()
    ([[0.8, 0.2], [0.4, 0.6]], [1.0, 1.0])
    """
    y_pred = ops.convert_to_tensor(y_pred)
    _, labels = _common.read_targets(ops.convert_to_tensor(y_true), y_pred)
    p = ops.stop_gradient(ops.cast(_common.probabilities(y_pred, from_logits)[0], "float32"))
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(p, axis=-1), "int32"), labels), "float32")
    members = ops.one_hot(labels, y_pred.shape[-1], dtype="float32") * correct[..., None]
    return ops.matmul(ops.swapaxes(members, -1, -2), p), ops.sum(members, axis=-2)


def soft_labels_from_statistics(correct_sums, correct_counts, previous):
    """The next `S`: row `y` is the normalised mean predicted distribution of the correct examples of class `y`.

    A row whose class had no correctly classified example keeps its previous
    value: the epoch brought no evidence about that class, and its last
    estimate is the best there is. The authors' code (zhangchbin/
    OnlineLabelSmoothing, `cifar/scripts/train_cifar_all_methods.py` and
    `fine-grained/solver.py`) resets such a row to uniform (`1/K`), which makes
    that class's soft term label smoothing for the next epoch; a widely copied
    re-implementation (Kurumi233/OnlineLabelSmoothing) zeroes it, dropping the
    soft term. The two rules agree until a class has been classified right
    once (`S` starts uniform); after that, a class the model stops getting
    right for an epoch (a learning-rate drop, strong augmentation, a small
    class in a large batch) keeps its learned row here instead of falling
    back to uniform smoothing.

    Args:
        correct_sums: `[K, K]` sums of the predicted distributions, per true
            class (`[..., K, K]`: one matrix per leading index).
        correct_counts: `[K]` numbers of correctly classified examples per class.
        previous: `[K, K]` the current `S`.

    Returns:
        `[K, K]` float32 tensor, rows summing to 1.

    Example:

    >>> sums = np.array([[1.6, 0.4], [0.0, 0.0]])
    >>> labels = soft_labels_from_statistics(sums, np.array([2.0, 0.0]), np.full((2, 2), 0.5))
    >>> ops.convert_to_numpy(labels).tolist()
    [[0.800000011920929, 0.20000000298023224], [0.5, 0.5]]
    """
    sums = ops.convert_to_tensor(correct_sums, "float32")
    counts = ops.convert_to_tensor(correct_counts, "float32")
    totals = ops.sum(sums, axis=-1, keepdims=True)  # mean then normalise = normalise the sums
    seen = ops.logical_and(counts > 0, totals[..., 0] > 0)
    rows = sums / ops.where(totals > 0, totals, ops.ones_like(totals))
    return ops.where(seen[..., None], rows, ops.convert_to_tensor(previous, "float32"))


def _next_soft_labels(statistics, soft_labels):
    """`EpochState.update` of `OnlineLabelSmoothing`: the next `S` from an epoch's summed `correct_statistics`."""
    return {"soft_labels": soft_labels_from_statistics(*statistics, soft_labels)}


class OnlineLabelSmoothingWarning(UserWarning):
    """An `OnlineLabelSmoothing` loss runs where its soft labels cannot learn: no `OnlineLabelSmoothingCallback`."""


@keras.saving.register_keras_serializable(package="keras_ils")
class OnlineLabelSmoothing(keras.losses.Loss):
    """Online label smoothing: cross-entropy against hard labels mixed with the model's own class-wise predictions.

    Zhang et al. (2021) replace label smoothing's uniform wrong-class mass
    with a soft label per class, learned online: row `y` of the K x K matrix
    `S` becomes, at the end of every epoch, the mean predicted distribution
    of that epoch's correctly classified training examples of class `y`
    (normalised). `S` starts uniform, so the first epoch is label smoothing
    with `epsilon = 1 - alpha`, as in the authors' fine-grained code; their
    CIFAR/ImageNet script starts from zeros, which makes its first epoch
    plain cross-entropy scaled by `alpha`. A class with no correctly
    classified example in an epoch keeps its row, where the authors' code
    resets it to uniform (`soft_labels_from_statistics` says why).

    Train with `OnlineLabelSmoothingCallback(loss)`, which updates `S` at the
    end of each epoch; without it `S` stays as it is, and a loss for which no
    callback was made and whose `S` was never learned warns once
    (`OnlineLabelSmoothingWarning`) at its first call. The module's note says
    how the statistics are gathered, saved and distributed, and why training
    is TensorFlow only. The statistics count every training example the model
    classifies right, whatever its `sample_weight`, as in the authors' code.

    `y_true` may be sparse labels, one-hot or soft rows (the hard term is
    against them and the label is their argmax), or the package's teacher
    targets (their one-hot half).

    Formula:

    ```
    loss = alpha * CE(y, p) + (1 - alpha) * CE(S[label], p)
    ```

    Args:
        num_classes: K, the model's number of classes (checked against
            `y_pred` at call time), `>= 2`.
        alpha: weight of the hard-label term, in `[0, 1]`. Defaults to `0.5`
            (the authors'; the grid used here is 0.25, 0.5, 0.75).
        from_logits: whether `y_pred` are logits (else probabilities: values
            that cannot be are refused, as `keras_ils.losses` says).
            Defaults to `True`.
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"online_label_smoothing"`.
        dtype: the loss's computation dtype. Defaults to `None` (floatx).

    Example:

    >>> import numpy as np
    >>> loss = OnlineLabelSmoothing(num_classes=3, alpha=0.5)
    >>> round(float(loss([0], np.log([[0.8, 0.1, 0.1]]))), 4)   # S uniform
    0.9163

    Usage with `compile()`:

    ```python
    loss = keras_ils.losses.OnlineLabelSmoothing(num_classes=10)
    model.compile(optimizer="adam", loss=loss)
    model.fit(x, y, epochs=30, callbacks=[keras_ils.losses.OnlineLabelSmoothingCallback(loss)])
    ```

    References:
        Zhang, Jiang, Hou, Cheng, Li & Shi (2021), "Delving Deep into Label
        Smoothing", IEEE Transactions on Image Processing.
    """

    def __init__(
        self,
        num_classes: int,
        alpha: float = 0.5,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "online_label_smoothing",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        integer_at_least("num_classes", num_classes, 2)
        number_in("alpha", alpha, 0.0, 1.0)
        self.num_classes = num_classes
        self.alpha = alpha
        self.from_logits = bool(from_logits)
        k = num_classes
        self.soft_labels = keras.Variable(
            np.full((k, k), 1.0 / k, np.float32), trainable=False, dtype="float32", name="soft_labels"
        )
        statistic = dict(trainable=False, dtype="float32", aggregation="sum", synchronization="on_read")
        self.correct_sums = keras.Variable(np.zeros((k, k), np.float32), name="correct_sums", **statistic)
        self.correct_counts = keras.Variable(np.zeros((k,), np.float32), name="correct_counts", **statistic)
        self._has_callback = False  # an OnlineLabelSmoothingCallback was made for this loss
        self._learned = False  # S was set by update_soft_labels or loaded
        self._warned = False

    def call(self, y_true, y_pred):
        if y_pred.shape[-1] != self.num_classes:
            raise ValueError(
                f"Invalid value for argument `num_classes`. Expected the model's number of classes, "
                f"{y_pred.shape[-1]} (the last axis of `y_pred`). Received: num_classes={self.num_classes}"
            )
        self._warn_if_unlearned()
        loss = online_label_smoothing_crossentropy(y_true, y_pred, self.soft_labels, self.alpha, self.from_logits)
        if keras.backend.backend() != "jax":  # see the module's note
            self._accumulate(y_true, y_pred)
        return loss

    def _warn_if_unlearned(self):
        """One `OnlineLabelSmoothingWarning` at the first call of a loss with no callback and an `S` never learned.

        Runs in Python when the loss is called or traced: Keras' first
        `fit`/`evaluate` step (its symbolic build) comes before any callback
        runs, so the callback registers itself when it is made.
        """
        if self._has_callback or self._learned or self._warned:
            return
        self._warned = True
        jax = (
            " (Keras' JAX trainer cannot update it: OLS trains on TensorFlow)"
            if keras.backend.backend() == "jax"
            else ""
        )
        warnings.warn(
            f"OnlineLabelSmoothing is used with no OnlineLabelSmoothingCallback made for it, so its soft labels S "
            f"stay uniform{jax}: trained like this it is label smoothing with epsilon = 1 - alpha = "
            f"{1 - self.alpha:g}, not online label smoothing. Pass "
            "`callbacks=[keras_ils.losses.OnlineLabelSmoothingCallback(loss)]` to `model.fit` (a custom training "
            "loop calls `loss.update_soft_labels()` and `loss.reset_statistics()` at each epoch's end).",
            OnlineLabelSmoothingWarning,
            stacklevel=3,
        )

    def _accumulate(self, y_true, y_pred):
        """Adds the batch's correctly classified predicted distributions to the epoch statistics."""
        sums, counts = correct_statistics(*_common.flattened(y_true, y_pred), self.from_logits)
        self.correct_sums.assign_add(sums)
        self.correct_counts.assign_add(counts)

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """`(correct_sums [K, K], correct_counts [K])` gathered since the last `reset_statistics`, as numpy."""
        return ops.convert_to_numpy(self.correct_sums), ops.convert_to_numpy(self.correct_counts)

    def reset_statistics(self) -> None:
        """Zeroes the epoch statistics."""
        self.correct_sums.assign(ops.zeros_like(self.correct_sums))
        self.correct_counts.assign(ops.zeros_like(self.correct_counts))

    def update_soft_labels(self, statistics=None) -> None:
        """Sets `S` from `statistics` (default: the current ones), per `soft_labels_from_statistics`."""
        sums, counts = self.statistics() if statistics is None else statistics
        self.soft_labels.assign(soft_labels_from_statistics(sums, counts, self.soft_labels))
        self._learned = True

    def functional_form(self) -> FunctionalForm:
        """`online_label_smoothing_crossentropy` with `S` as an `EpochState`: `correct_statistics` summed over
        an epoch, `soft_labels_from_statistics` at its end, as the callback does
        (`keras_ils.losses.functional_form`)."""
        state = EpochState(
            {"soft_labels": ops.convert_to_numpy(self.soft_labels)},
            correct_statistics if self.from_logits else functools.partial(correct_statistics, from_logits=False),
            _next_soft_labels,
        )
        arguments = {"alpha": self.alpha, "from_logits": self.from_logits}
        return FunctionalForm(online_label_smoothing_crossentropy, arguments, state=state)

    def save_own_variables(self, store):
        """Saves `S` with a `.keras` model compiled with this loss (the statistics are an epoch's, not saved)."""
        store["soft_labels"] = ops.convert_to_numpy(self.soft_labels)

    def load_own_variables(self, store):
        self.soft_labels.assign(np.asarray(store["soft_labels"]))
        self._learned = True

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, alpha=self.alpha, from_logits=self.from_logits, dtype=self.dtype)
        return config


class OnlineLabelSmoothingCallback(keras.callbacks.Callback):
    """Updates an `OnlineLabelSmoothing` loss's soft-label matrix at the end of every training epoch.

    At `on_epoch_begin` it zeroes the loss's statistics; at `on_epoch_end`
    it sets `S` from them (from a copy taken at `on_test_begin` when the
    epoch is validated, because the loss also runs on validation batches).
    TensorFlow backend only; see `keras_ils.losses.online`.

    Args:
        loss: the `OnlineLabelSmoothing` the model is compiled with.

    Example:

    >>> loss = OnlineLabelSmoothing(num_classes=3)
    >>> callback = OnlineLabelSmoothingCallback(loss)
    >>> callback.loss is loss
    True
    """

    def __init__(self, loss: OnlineLabelSmoothing):
        super().__init__()
        if not isinstance(loss, OnlineLabelSmoothing):
            raise TypeError(f"Argument `loss` must be an `OnlineLabelSmoothing`. Received: loss={loss!r}")
        self.loss = loss
        loss._has_callback = True  # before fit: Keras' first loss call (its symbolic build) precedes on_train_begin
        self._in_epoch = False
        self._snapshot = None

    def on_train_begin(self, logs=None):
        if keras.backend.backend() == "jax":
            raise RuntimeError(
                "OnlineLabelSmoothingCallback needs the TensorFlow backend: Keras' JAX trainer is stateless and "
                "does not carry a loss's variables through its training step, so the epoch statistics cannot grow."
            )
        compiled = keras.tree.flatten(getattr(self.model, "loss", None))
        if not any(loss is self.loss for loss in compiled):
            raise ValueError(
                "The model is not compiled with this callback's `OnlineLabelSmoothing` loss (after loading a "
                "model, build the callback from `model.loss`)."
            )

    def on_epoch_begin(self, epoch, logs=None):
        self.loss.reset_statistics()
        self._in_epoch, self._snapshot = True, None

    def on_test_begin(self, logs=None):
        if self._in_epoch and self._snapshot is None:
            self._snapshot = self.loss.statistics()

    def on_epoch_end(self, epoch, logs=None):
        self.loss.update_soft_labels(self._snapshot)
        self._in_epoch, self._snapshot = False, None
