"""The affine maps' data term: the validation mean NLL and its analytic gradient, one pass over the features.

For calibrated logits `z = x @ W + b` (matrix scaling, Dirichlet
calibration) or `z = x * s + b` (vector scaling) of `n` examples, with `p`
their softmax and `Y` the one-hot labels (softmax regression):

```
nll = mean_i (logsumexp(z_i) - z_i[y_i])
dW  = x^T (p - Y) / n        ds = sum_i x_i * (p_i - Y_i) / n        db = sum_i (p_i - Y_i) / n
```

A class in `absent` (no fitting example) takes no part in the softmax: its
logit is dropped, so its parameters get no gradient and stay where the fit
put them (`keras_ils.calibration.affine_fit` holds them at temperature
scaling's map).

Where the pass runs: it costs about `n P` multiply-adds for `P` parameters.
Beyond `NUMPY_MAX_WORK` it is `keras.ops`, compiled by the Keras backend and
run where it computes (`keras_ils.calibration._device`: on the GPU when it
has one, under any backend, with no TensorFlow needed under JAX or torch);
below, NumPy, because a compiled call costs tens of microseconds to a
millisecond of dispatch, 10-30 times a NumPy pass on the small-data rule's
problems (tens to thousands of examples, hundreds of passes per fit).
Features of more than `FLOAT64_MAX_ENTRIES` entries are float32 (the
products, the softmax), with float64 sums over the examples (the NLL, the
bias's and the scale's gradients); smaller ones are float64 throughout, so
a fit there reaches a gradient of `1e-8`.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
from keras import ops

from keras_ils.calibration import _device

__all__ = ["FLOAT64_MAX_ENTRIES", "NUMPY_MAX_WORK", "Passes", "split"]

NUMPY_MAX_WORK = 5e5  # n * P at most: the pass is NumPy's (TensorFlow's dispatch would cost more than the pass)
FLOAT64_MAX_ENTRIES = 1 << 22  # n * K at most: the features stay float64 (about 4 million entries, 32 MiB)
_CPU_BLOCK = 1 << 18  # entries of a block of rows on the CPU (1 MiB of float32: a core's cache)
_CPU_BLOCK_FULL = 1 << 21  # a kernel's: 2,048 rows of 1,000 classes (1.6 s a pass at 40,000 x 1,000, 5.5 s unblocked)


def split(parameters, k: int, full: bool):
    """`(kernel [K, K] or scale [K], bias [K])` of a flat parameter vector (kernel or scale first)."""
    weights, bias = parameters[: k * k if full else k], parameters[k * k if full else k :]
    return (weights.reshape(k, k) if full else weights), bias


class Passes:
    """The fitting data of an affine map, where its passes run: `passes(parameters) -> (mean NLL, gradient)`.

    Args:
        features: `[n, K]` float64 features the map reads (logits, or
            log-probabilities for Dirichlet calibration).
        labels: `[n]` int labels.
        full: a kernel `[K, K]` (matrix, Dirichlet), else a scale `[K]`.
        absent: `[K]` bool, the classes left out of the fit's softmax, or
            `None` (every class takes part); kept as `absent`, a `[K]` bool.
    """

    def __init__(self, features, labels, full: bool, absent=None):
        self.features, self.labels, self.full = features, np.asarray(labels), full
        n, k = features.shape
        self.absent = np.zeros(k, bool) if absent is None else np.asarray(absent, bool)
        self._dropped = self.absent if self.absent.any() else None  # NumPy's mask of the logits, if any
        self.work = n * (k * k + k if full else 2 * k)
        self.resolution = 1e-13  # the objective's relative rounding (float64: a sum of n terms)
        self._tensors = None
        if self.work > NUMPY_MAX_WORK:
            dtype = np.float64 if n * k <= FLOAT64_MAX_ENTRIES else np.float32
            self.resolution = 1e-13 if dtype == np.float64 else 1e-7
            cut = _device.layout(n, _block_rows(k, full), n)
            arrays = (features.astype(dtype), self.labels.astype(np.int32))
            blocked = [_device.blocked(array, 0, cut)[0] for array in arrays] + _device.row_weights(cut)
            with _device.float64():
                self._tensors = tuple(map(_device.tensor, blocked)) + (_device.tensor(self.absent),)

    def _run(self, function, parameters):
        """`function(full)` compiled by the backend, called on the data and the `parameters`' kernel and bias."""
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        with _device.float64():
            result = _compiled(function, self.full, keras.backend.backend())(
                *self._tensors, _device.tensor(weights), _device.tensor(bias)
            )
            return [_device.numpy(value) for value in result]

    def __call__(self, parameters):
        """`(mean NLL, gradient [P])` of the map `parameters`, float64, the `absent` classes left out."""
        k = self.features.shape[1]
        if self._tensors is not None:
            nll, grad_weights, grad_bias = self._run(_value_and_gradient, parameters)
            return float(nll), np.concatenate([grad_weights.ravel(), grad_bias])
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        logits = _logits(self.features, weights, bias, self.full, self._dropped)
        top = logits.max(axis=1, keepdims=True)
        exponentials = np.exp(logits - top)
        normaliser = exponentials.sum(axis=1, keepdims=True)
        rows = np.arange(len(self.labels))
        nll = float(np.mean(np.log(normaliser[:, 0]) + top[:, 0] - logits[rows, self.labels]))
        residual = exponentials / normaliser
        residual[rows, self.labels] -= 1.0
        residual /= len(self.labels)
        grad_weights = self.features.T @ residual if self.full else (self.features * residual).sum(axis=0)
        return nll, np.concatenate([grad_weights.ravel(), residual.sum(axis=0)])

    def nll_each(self, parameters) -> np.ndarray:
        """Each example's NLL under the whole map (every class in the softmax), `[n]` float64."""
        if self._tensors is not None:
            return self._run(_nll_each, parameters)[0].ravel()[: len(self.labels)]
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        logits = _logits(self.features, weights, bias, self.full, None)
        top = logits.max(axis=1)
        log_normaliser = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        return log_normaliser - logits[np.arange(len(self.labels)), self.labels]

    def separates(self, parameters) -> bool:
        """Whether the whole map classifies every example correctly (its NLL then keeps falling as it sharpens)."""
        if self._tensors is not None:
            return bool(self._run(_separates, parameters)[0])
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        return bool(np.all(_logits(self.features, weights, bias, self.full, None).argmax(axis=1) == self.labels))

    def probabilities(self, parameters, rows=slice(None)) -> np.ndarray:
        """The map's softmax over the classes in the fit (the `absent` ones 0) on `rows`, `[n, K]` float64 (NumPy)."""
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        logits = _logits(self.features[rows], weights, bias, self.full, self._dropped)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)


def _logits(features, weights, bias, full, absent):
    """NumPy's calibrated logits, `-inf` for the `absent` classes."""
    logits = (features @ weights if full else features * weights) + bias
    return logits if absent is None else np.where(absent, -np.inf, logits)


def _calibrated(features, weights, bias, full):
    """The calibrated logits of `features [r, K]` in their dtype (the parameters arrive float64)."""
    weights, bias = ops.cast(weights, features.dtype), ops.cast(bias, features.dtype)
    return (ops.matmul(features, weights) if full else features * weights) + bias


def _value_and_gradient(full: bool):
    """`Passes.__call__`'s pass: `(mean NLL, gradient of the weights, gradient of the bias)`, float64.

    Its arguments are the blocked features `[b, r, K]`, labels `[b, r]`,
    row weights `[b, r]`, `absent [K]`, the weights and the bias. It walks
    the blocks one at a time, summing each block's NLL and gradients in
    float64: on the CPU a block's logits stay in a core's cache (at 40,000 x
    1,000 a vector scaling's pass took 0.2-0.4 s so, 3.3 s on the whole array
    at once).
    """

    def value_and_gradient(features, labels, rows, absent, weights, bias):
        def block(index, sums):
            nll, grad_weights, grad_bias = sums
            x, y, w = features[index], labels[index], ops.cast(rows[index], features.dtype)
            logits = ops.where(absent, ops.cast(-np.inf, x.dtype), _calibrated(x, weights, bias, full))
            log_normaliser = ops.logsumexp(logits, axis=1)
            true = ops.take_along_axis(logits, y[:, None], axis=1)[:, 0]
            nll += ops.sum(ops.cast((log_normaliser - true) * w, "float64"))
            one_hot = ops.cast(y[:, None] == ops.arange(ops.shape(logits)[1], dtype=y.dtype), x.dtype)
            residual = (ops.exp(logits - log_normaliser[:, None]) - one_hot) * w[:, None]
            if full:
                grad_weights += ops.cast(ops.matmul(ops.transpose(x), residual), "float64")
            else:
                grad_weights += ops.sum(ops.cast(x * residual, "float64"), axis=0)
            return nll, grad_weights, grad_bias + ops.sum(ops.cast(residual, "float64"), axis=0)

        zeros = (ops.zeros((), "float64"), ops.zeros_like(weights), ops.zeros_like(bias))
        sums = ops.fori_loop(0, ops.shape(features)[0], block, zeros)
        count = ops.sum(ops.cast(rows, "float64"))
        return tuple(total / count for total in sums)

    return value_and_gradient


def _flat(features, labels, rows):
    """The blocked data as `[b r, K]`, `[b r]`, `[b r]` (the padding rows last)."""
    return ops.reshape(features, (-1, ops.shape(features)[-1])), ops.reshape(labels, (-1,)), ops.reshape(rows, (-1,))


def _nll_each(full: bool):
    """`Passes.nll_each`'s pass: each row's NLL, `[b r]` float64 (padding rows included, last)."""

    def nll_each(features, labels, rows, absent, weights, bias):
        features, labels, _ = _flat(features, labels, rows)
        logits = _calibrated(features, weights, bias, full)
        true = ops.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
        return (ops.cast(ops.logsumexp(logits, axis=1) - true, "float64"),)

    return nll_each


def _separates(full: bool):
    """`Passes.separates`' pass: whether every row of the data is classified correctly."""

    def separates(features, labels, rows, absent, weights, bias):
        features, labels, rows = _flat(features, labels, rows)
        predicted = ops.cast(ops.argmax(_calibrated(features, weights, bias, full), axis=1), labels.dtype)
        return (ops.all((predicted == labels) | (rows == 0)),)

    return separates


@functools.cache
def _compiled(function, full: bool, backend: str):
    """`function(full)` compiled by `backend`."""
    return _device.compiled(function(full))


def _block_rows(k: int, full: bool) -> int:
    """Rows per block of a pass: all of them on an accelerator; on the CPU about `_CPU_BLOCK` entries
    (`_CPU_BLOCK_FULL` for a kernel's, whose products run faster on taller blocks)."""
    if _device.accelerated():
        return 2**31 - 1
    return max(1, (_CPU_BLOCK_FULL if full else _CPU_BLOCK) // k)
