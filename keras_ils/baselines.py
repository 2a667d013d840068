"""The paper's baselines (§6), sharing the package's target math.

- cLS, class-similarity label smoothing (Liu & JaJa, 2021): the smoothing mass
  goes to the wrong classes in proportion to their similarity with the true
  class, computed from Euclidean distances between class means. It is ILS2's
  split with a per-CLASS "teacher": `class_similarity_logits` gives each class
  a row of logits `-distance / scale`, `teacher_targets(y, rows[y])`
  carries them, and `ILSLoss(method="ils2", epsilon=...)` trains on them.
- BS_Soft, soft bootstrapping (Reed et al., 2015): `BootstrapSoftLoss`, the
  target `beta * y + (1 - beta) * p` with `p` the current prediction
  (differentiated, as Reed et al.; see the class for why).
- Beta smoothing (Zhang & Sabuncu, 2020): `BetaSmoothingLoss`, per-example
  smoothing `b ~ Beta(a, 1)` handed out by confidence rank within the batch, `a` from the tuned
  LS epsilon (`beta_shape_for_epsilon`).
- Dis, one-level self-distillation: `keras_ils.distillation`.
- No LS + TempS and LS + TempS: `ILSLoss(method="none" | "ls")` then
  `keras_ils.calibrate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras
import numpy as np
from keras import ops
from numpy.typing import ArrayLike

from keras_ils import _bad_input, _labels
from keras_ils import targets as _targets
from keras_ils._checks import number_in, positive

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "BetaSmoothingLoss",
    "BootstrapSoftLoss",
    "beta_shape_for_epsilon",
    "beta_smoothing_targets",
    "bootstrap_targets",
    "class_similarity_logits",
]

_register = keras.saving.register_keras_serializable(package="keras_ils")


def class_similarity_logits(data: tf.data.Dataset | tuple, num_classes: int, temperature: float = 1.0) -> np.ndarray:
    """Per-class rows of similarity logits from Euclidean distances between class means, `[K, K]`.

    `logits[t, j] = -||mean_t - mean_j|| / (temperature * d)`, with `d` the mean
    distance between two different classes' means, so `temperature` is free of
    the features' scale. Row `t` used as the teacher logits of every class-`t`
    example makes `ILSLoss(method="ils2")` split the smoothing mass over the
    wrong classes by `softmax(-distance / (temperature * d))`: nearer classes
    get more.

    Args:
        data: `(features, labels)` arrays, or a `tf.data.Dataset` of `(x, y)`
            (batched or not; tfds dicts too); features are flattened per example.
        num_classes: `K`; every class must occur.
        temperature: `> 0`. Defaults to `1.0`.

    Returns:
        A `[K, K]` float32 array (its diagonal is never used).

    Example:

    >>> x, y = np.array([[0.0], [1.0], [3.0]]), np.array([0, 1, 2])
    >>> np.round(class_similarity_logits((x, y), 3), 2).tolist()   # mean distance 2
    [[-0.0, -0.5, -1.5], [-0.5, -0.0, -1.0], [-1.5, -1.0, -0.0]]
    """
    positive("temperature", temperature)
    if isinstance(data, (tuple, list)):
        features, labels = (np.asarray(a) for a in data)
        if len(features) != len(labels):
            raise ValueError(f"`features` has {len(features)} rows but `labels` has {len(labels)}.")
        batches = [(features, labels)]
    else:
        from keras_ils.data import as_pairs  # a tf.data.Dataset: TensorFlow is imported already

        pairs = as_pairs(data)
        if len(pairs.element_spec[1].shape) == 0:
            pairs = pairs.batch(1024)
        batches = ((x.numpy(), y.numpy()) for x, y in pairs)
    sums, counts = None, np.zeros(num_classes)
    for features, labels in batches:
        features = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        _labels.check_labels_in_range(labels, num_classes)
        sums = np.zeros((num_classes, features.shape[1])) if sums is None else sums
        np.add.at(sums, labels, features)
        counts += np.bincount(labels, minlength=num_classes)
    if sums is None or (counts == 0).any():
        missing = np.flatnonzero(counts == 0).tolist()
        raise ValueError(f"Every class needs examples to have a mean; classes {missing} have none.")
    means = sums / counts[:, None]
    distances = np.sqrt(((means[:, None, :] - means[None, :, :]) ** 2).sum(-1))
    scale = distances[~np.eye(num_classes, dtype=bool)].mean()
    return (-distances / (temperature * max(scale, 1e-12))).astype(np.float32)


def bootstrap_targets(
    one_hot: ArrayLike, student_logits: ArrayLike, beta: float = 0.95, back_propagate_prediction: bool = True
):
    """Soft-bootstrapping targets `beta * y + (1 - beta) * softmax(student)`.

    With `back_propagate_prediction=True` (Reed et al.'s formulation) the
    gradient flows through the prediction inside the target too, which makes
    the loss `beta * CE + (1 - beta) * entropy(p)`: minimum-entropy
    regularisation. With `False` the gradient of the cross-entropy is exactly
    `beta * (p - y)`, i.e. plain cross-entropy scaled by `beta`, which an
    adaptive optimizer such as Adam cannot tell from No LS.

    Example:

    >>> y = bootstrap_targets(np.eye(2)[[0]], np.log([[0.2, 0.8]]), beta=0.5)
    >>> np.round(keras.ops.convert_to_numpy(y), 4).tolist()
    [[0.6, 0.4]]
    """
    number_in("beta", beta, 0.0, 1.0, low_open=True)
    student_logits = ops.convert_to_tensor(student_logits)
    prediction = ops.softmax(student_logits, axis=-1)
    if not back_propagate_prediction:
        prediction = ops.stop_gradient(prediction)
    return beta * ops.cast(one_hot, prediction.dtype) + (1.0 - beta) * prediction


@_register
class BootstrapSoftLoss(keras.losses.Loss):
    """BS_Soft: cross-entropy against `beta * y + (1 - beta) * p`, `p` the student's own prediction.

    Formula (Reed et al., 2015, soft bootstrapping):

    ```
    loss = -sum_j (beta * y_j + (1 - beta) * p_j) * log p_j  =  beta * CE(y, p) + (1 - beta) * H(p)
    ```

    The gradient flows through both `p`s by default, as in Reed et al. The
    issue-tracker wording "the prediction not back-propagated" is available as
    `back_propagate_prediction=False`, but then the loss's gradient is exactly
    `beta` times plain cross-entropy's (see `bootstrap_targets`).

    `y_true` may be sparse labels, one-hot targets or teacher targets (the
    teacher part is ignored). The loss value stays bootstrapped in evaluation
    too; select models on a hard-label metric such as
    `keras_ils.metrics.NegativeLogLikelihood` (`val_nll`).

    Args:
        beta: weight of the given labels, in `(0, 1]`. Defaults to `0.95`
            (Reed et al.'s recommendation, used by the paper).
        back_propagate_prediction: whether the target's `p` is differentiated.
            Defaults to `True`.
        reduction: Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"bootstrap_soft"`.
        dtype: Defaults to `None`.

    Example:

    >>> loss = BootstrapSoftLoss(beta=0.5)
    >>> round(float(loss([0], np.log([[0.2, 0.8]]))), 4)   # -(0.6 log 0.2 + 0.4 log 0.8)
    1.0549

    References:
        Reed et al. (2015), "Training deep neural networks on noisy labels with bootstrapping".
    """

    def __init__(
        self,
        beta: float = 0.95,
        back_propagate_prediction: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "bootstrap_soft",
        dtype: str | None = None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        bootstrap_targets(np.eye(2)[:1], np.zeros((1, 2)), beta)  # validates beta
        self.beta = float(beta)
        self.back_propagate_prediction = bool(back_propagate_prediction)

    @_bad_input.poisons_bad_input
    def call(self, y_true, y_pred):
        y_true = ops.convert_to_tensor(y_true, dtype=self.dtype)
        num_classes = y_pred.shape[-1]
        labels = _labels.hard_labels(y_true, num_classes, len(y_pred.shape))
        one_hot = ops.one_hot(labels, num_classes)
        targets = bootstrap_targets(one_hot, y_pred, self.beta, self.back_propagate_prediction)
        return ops.categorical_crossentropy(targets, y_pred, from_logits=True)

    def get_config(self):
        return {
            **super().get_config(),
            "beta": self.beta,
            "back_propagate_prediction": self.back_propagate_prediction,
            "dtype": self.dtype,
        }


def _check_alpha(alpha):
    return number_in("alpha", alpha, 0.0, 1.0)


def beta_shape_for_epsilon(epsilon: float, num_classes: int, alpha: float = 0.4) -> float:
    """The `a` of `Beta(a, 1)` that gives Beta smoothing LS's expected smoothing mass.

    Solves `E[alpha * (1 - b)] = epsilon * (K - 1) / K` with `E[b] = a / (a + 1)`:
    on average Beta smoothing moves off the true class the mass that LS with the
    tuned `epsilon` moves. (The ILS paper states the condition as
    `E[alpha + (1 - alpha) b_i] = epsilon_LS`, which no `a` meets when
    `epsilon_LS < alpha = 0.4`; matching the smoothing mass is our reading. With
    `epsilon = 0.1` it gives `a` near the authors' default of 3.)

    Example:

    >>> round(beta_shape_for_epsilon(0.1, 10, alpha=0.4), 4)   # E[b] = 0.775
    3.4444
    """
    _targets.validate_hyperparameters("ls", epsilon=epsilon)
    if _check_alpha(alpha) == 0.0:
        raise ValueError("Invalid value for argument `alpha`. Expected a float in (0, 1] to match an epsilon.")
    mean_b = 1.0 - epsilon * (num_classes - 1) / (num_classes * alpha)
    if not 0.0 < mean_b < 1.0:
        raise ValueError(
            f"No Beta(a, 1) matches epsilon={epsilon} with alpha={alpha}: the smoothing mass "
            f"{epsilon * (num_classes - 1) / num_classes:.4f} must be below alpha (and above 0)."
        )
    return mean_b / (1.0 - mean_b)


def beta_smoothing_targets(one_hot: ArrayLike, student_logits: ArrayLike, beta_samples: ArrayLike, alpha: float = 0.4):
    """Beta smoothing targets (Zhang & Sabuncu, 2020), the samples assigned by confidence rank.

    The batch's `b` samples are sorted and handed out by the rank of each
    example's predicted true-class probability (not back-propagated): the
    least confident example gets the smallest `b`, i.e. the most smoothing.
    The authors' code ranks by an exponential-moving-average copy of the
    network (decay 0.999); here the network's own current prediction ranks,
    which needs no second set of weights.

    Formula:

    ```
    y = (1 - alpha) * onehot + alpha * (b * onehot + (1 - b) / (K - 1) * (1 - onehot))
    ```

    Example:

    >>> y = beta_smoothing_targets(np.eye(2)[[0, 0]], np.log([[0.9, 0.1], [0.6, 0.4]]), [0.5, 1.0], alpha=1.0)
    >>> np.round(keras.ops.convert_to_numpy(y), 4).tolist()   # the confident row gets b = 1.0
    [[1.0, 0.0], [0.5, 0.5]]
    """
    student_logits = ops.convert_to_tensor(student_logits)
    one_hot = ops.cast(one_hot, student_logits.dtype)
    true_probability = ops.sum(one_hot * ops.stop_gradient(ops.softmax(student_logits, axis=-1)), axis=-1)
    rank = ops.argsort(ops.argsort(true_probability))
    b = ops.take(ops.sort(ops.cast(beta_samples, student_logits.dtype)), rank)[:, None]
    num_classes = ops.cast(ops.shape(one_hot)[-1], one_hot.dtype)
    smoothed = b * one_hot + (1.0 - b) / (num_classes - 1.0) * (1.0 - one_hot)
    return (1.0 - alpha) * one_hot + alpha * smoothed


@_register
class BetaSmoothingLoss(keras.losses.Loss):
    """Beta smoothing (Zhang & Sabuncu, 2020): instance-specific LS without a teacher.

    Each batch draws `b ~ Beta(a, 1)` per example and assigns the sorted
    draws by the rank of the student's own confidence in the true class
    (`beta_smoothing_targets`). Pick `a` with `beta_shape_for_epsilon` from a
    tuned LS epsilon, as the ILS paper does. The loss is random in evaluation
    too; select models on `keras_ils.metrics.NegativeLogLikelihood` (`val_nll`).

    Args:
        alpha: weight of the Beta-smoothed part (`1 - alpha` stays on the hard
            label), in `[0, 1]`. Defaults to `0.4`, the ILS paper's setting
            (the authors' code defaults to 0.6).
        a: shape `a > 0` of `Beta(a, 1)`. Defaults to `1.0`.
        seed: seed of the Beta draws. Defaults to `None`.
        reduction: Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"beta_smoothing"`.
        dtype: Defaults to `None`.

    Example:

    >>> loss = BetaSmoothingLoss(alpha=0.4, a=beta_shape_for_epsilon(0.1, 3), seed=0)
    >>> float(loss([0, 2], np.log([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]))) > 0
    True

    References:
        Zhang & Sabuncu (2020), "Self-Distillation as Instance-Specific Label Smoothing", §5.
    """

    def __init__(
        self,
        alpha: float = 0.4,
        a: float = 1.0,
        seed: int | None = None,
        reduction: str | None = "sum_over_batch_size",
        name: str = "beta_smoothing",
        dtype: str | None = None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _check_alpha(alpha)
        positive("a", a)
        self.alpha, self.a, self.seed = float(alpha), float(a), seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    @_bad_input.poisons_bad_input
    def call(self, y_true, y_pred):
        y_true = ops.convert_to_tensor(y_true, dtype=self.dtype)
        num_classes = y_pred.shape[-1]
        labels = _labels.hard_labels(y_true, num_classes, len(y_pred.shape))
        # Beta(a, 1) by its inverse CDF, u ** (1 / a): exact, and XLA compiles it (a gamma sampler it does not).
        uniform = keras.random.uniform(ops.shape(labels), dtype=y_pred.dtype, seed=self._seed_generator)
        samples = ops.power(uniform, 1.0 / self.a)
        targets = beta_smoothing_targets(ops.one_hot(labels, num_classes), y_pred, samples, self.alpha)
        return ops.categorical_crossentropy(targets, y_pred, from_logits=True)

    def get_config(self):
        return {
            **super().get_config(),
            "alpha": self.alpha,
            "a": self.a,
            "seed": self.seed,
            "dtype": self.dtype,
        }
