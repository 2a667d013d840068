"""Temperature scaling: the layer, the 1-D fit, and one call to calibrate a model."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _labels
from keras_ils._checks import positive
from keras_ils.data import predict_with_labels


@keras.saving.register_keras_serializable(package="keras_ils")
class TemperatureScaling(keras.layers.Layer):
    """Divides logits by a temperature `T` (Guo et al., 2017).

    With `from_logits=False` the layer takes and returns probabilities:
    `softmax(log(p) / T)`.

    Args:
        temperature: initial (or fixed) temperature, `> 0`. Defaults to `1.0`.
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `trainable=False` fixes `T`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = TemperatureScaling(temperature=2.0)
    >>> keras.ops.convert_to_numpy(layer(np.array([[2.0, -4.0]])))
    array([[ 1., -2.]], dtype=float32)

    Usage with a trained model:

    ```python
    calibrated = keras.Sequential([model, keras_ils.TemperatureScaling(t_star, trainable=False)])
    ```

    References:
        Guo et al. (2017), "On Calibration of Modern Neural Networks".
    """

    def __init__(self, temperature: float = 1.0, from_logits: bool = True, **kwargs):
        super().__init__(**kwargs)
        positive("temperature", temperature)
        self.initial_temperature = float(temperature)
        self.from_logits = bool(from_logits)

    def build(self, input_shape):
        self.temperature = self.add_weight(
            name="temperature",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_temperature),
            trainable=True,
        )

    def call(self, inputs):
        temperature = ops.maximum(ops.cast(self.temperature, inputs.dtype), keras.config.epsilon())
        if self.from_logits:
            return inputs / temperature
        log_probabilities = ops.log(ops.clip(inputs, keras.config.epsilon(), 1.0))
        return ops.softmax(log_probabilities / temperature, axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "temperature": self.initial_temperature, "from_logits": self.from_logits}


def _nll_slopes(inverse_temperatures, logits, true_logits):
    """d/d(beta) of each model's mean NLL(softmax(beta * logits)): `E_p[z] - z_t`, increasing in beta; `[M]`."""
    z = logits * inverse_temperatures[:, None, None]
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    return np.mean((p * logits).sum(-1) - true_logits, axis=-1)


def fit_temperatures(logits, labels, *, bounds: tuple = (1e-2, 1e2), iterations: int = 100) -> np.ndarray:
    """`fit_temperature` for many models at once: `[M, n, K]` logits and `[M, n]` labels -> `[M]` T*.

    The NLL is convex in `beta = 1 / T`, so the optimum is where its
    derivative changes sign; bisection on that sign (in log space, float64,
    `iterations` halvings) finds it to machine precision. Where the NLL keeps
    falling at an end of `bounds` (e.g. a perfectly separated set), that end is
    returned.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, (2, 20000))
    >>> logits = 2.0 * (rng.normal(size=(2, 20000, 3)) + 2.0 * np.eye(3)[labels])
    >>> np.round(fit_temperatures(logits * np.array([3.0, 0.5])[:, None, None], labels), 1).tolist()
    [3.0, 0.5]
    """
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels, np.int64)
    true_logits = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    low, high = bounds
    lo, hi = np.full(len(logits), np.log(1.0 / high)), np.full(len(logits), np.log(1.0 / low))
    at_high = _nll_slopes(np.exp(lo), logits, true_logits) >= 0
    at_low = _nll_slopes(np.exp(hi), logits, true_logits) <= 0
    for _ in range(iterations):
        middle = 0.5 * (lo + hi)
        up = _nll_slopes(np.exp(middle), logits, true_logits) > 0
        hi = np.where(up, middle, hi)
        lo = np.where(up, lo, middle)
    temperature = np.exp(-0.5 * (lo + hi))
    return np.where(at_high, high, np.where(at_low, low, temperature))


def fit_temperature(logits, labels, *, bounds: tuple[float, float] = (1e-2, 1e2)) -> float:
    """The temperature `T*` minimising the NLL of `softmax(logits / T)`.

    The NLL is convex in `1 / T`, so the optimum is where its derivative
    changes sign; bisection on that sign (in log space, float64) finds it to
    machine precision (`fit_temperatures` does it for many models at once).
    Where the NLL keeps falling at an end of `bounds` (e.g. a perfectly
    separated set), that end is returned.

    Args:
        logits: `[n, K]` uncalibrated logits.
        labels: sparse labels `[n]`, one-hot/soft `[n, K]` or teacher targets.
        bounds: the range searched for `T`. Defaults to `(0.01, 100)`.

    Returns:
        `T*` as a Python float.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, 20000)
    >>> x = rng.normal(size=(20000, 3)) + 2.0 * np.eye(3)[labels]
    >>> calibrated_logits = 2.0 * x   # the true log-posteriors, up to a constant
    >>> round(fit_temperature(3.0 * calibrated_logits, labels), 1)   # 3x over-confident
    3.0

    References:
        Guo et al. (2017).
    """
    logits = np.asarray(ops.convert_to_numpy(logits), dtype=np.float64)
    if logits.ndim != 2 or logits.shape[1] < 2 or len(logits) == 0:
        raise ValueError(f"Argument `logits` must have shape [n >= 1, K >= 2]. Received shape: {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("Argument `logits` must be finite. Received NaN or infinite values.")
    low, high = bounds
    if not 0 < low < high:
        raise ValueError(f"Invalid value for argument `bounds`. Expected 0 < low < high. Received: bounds={bounds!r}")
    labels = ops.convert_to_numpy(_labels.hard_labels(labels, logits.shape[1], y_pred_rank=2))
    if len(labels) != len(logits):
        raise ValueError(f"`logits` and `labels` must have the same length. Received: {len(logits)} and {len(labels)}")
    return float(fit_temperatures(logits[None], labels[None], bounds=bounds)[0])


def calibrate(model: keras.Model, validation_data, *, from_logits: bool = True) -> keras.Model:
    """Fits `T*` on validation data and returns `model` followed by a fixed `TemperatureScaling`.

    Args:
        model: a trained Keras classifier.
        validation_data: a `tf.data.Dataset` of batched `(x, y)` or a tuple
            `(x, y)`; `y` sparse, one-hot or teacher targets.
        from_logits: whether `model` outputs logits (else probabilities).
            Defaults to `True`.

    Returns:
        A new model sharing `model`'s layers; its last layer is the
        `TemperatureScaling` holding `T*` (`calibrated.layers[-1].temperature`).

    Example:

    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    >>> y = (x[:, 0] > 0).astype("int32")
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> calibrated = calibrate(model, (x, y))
    >>> calibrated.predict(x, verbose=0).shape
    (64, 2)
    """
    outputs, y = predict_with_labels(model, validation_data)
    logits = outputs if from_logits else np.log(np.clip(outputs, keras.config.epsilon(), 1.0))
    temperature = fit_temperature(logits, y)
    scaling = TemperatureScaling(temperature, from_logits=from_logits, trainable=False, name="temperature_scaling")
    scaling.build(outputs.shape)
    name = f"{model.name}_calibrated"
    try:
        model_inputs = model.inputs
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return keras.Sequential([model, scaling], name=name)
    inputs = [keras.Input(shape=t.shape[1:], dtype=t.dtype) for t in model_inputs]
    outputs = scaling(model(inputs[0] if len(inputs) == 1 else inputs))
    return keras.Model(inputs, outputs, name=name)
