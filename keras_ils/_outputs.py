"""Logits or probabilities: what a classifier's outputs are, read from the model or checked against a declaration.

Private helpers, the one place that decides the kind of a classifier's outputs.
Every public entry point that reads outputs on the host (the post-hoc fits,
the numpy scores, `calibrate(model)`, `evaluate(model)`) calls them at the
door:

- `check_outputs_kind(outputs, from_logits)` refuses a declaration that the
  values contradict: rows that are all distributions declared as logits, or
  values outside `[0, 1]` / rows not summing to 1 declared as probabilities.
  The error states the fix.
- `model_from_logits(model, outputs, from_logits)` resolves `from_logits=None`
  for a model: a model whose last layer ends in a softmax outputs
  probabilities (the way most Keras tutorials end a classifier); otherwise the
  values decide (every row a distribution: probabilities). An explicit
  `True`/`False` is checked against the values.

A row "is a distribution" when its values lie in `[0, 1]` and sum to 1 within
`PROBABILITY_TOLERANCE` (bfloat16 softmax outputs round by up to 0.4 %). Logits
of a real network never make every row one; a single row of logits may, which
is why only an explicit declaration is ever refused, never guessed past.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_ils._labels import PROBABILITY_TOLERANCE

__all__ = [
    "check_outputs_kind",
    "is_distribution",
    "log_probabilities",
    "log_probabilities_tensor",
    "model_ends_in_softmax",
    "model_from_logits",
]


def is_distribution(outputs) -> bool:
    """Whether every row of `outputs [..., K]` lies in `[0, 1]` and sums to 1 (within `PROBABILITY_TOLERANCE`).

    Example:

    >>> is_distribution(np.array([[0.2, 0.8], [1.0, 0.0]])), is_distribution(np.array([[2.0, -1.0]]))
    (True, False)
    """
    outputs = np.asarray(outputs)
    if outputs.size == 0:
        return False
    in_range = outputs.min() >= -PROBABILITY_TOLERANCE and outputs.max() <= 1 + PROBABILITY_TOLERANCE
    return bool(in_range and np.abs(outputs.sum(axis=-1, dtype=np.float64) - 1).max() <= PROBABILITY_TOLERANCE)


def log_probabilities(probabilities) -> np.ndarray:
    """`log p` of probabilities, which a fit reads as logits (the logits up to a shift per row), nothing clipped.

    Only 0 is floored: at the smallest normal number of the array's dtype
    (float32 at least: 1.2e-38, `log` -87.3), where a float32 softmax
    underflows. A floor at `keras.config.epsilon()` (1e-7) would cut every
    logit gap above 16 nats, which a confident softmax model has, and the
    map fitted on the cut values would not be its logit twin's.

    Example:

    >>> log_probabilities(np.array([[1.0, 1e-20, 0.0]], "float32")).round(1).tolist()
    [[0.0, -46.1, -87.3]]
    """
    probabilities = np.asarray(probabilities)
    tiny = np.finfo(np.result_type(probabilities.dtype, np.float32)).tiny
    return np.log(np.clip(probabilities, tiny, 1.0))


def log_probabilities_tensor(probabilities):
    """`log_probabilities` in `keras.ops`, for the calibration layers' `call`: the map served is the map fitted.

    0 is floored at the smallest normal number of the tensor's dtype (float16,
    whose smallest normal is 6.1e-5, at `keras.config.epsilon()` as before).

    Example:

    >>> x = keras.ops.convert_to_tensor(np.array([[1.0, 1e-20, 0.0]], "float32"))
    >>> np.round(keras.ops.convert_to_numpy(log_probabilities_tensor(x)), 1).tolist()
    [[0.0, -46.1, -87.3]]
    """
    dtype = keras.backend.standardize_dtype(probabilities.dtype)
    if dtype == "float16":
        floor = keras.config.epsilon()
    else:  # bfloat16 has float32's exponent range
        floor = float(np.finfo("float32" if dtype == "bfloat16" else dtype).tiny)
    return keras.ops.log(keras.ops.clip(probabilities, floor, 1.0))


def check_outputs_kind(outputs, from_logits: bool, name: str = "outputs") -> None:
    """Refuses `outputs` whose values contradict `from_logits`, with a `ValueError` that names `name` and the fix.

    Non-finite values are left to the callers' own checks (they name them).

    Example:

    >>> check_outputs_kind(np.array([[2.0, -1.0]]), from_logits=True)   # logits: fine
    >>> check_outputs_kind(np.array([[0.3, 0.7], [0.9, 0.1]]), from_logits=True)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `outputs`: it was declared as logits (`from_logits=True`), but every row ...
    """
    outputs = np.asarray(outputs)
    if outputs.size == 0 or not (np.isfinite(outputs.min()) and np.isfinite(outputs.max())):
        return  # min and max: no boolean copy of a large array
    if from_logits and is_distribution(outputs):
        raise ValueError(
            f"Invalid value for argument `{name}`: it was declared as logits (`from_logits=True`), but every row "
            f"lies in [0, 1] and sums to 1, as probabilities do (a model ending in a softmax). Pass "
            "`from_logits=False` for probabilities (or give the logits before the softmax)."
        )
    if not from_logits and not is_distribution(outputs):
        sums = outputs.sum(axis=-1, dtype=np.float64)
        raise ValueError(
            f"Invalid value for argument `{name}`: it was declared as probabilities (`from_logits=False`), but its "
            f"values lie in [{outputs.min():.4g}, {outputs.max():.4g}] and its rows sum to [{sums.min():.4g}, "
            f"{sums.max():.4g}]; probabilities lie in [0, 1] and sum to 1 (within {PROBABILITY_TOLERANCE:g}). Pass "
            "`from_logits=True` for logits."
        )


def _last_layer(model):
    """The layer that computes `model`'s output (a nested model's own last layer), or `None` when it cannot be told.

    Layers of Sequential and functional models are in topological order, so
    the last one computes a one-output model's output; subclassed models
    (which may compute anything after their last layer) are not read.
    """
    while isinstance(model, (keras.Sequential, keras.Model)):
        if not isinstance(model, keras.Sequential) and not _is_functional(model):
            return None
        try:
            if len(model.outputs) != 1:
                return None
        except (AttributeError, ValueError):  # a Sequential model never built has no symbolic outputs
            pass
        if not model.layers:
            return None
        model = model.layers[-1]
    return model


def _is_functional(model) -> bool:
    """Whether `model` is a functional model (`keras.Model(inputs, outputs)`, a `keras.Function`), not subclassed."""
    return isinstance(model, keras.Function)


def model_ends_in_softmax(model) -> bool:
    """Whether `model`'s last layer ends in a softmax: a `Softmax` layer, or a layer with `activation="softmax"`.

    Example:

    >>> model_ends_in_softmax(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")]))
    True
    >>> model_ends_in_softmax(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    False
    """
    layer = _last_layer(model)
    if layer is None:
        return False
    if isinstance(layer, keras.layers.Softmax):
        return True
    activation = getattr(layer, "activation", None)
    return activation is keras.activations.softmax or getattr(activation, "__name__", None) == "softmax"


def model_from_logits(model, outputs, from_logits: bool | None, name: str = "from_logits") -> bool:
    """Whether `model`'s `outputs` are logits: `from_logits` checked against them, or read when it is `None`.

    `None` reads the model: one ending in a softmax gives probabilities;
    otherwise the values decide (every row a distribution: probabilities).

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="softmax")])
    >>> model_from_logits(model, model.predict(np.ones((4, 2)), verbose=0), None)
    False
    """
    outputs = np.asarray(outputs)
    if from_logits is None:
        return not (model_ends_in_softmax(model) or is_distribution(outputs))
    if not isinstance(from_logits, bool):
        raise TypeError(f"Argument `{name}` must be True, False or None. Received: {name}={from_logits!r}")
    if not from_logits and model_ends_in_softmax(model):
        return False  # the model's own softmax is the declaration; bfloat16 rounding is the check's business
    check_outputs_kind(outputs, from_logits, name="the model's outputs")
    return from_logits
