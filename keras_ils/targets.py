"""The ILS target math, written once, and the package's teacher-target layout.

Everything that turns labels (and a teacher's logits) into the soft targets a
student is trained against lives here: `ILSLoss`, the `tf.data` maps, the
baselines and the distillation code all call these functions.

Teacher-target layout
---------------------
Keras 3 hands a loss one `y_true` tensor per output, so the teacher's
information travels inside it. `teacher_targets(labels, teacher_logits)` builds
it and `keras_ils._labels` reads it; nothing else in the package knows the layout:

    y_true[..., :K]   one-hot encoding of the true class
    y_true[..., K:]   the CALIBRATED teacher's logits (raw logits / T*)

so a teacher-target `y_true` has `2 * K` columns for a `K`-class student.
Sparse labels (`[batch]` or `[batch, 1]`) and one-hot/soft targets
(`[batch, K]`) are accepted everywhere too; the column count tells the three
apart (`K >= 2`). One-hot rather than an integer column keeps the label exact
in any float dtype, `bfloat16` included.

Re-parameterisation relative to T*
----------------------------------
The paper's ILS2 temperature `T` divides the raw teacher logits. Here the
stored logits are already calibrated (`raw / T*`), and `temperature` divides
those: `temperature=1` is the calibrated teacher itself, and the paper's grid
`T` corresponds to `temperature = T / T*`. ILS1's `p_t` is always read from the
calibrated teacher (`temperature` does not touch it), as in the paper.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, get_args

import keras
from keras import ops
from numpy.typing import ArrayLike

from keras_ils import _bad_input, _labels
from keras_ils._checks import invalid

__all__ = [
    "FAMILIES",
    "METHODS",
    "METHOD_HYPERPARAMETERS",
    "Family",
    "Method",
    "ils_targets",
    "smoothing_factor",
    "targets_from_one_hot",
    "teacher_targets",
    "validate_hyperparameters",
]

# The target formulas `ILSLoss(method=...)` computes (the comparison methods built on them: `keras_ils.methods`).
Method = Literal["none", "ls", "ils1", "ils2", "ils"]
METHODS = get_args(Method)
# The hyperparameters each method reads, in the order a grid enumerates them (tuning and reports use this table).
METHOD_HYPERPARAMETERS = {
    "none": (),
    "ls": ("epsilon",),
    "ils1": ("p1", "p2"),
    "ils2": ("epsilon", "temperature"),
    "ils": ("p1", "p2", "temperature"),
}
Family = Literal["quadratic", "sinusoidal"]  # ILS1's smoothing curve
FAMILIES = get_args(Family)

_DEFAULTS = dict(epsilon=0.1, p1=0.9, p2=1.0, temperature=1.0, max_epsilon=0.2, family="quadratic")


def _real(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"Argument `{name}` must be a Python number. Received: {name}={value!r} of type {type(value).__name__}"
        )
    value = float(value)
    if not math.isfinite(value):
        raise invalid(name, "a finite number", value)
    return value


def validate_hyperparameters(
    method: Method = "ils",
    epsilon: float = _DEFAULTS["epsilon"],
    p1: float = _DEFAULTS["p1"],
    p2: float = _DEFAULTS["p2"],
    temperature: float = _DEFAULTS["temperature"],
    max_epsilon: float = _DEFAULTS["max_epsilon"],
    family: Family = _DEFAULTS["family"],
) -> dict:
    """Checks the ILS hyperparameters; raises `ValueError`/`TypeError` naming the argument.

    Returns:
        The hyperparameters as a dict of Python values.

    Example:

    >>> validate_hyperparameters("ils1", p1=0.8, p2=2)["p2"]
    2.0
    """
    if method not in METHODS:
        raise invalid("method", f"one of {METHODS}", method)
    if family not in FAMILIES:
        raise invalid("family", f"one of {FAMILIES}", family)
    epsilon, p1, p2 = _real("epsilon", epsilon), _real("p1", p1), _real("p2", p2)
    temperature, max_epsilon = _real("temperature", temperature), _real("max_epsilon", max_epsilon)
    if not 0.0 <= epsilon < 1.0:
        raise invalid("epsilon", "a float in [0, 1)", epsilon)
    if not 0.0 < p1 <= 1.0:
        raise invalid("p1", "a float in (0, 1]", p1)
    if p2 < 0.0:
        raise invalid("p2", "a float >= 0", p2)
    if temperature <= 0.0:
        raise invalid("temperature", "a float > 0", temperature)
    if not 0.0 <= max_epsilon < 1.0:
        raise invalid("max_epsilon", "a float in [0, 1)", max_epsilon)
    return dict(
        method=method,
        epsilon=epsilon,
        p1=p1,
        p2=p2,
        temperature=temperature,
        max_epsilon=max_epsilon,
        family=family,
    )


def _compute_dtype(x):
    """float32 for half-precision and integer inputs, otherwise the input's dtype."""
    dtype = keras.backend.standardize_dtype(x.dtype)
    return "float64" if dtype == "float64" else "float32"


def smoothing_factor(
    true_class_probability: ArrayLike,
    p1: float = _DEFAULTS["p1"],
    p2: float = _DEFAULTS["p2"],
    max_epsilon: float = _DEFAULTS["max_epsilon"],
    family: Family = _DEFAULTS["family"],
):
    """ILS1's instance smoothing factor as a function of the teacher's `p_t`.

    Formula:

    ```
    quadratic:   eps_x = min(max_epsilon, p2 * (p_t - p1) ** 2)
    sinusoidal:  eps_x = min(max_epsilon, 0.1 * (sin(p2 * (p_t - p1)) + 1))
    ```

    Args:
        true_class_probability: the calibrated teacher's probability of the
            true class, any shape.
        p1: where the parabola touches zero, in `(0, 1]`. Defaults to `0.9`.
        p2: its curvature, `>= 0`. Defaults to `1.0`.
        max_epsilon: upper clip, in `[0, 1)`. Defaults to `0.2`.
        family: `"quadratic"` (paper Eq. 3) or `"sinusoidal"` (paper §4.1).
            Defaults to `"quadratic"`.

    Returns:
        A float tensor of the input's shape.

    Example:

    >>> import numpy as np
    >>> eps = smoothing_factor(np.array([0.4, 0.8, 1.0]), p1=0.8, p2=2.0)
    >>> np.round(keras.ops.convert_to_numpy(eps), 4).tolist()
    [0.2, 0.0, 0.08]

    References:
        Maher & Kull (2021), §4.1 (ILS1).
    """
    hp = validate_hyperparameters(p1=p1, p2=p2, max_epsilon=max_epsilon, family=family)
    p_t = ops.convert_to_tensor(true_class_probability)
    p_t = ops.cast(p_t, _compute_dtype(p_t))
    if hp["family"] == "quadratic":
        eps = hp["p2"] * ops.square(p_t - hp["p1"])
    else:
        eps = 0.1 * (ops.sin(hp["p2"] * (p_t - hp["p1"])) + 1.0)
    return ops.minimum(eps, hp["max_epsilon"])


def _wrong_class_distribution(one_hot, scaled_logits, num_classes):
    """q_j / (1 - q_t) for j != t, computed as a softmax over the wrong classes.

    That is the exact value of the paper's ratio, and stays exact where
    rounding makes q_t == 1 in floating point. Only a row whose wrong classes
    carry no mass at all (every wrong logit -inf) falls back to uniform.
    """
    masked = ops.where(one_hot > 0.5, float("-inf"), scaled_logits)
    row_max = ops.max(masked, axis=-1, keepdims=True)
    row_max = ops.where(ops.isfinite(row_max), row_max, 0.0)
    unnormalised = ops.exp(masked - row_max)  # 0 at the true class
    total = ops.sum(unnormalised, axis=-1, keepdims=True)
    has_mass = total > 0
    uniform = (1.0 - one_hot) / (num_classes - 1.0)
    return ops.where(has_mass, unnormalised / ops.where(has_mass, total, 1.0), uniform)


def targets_from_one_hot(one_hot: ArrayLike, teacher_logits: ArrayLike | None = None, **hyperparameters):
    """`ils_targets` for one-hot labels: the one implementation every caller uses.

    Args:
        one_hot: `[..., K]` one-hot true classes (for `"none"` and `"ls"`,
            any soft target rows: label smoothing is the same linear map on them).
        teacher_logits: `[..., K]` calibrated teacher logits, or `None` for
            `"none"` and `"ls"`.
        **hyperparameters: `method`, `epsilon`, `p1`, `p2`, `temperature`,
            `max_epsilon`, `family` as in `ils_targets`.

    Returns:
        `[..., K]` targets: float64 for float64 inputs, float32 otherwise.
    """
    hp = validate_hyperparameters(**hyperparameters)
    method = hp["method"]
    one_hot = ops.convert_to_tensor(one_hot)
    dtype = _compute_dtype(one_hot if teacher_logits is None else ops.convert_to_tensor(teacher_logits))
    one_hot = ops.cast(one_hot, dtype)
    num_classes = one_hot.shape[-1]
    if num_classes is not None and num_classes < 2:
        raise invalid("labels", "at least 2 classes", f"{num_classes} classes")
    if method == "none":
        return one_hot
    # K as a Python number where the shape is static: fewer ops in every training step
    k = float(num_classes) if num_classes is not None else ops.cast(ops.shape(one_hot)[-1], dtype)
    if method == "ls":
        return one_hot * (1.0 - hp["epsilon"]) + hp["epsilon"] / k

    if teacher_logits is None:
        raise ValueError(
            f"Argument `teacher_logits` is required for method={method!r}; only 'none' and 'ls' work without a teacher."
        )
    logits = ops.stop_gradient(ops.cast(ops.convert_to_tensor(teacher_logits), dtype))
    if logits.shape[-1] is not None and num_classes is not None and logits.shape[-1] != num_classes:
        raise ValueError(
            "The teacher's class count must equal the labels'. Received: "
            f"teacher_logits with {logits.shape[-1]} classes for {num_classes} classes."
        )

    if method in ("ils1", "ils"):
        p_t = ops.sum(one_hot * ops.exp(ops.log_softmax(logits, axis=-1)), axis=-1, keepdims=True)
        epsilon = smoothing_factor(p_t, hp["p1"], hp["p2"], hp["max_epsilon"], hp["family"])
    else:
        epsilon = hp["epsilon"]
    if method == "ils1":
        return one_hot * (1.0 - epsilon) + epsilon / k
    scaled = logits if hp["temperature"] == 1.0 else logits / hp["temperature"]
    wrong = _wrong_class_distribution(one_hot, scaled, k)
    return one_hot * (1.0 - epsilon) + epsilon * wrong


@_bad_input.poisons_bad_input
def ils_targets(
    labels: ArrayLike,
    teacher_logits: ArrayLike | None = None,
    *,
    method: Method,
    epsilon: float = _DEFAULTS["epsilon"],
    p1: float = _DEFAULTS["p1"],
    p2: float = _DEFAULTS["p2"],
    temperature: float = _DEFAULTS["temperature"],
    max_epsilon: float = _DEFAULTS["max_epsilon"],
    family: Family = _DEFAULTS["family"],
    num_classes: int | None = None,
):
    """Soft targets for a student: no smoothing, LS, ILS1, ILS2 or ILS.

    Formula (`t` the true class, `K` classes, `p = softmax(teacher_logits)`,
    `q = softmax(teacher_logits / temperature)`):

    ```
    none:  y = onehot
    ls:    y = (1 - epsilon) * onehot + epsilon / K
    ils1:  eps_x = min(max_epsilon, p2 * (p_t - p1) ** 2)
           y = (1 - eps_x) * onehot + eps_x / K
    ils2:  y_t = 1 - epsilon;  y_j = epsilon * q_j / (1 - q_t)  for j != t
    ils:   ils2 with epsilon replaced by eps_x
    ```

    `teacher_logits` are the calibrated teacher's (raw logits / T*): see the
    module docstring for how `temperature` relates to the paper's `T`.

    Args:
        labels: integer class indices, `[batch]` (or `[batch, 1]`).
        teacher_logits: `[batch, K]` calibrated teacher logits; required for
            `"ils1"`, `"ils2"` and `"ils"`.
        method: one of `"none"`, `"ls"`, `"ils1"`, `"ils2"`, `"ils"`.
        epsilon: smoothing mass of `"ls"` and `"ils2"`, in `[0, 1)`.
            Defaults to `0.1`.
        p1: ILS1's `P1`, in `(0, 1]`. Defaults to `0.9`.
        p2: ILS1's `P2`, `>= 0`. Defaults to `1.0`.
        temperature: ILS2's temperature on the calibrated logits, `> 0`.
            Defaults to `1.0`.
        max_epsilon: clip of ILS1's `eps_x`, in `[0, 1)`. Defaults to `0.2`.
        family: ILS1's curve, `"quadratic"` or `"sinusoidal"`.
            Defaults to `"quadratic"`.
        num_classes: `K`; needed only when `teacher_logits` is `None`.

    Returns:
        `[batch, K]` targets, each row summing to 1: float64 when the teacher
        logits are float64, float32 otherwise.

    Example:

    >>> import numpy as np
    >>> y = ils_targets([0], np.log([[0.7, 0.2, 0.1]]), method="ils2", epsilon=0.1)
    >>> np.round(keras.ops.convert_to_numpy(y), 4).tolist()
    [[0.9, 0.0667, 0.0333]]
    >>> y = ils_targets([1], num_classes=3, method="ls", epsilon=0.3)
    >>> np.round(keras.ops.convert_to_numpy(y), 4).tolist()
    [[0.1, 0.8, 0.1]]

    References:
        Maher & Kull (2021), §4 (Eqs. 3-4).
    """
    if teacher_logits is not None:
        teacher_logits = ops.convert_to_tensor(teacher_logits)
        k = teacher_logits.shape[-1]
        if num_classes is not None and k is not None and k != num_classes:
            raise ValueError(
                "The teacher's class count must equal `num_classes`. Received: "
                f"teacher_logits with {k} classes, num_classes={num_classes}."
            )
        num_classes = k
    if num_classes is None:
        raise ValueError("Argument `num_classes` is required when `teacher_logits` is None.")
    return targets_from_one_hot(
        _labels.one_hot_labels(labels, num_classes),
        teacher_logits,
        method=method,
        epsilon=epsilon,
        p1=p1,
        p2=p2,
        temperature=temperature,
        max_epsilon=max_epsilon,
        family=family,
    )


@_bad_input.poisons_bad_input
def teacher_targets(labels: ArrayLike, teacher_logits: ArrayLike):
    """Packs labels and calibrated teacher logits into the package's `y_true` layout.

    The result is what `ILSLoss` and the package's metrics read as "teacher
    targets": `[batch, 2K]`, one-hot labels then the teacher's logits (see the
    module docstring). Build it with this function only.

    Args:
        labels: integer class indices, `[batch]` (or `[batch, 1]`).
        teacher_logits: `[batch, K]` calibrated teacher logits.

    Returns:
        A `[batch, 2K]` float32 tensor.

    Example:

    >>> import numpy as np
    >>> y = teacher_targets([2], np.array([[0.5, -1.0, 3.0]]))
    >>> keras.ops.convert_to_numpy(y)
    array([[ 0. ,  0. ,  1. ,  0.5, -1. ,  3. ]], dtype=float32)
    """
    teacher_logits = ops.convert_to_tensor(teacher_logits)
    if len(teacher_logits.shape) < 2 or teacher_logits.shape[-1] is None:
        raise ValueError(
            "Argument `teacher_logits` must have shape [batch, K] with a known K. "
            f"Received shape: {teacher_logits.shape}"
        )
    one_hot = _labels.one_hot_labels(labels, teacher_logits.shape[-1])
    if (
        one_hot.shape[0] is not None
        and teacher_logits.shape[0] is not None
        and one_hot.shape[0] != teacher_logits.shape[0]
    ):
        raise ValueError(
            "Arguments `labels` and `teacher_logits` must have one row per example each. "
            f"Received: {one_hot.shape[0]} labels and {teacher_logits.shape[0]} rows of teacher logits"
        )
    return _labels.pack_teacher_targets(one_hot, teacher_logits)


__all__ = [
    "FAMILIES",
    "METHODS",
    "METHOD_HYPERPARAMETERS",
    "ils_targets",
    "smoothing_factor",
    "targets_from_one_hot",
    "teacher_targets",
    "validate_hyperparameters",
]
