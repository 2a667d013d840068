"""Ensemble temperature scaling (Mix-n-Match, Zhang et al. 2020): the layer and its fit on validation outputs.

The calibrated distribution is a convex mixture of the temperature-scaled
prediction, the model's own prediction and the uniform distribution:

```
q = w1 * softmax(z / T) + w2 * softmax(z) + w3 / K,    w >= 0, w1 + w2 + w3 = 1
```

`T` is the package's temperature scaling (`fit_calibrator("temperature")`,
maximum a posteriori by default). The weights follow the authors' code
(`ensemble_scaling(logit, label, 'mse', t, n_class)` in
zhang64-llnl/Mix-n-Match-Calibration `util_calibration.py`, as its
`ets_calibrate` calls it): they minimise the mean squared error between `q`
and the one-hot labels, `mean_{i,j} (q_ij - y_ij)^2` (the Brier score over
`K`), over the simplex. The authors solve it with scipy's SLSQP from
`(1, 0, 0)`; it is a convex quadratic in three weights, solved here exactly
by its KKT conditions on each face of the simplex. Its coefficients need
five sums over the examples (`sum_j q1_j^2`, `sum_j q1_j q2_j`, `sum_j
q2_j^2` and the two true-class probabilities per row, `q1 = softmax(z / T)`,
`q2 = softmax(z)`): one more pass over the float32 logits after the
temperature fit's (`keras.ops` on the Keras backend's device, or numpy where
the temperature fit's passes are), with no `[3, n, K]` stack of the
components. (Their `ets_calibrate`
also fits `T` by that squared error, within `(0.05, 5)`; here `T` is the NLL
temperature scaling of the rest of the package, as the paper describes ETS
as an ensemble around temperature scaling.) With `w3 > 0` no probability is
0; the layer computes `log q` as a log-sum-exp of the three log-probabilities,
so it is finite whatever the weights.
"""

from __future__ import annotations

import functools
import itertools

import keras
import numpy as np
from keras import ops

from keras_ils._checks import invalid, positive
from keras_ils._outputs import log_probabilities, log_probabilities_tensor
from keras_ils.calibration import _device, temperature
from keras_ils.calibration import _temperature_solver as solver
from keras_ils.calibration._float32 import float32_by_default, to_compute_dtype
from keras_ils.calibration.reports import CalibratorFit, few_examples, mean_nll, message

__all__ = ["EnsembleTemperatureScaling", "fit_ensemble_temperature", "simplex_least_squares"]

_ABSENT = -1e30  # the log of a zero weight: its component drops out of the log-sum-exp, which stays finite


@keras.saving.register_keras_serializable(package="keras_ils")
class EnsembleTemperatureScaling(keras.layers.Layer):
    """Mix-n-Match ensemble temperature scaling: `w1 softmax(z / T) + w2 softmax(z) + w3 / K`, as log-probabilities.

    Outputs `log q` (so `softmax` of the output is `q`); with
    `from_logits=False` it takes probabilities `p` (reading `z = log p`) and
    returns `q`. Fitted by `fit_calibrator("ensemble_temperature", ...)`; see
    the module docstring for the fit.

    Formula:

    ```
    q = w1 * softmax(z / T) + w2 * softmax(z) + w3 / K
    ```

    Args:
        temperature: `T`, `> 0`. Defaults to `1.0`.
        ensemble_weights: `(w1, w2, w3)`, non-negative and summing to 1
            (within 1e-6). Defaults to `(1.0, 0.0, 0.0)` (temperature
            scaling alone).
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = EnsembleTemperatureScaling(temperature=2.0, ensemble_weights=(0.5, 0.25, 0.25))
    >>> logits = np.log(np.array([[0.64, 0.16, 0.2]]))     # softmax(z / 2) = [0.8, 0.4, 0.447] / 1.647
    >>> np.round(keras.ops.convert_to_numpy(keras.ops.exp(layer(logits))), 4)
    array([[0.4862, 0.2448, 0.2691]], dtype=float32)

    References:
        Zhang, Kailkhura & Han (2020), "Mix-n-Match: Ensemble and
        Compositional Methods for Uncertainty Calibration in Deep
        Learning", ICML, §4.1.
    """

    def __init__(
        self,
        temperature: float = 1.0,
        ensemble_weights: tuple = (1.0, 0.0, 0.0),
        from_logits: bool = True,
        **kwargs,
    ):
        super().__init__(**float32_by_default(kwargs))
        self.initial_temperature = positive("temperature", temperature)
        self.ensemble_weights = _check_weights(ensemble_weights)
        self.from_logits = bool(from_logits)

    def build(self, input_shape):
        if input_shape[-1] is None or input_shape[-1] < 2:
            raise ValueError(
                "EnsembleTemperatureScaling needs inputs with a known number of classes K >= 2 in their last axis. "
                f"Received input shape: {tuple(input_shape)}"
            )
        self.temperature = self.add_weight(
            name="temperature",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_temperature),
            trainable=False,
        )
        self.mixture = self.add_weight(
            name="ensemble_weights",
            shape=(3,),
            initializer=keras.initializers.Constant(np.array(self.ensemble_weights)),
            trainable=False,
        )

    def call(self, inputs):
        inputs = to_compute_dtype(self, inputs)
        logits = inputs if self.from_logits else log_probabilities_tensor(inputs)
        temperature = ops.maximum(ops.cast(self.temperature, inputs.dtype), keras.config.epsilon())
        mixture = ops.cast(self.mixture, inputs.dtype)
        log_weights = ops.where(mixture > 0, ops.log(ops.where(mixture > 0, mixture, 1.0)), _ABSENT)
        num_classes = ops.shape(inputs)[-1]
        components = ops.stack(
            [
                log_weights[0] + ops.log_softmax(logits / temperature, axis=-1),
                log_weights[1] + ops.log_softmax(logits, axis=-1),
                log_weights[2] + ops.zeros_like(logits) - float(np.log(num_classes)),
            ]
        )
        log_probabilities = ops.logsumexp(components, axis=0)
        return log_probabilities if self.from_logits else ops.exp(log_probabilities)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "temperature": self.initial_temperature,
            "ensemble_weights": self.ensemble_weights,
            "from_logits": self.from_logits,
        }


def _check_weights(weights) -> tuple:
    """`weights` as a tuple of three floats on the simplex, else the Keras-style `ValueError`."""
    expected = "three non-negative floats summing to 1"
    try:
        values = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid("ensemble_weights", expected, weights) from None
    if values.shape != (3,) or not np.all(np.isfinite(values)) or values.min() < 0 or abs(values.sum() - 1) > 1e-6:
        raise invalid("ensemble_weights", expected, weights)
    return tuple(float(v) for v in values)


def simplex_least_squares(components, targets) -> tuple:
    """`(w, value)`: the `w` on the simplex minimising `mean((sum_i w_i components[i] - targets)^2)`, exactly.

    `components` is `[m, n, K]`, `targets` `[n, K]`. The objective is a
    convex quadratic in `w`; each face of the simplex (each non-empty support)
    is solved by its KKT system (least norm where the quadratic is flat),
    and the best feasible face's solution is the minimum.
    """
    flat = components.reshape(len(components), -1)
    gram, cross = flat @ flat.T / flat.shape[1], flat @ targets.ravel() / flat.shape[1]
    return _simplex_quadratic(gram, cross, float(np.mean(targets**2)))


def _simplex_quadratic(gram, cross, constant) -> tuple:
    """`(w, value)` minimising `w' gram w - 2 cross' w + constant` on the simplex (`simplex_least_squares`)."""
    m = len(gram)
    best, best_value = None, np.inf
    for size in range(1, m + 1):
        for support in itertools.combinations(range(m), size):
            s = list(support)
            system = np.zeros((size + 1, size + 1))
            system[:size, :size], system[:size, size], system[size, :size] = 2 * gram[np.ix_(s, s)], 1.0, 1.0
            solution = np.linalg.lstsq(system, np.r_[2 * cross[s], 1.0], rcond=None)[0][:size]
            if solution.min() < -1e-12:
                continue
            w = np.zeros(m)
            w[s] = np.clip(solution, 0.0, None) / np.clip(solution, 0.0, None).sum()
            value = float(w @ gram @ w - 2 * cross @ w + constant)
            if value < best_value - 1e-15:
                best, best_value = w, value
    return best, best_value


def fit_ensemble_temperature(
    outputs,
    labels,
    *,
    from_logits: bool = True,
    estimator: str = "map",
    prior_scale: float = temperature.DEFAULT_PRIOR_SCALE,
    bounds: tuple | None = None,
):
    """Fits an `EnsembleTemperatureScaling` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    `T` by temperature scaling (`estimator`, `prior_scale`, `bounds`), then
    the weights by `simplex_least_squares`' quadratic (see the module
    docstring). The report's warning relays the temperature fit's, and its
    status is `"few_examples"` when a class has fewer than
    `MIN_EXAMPLES_PER_CLASS` examples. `fit_calibrator` checks `outputs`
    against `from_logits` first.
    """
    logits, labels = temperature._checked(outputs, labels, name="outputs")
    if not from_logits:
        logits = log_probabilities(logits)
    n, num_classes = logits.shape
    temperature_fit = temperature._fit(logits, labels, estimator, prior_scale, bounds)
    squares, chosen = _mixture_sums(logits, labels, temperature_fit.temperature)
    uniform = 1.0 / num_classes**2  # every product with the uniform component, and with the one-hot targets
    gram = np.array([[squares[0], squares[1], uniform], [squares[1], squares[2], uniform], [uniform] * 3])
    cross = np.r_[chosen.sum(axis=1) / (n * num_classes), uniform]
    weights, objective = _simplex_quadratic(gram, cross, 1.0 / num_classes)
    layer = EnsembleTemperatureScaling(
        temperature_fit.temperature, tuple(weights), from_logits=from_logits, trainable=False
    )
    layer.build((None, num_classes))
    too_few = few_examples(labels, num_classes)
    relayed = f"its temperature: {temperature_fit.warning}" if temperature_fit.warning else None
    text = message("ensemble_temperature", [too_few, relayed])
    mixture = weights[0] * chosen[0] + weights[1] * chosen[1] + weights[2] / num_classes  # q[label], per example
    nll = mean_nll(mixture[:, None], np.zeros(n, int))
    return layer, CalibratorFit(
        "ensemble_temperature", "few_examples" if too_few else "fitted", n, nll, objective, 0, text,
        temperature=temperature_fit.temperature, estimator=estimator,
    )  # fmt: skip


def _mixture_sums(logits, labels, temperature_value):
    """`(means over the n K entries of q1^2, q1 q2, q2^2 [3], the true-class q1 and q2 [2, n])`, float64."""
    n, k = logits.shape
    scale = np.float32(1.0 / temperature_value)
    if logits.size <= solver.CPU_CACHE:  # one block: on the host, as the temperature fit's passes
        per_row = _mixture_block(_device.HOST, logits, labels, scale)
    else:
        cut = solver.rows_layout(n, k)
        chunks = zip(_device.blocked(logits, 0, cut), _device.blocked(labels.astype(np.int32), 0, cut), strict=True)
        function = _compiled_mixture_pass(keras.backend.backend())
        beta = _device.tensor(scale)
        per_block = [_device.numpy(function(_device.tensor(z), _device.tensor(y), beta)) for z, y in chunks]
        per_row = np.concatenate(per_block).transpose(1, 0, 2).reshape(5, -1)[:, :n]
    per_row = per_row.astype(np.float64)
    return per_row[:3].sum(axis=1) / logits.size, per_row[3:]


def _mixture_block(xp, z, labels, scale):
    """Per row of `z [r, K]` (`xp`: `keras.ops` or `_device.HOST`): `sum q1^2, sum q1 q2, sum q2^2, q1[y], q2[y]`
    as `[5, r]` float32, `q1` the softmax at the float32 `scale = 1 / T`, `q2` at 1."""
    d = z - xp.max(z, axis=-1, keepdims=True)
    scaled, plain = xp.exp(scale * d), xp.exp(d)
    scaled, plain = scaled / xp.sum(scaled, axis=-1, keepdims=True), plain / xp.sum(plain, axis=-1, keepdims=True)
    rows = labels[:, None]
    values = (
        xp.sum(scaled * scaled, axis=-1),
        xp.sum(scaled * plain, axis=-1),
        xp.sum(plain * plain, axis=-1),
        xp.take_along_axis(scaled, rows, axis=-1)[:, 0],
        xp.take_along_axis(plain, rows, axis=-1)[:, 0],
    )
    return xp.stack(values)


def _mixture_pass(logits, labels, scale):
    """`_mixture_block` over a chunk, a block at a time: `(logits [b, r, K], labels [b, r], scale)` -> `[b, 5, r]`."""
    return ops.map(lambda block: _mixture_block(ops, *block, scale), (logits, labels))


@functools.cache
def _compiled_mixture_pass(backend: str):
    """`_mixture_pass` compiled by `backend`."""
    return _device.compiled(_mixture_pass)
