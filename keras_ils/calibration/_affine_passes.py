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
Beyond `NUMPY_MAX_WORK` it is TensorFlow (a core dependency of the package,
so it runs where TensorFlow places it: on the GPU when it sees one, under any
Keras backend); below, NumPy, because a TensorFlow call costs about a
millisecond of dispatch, 10-30 times a NumPy pass on the small-data rule's
problems (tens to thousands of examples, hundreds of passes per fit).
Features of more than `FLOAT64_MAX_ENTRIES` entries are float32 (the
products, the softmax), with float64 sums over the examples (the NLL, the
bias's and the scale's gradients); smaller ones are float64 throughout, so
a fit there reaches a gradient of `1e-8`.
"""

from __future__ import annotations

import functools

import numpy as np

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
            import tensorflow as tf

            dtype = "float64" if n * k <= FLOAT64_MAX_ENTRIES else "float32"
            self.resolution = 1e-13 if dtype == "float64" else 1e-7
            labels, absent = tf.constant(self.labels, tf.int32), tf.constant(self.absent)
            self._tensors = (tf.constant(features, dtype), labels, absent)

    def _run(self, function, tensors, *arguments):
        """`function(full, dtype)`'s `tf.function` called on `tensors` and the parameters."""
        return function(self.full, tensors[0].dtype.name)(*tensors, *arguments)

    def __call__(self, parameters):
        """`(mean NLL, gradient [P])` of the map `parameters`, float64, the `absent` classes left out."""
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        if self._tensors is not None:
            rows = np.int32(_block_rows(k, self.full))
            nll, grad_weights, grad_bias = self._run(_tensorflow_pass, self._tensors, weights, bias, rows)
            return float(nll), np.concatenate([grad_weights.numpy().ravel(), grad_bias.numpy()])
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
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        if self._tensors is not None:
            return self._run(_tensorflow_nll_each, self._tensors[:2], weights, bias).numpy()
        logits = _logits(self.features, weights, bias, self.full, None)
        top = logits.max(axis=1)
        log_normaliser = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        return log_normaliser - logits[np.arange(len(self.labels)), self.labels]

    def separates(self, parameters) -> bool:
        """Whether the whole map classifies every example correctly (its NLL then keeps falling as it sharpens)."""
        k = self.features.shape[1]
        weights, bias = split(np.asarray(parameters, np.float64), k, self.full)
        if self._tensors is not None:
            return bool(self._run(_tensorflow_separates, self._tensors[:2], weights, bias))
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


def _calibrated(tf, features, weights, bias, full):
    """TensorFlow's calibrated logits in the features' dtype (the parameters arrive float64)."""
    weights, bias = tf.cast(weights, features.dtype), tf.cast(bias, features.dtype)
    return (tf.matmul(features, weights) if full else features * weights) + bias


def _signature(tf, full, dtype, with_absent):
    """The passes' `input_signature`: features, labels, [absent,] weights, bias (any n and K: one trace)."""
    tensors = [tf.TensorSpec([None, None], dtype), tf.TensorSpec([None], tf.int32)]
    tensors += [tf.TensorSpec([None], tf.bool)] if with_absent else []
    return tensors + [tf.TensorSpec([None, None] if full else [None], tf.float64), tf.TensorSpec([None], tf.float64)]


@functools.cache
def _tensorflow_pass(full: bool, dtype: str):
    """The `tf.function` of `Passes.__call__`: `(mean NLL, gradient of the weights, gradient of the bias)`.

    It walks the rows in blocks of `rows` (`_block_rows`), summing each
    block's NLL and gradients in float64: on the CPU a block's logits stay in
    a core's cache (at 40,000 x 1,000 a vector scaling's pass took 0.2-0.4 s
    so, 3.3 s on the whole array at once).
    """
    import tensorflow as tf

    def value_and_gradient(features, labels, absent, weights, bias, rows):
        count = tf.shape(labels)[0]

        def block(start, nll, grad_weights, grad_bias):
            x, y = features[start : start + rows], labels[start : start + rows]
            logits = tf.where(absent, tf.constant(-np.inf, x.dtype), _calibrated(tf, x, weights, bias, full))
            log_normaliser = tf.reduce_logsumexp(logits, axis=1)
            nll += tf.reduce_sum(tf.cast(log_normaliser - tf.gather(logits, y, batch_dims=1), tf.float64))
            residual = tf.exp(logits - log_normaliser[:, None]) - tf.one_hot(y, tf.shape(logits)[1], dtype=x.dtype)
            if full:
                grad_weights += tf.cast(tf.matmul(x, residual, transpose_a=True), tf.float64)
            else:
                grad_weights += tf.reduce_sum(tf.cast(x * residual, tf.float64), axis=0)
            return start + rows, nll, grad_weights, grad_bias + tf.reduce_sum(tf.cast(residual, tf.float64), axis=0)

        zeros = (tf.constant(0.0, tf.float64), tf.zeros_like(weights), tf.zeros_like(bias))
        _, *sums = tf.while_loop(lambda start, *_: start < count, block, (0, *zeros))
        return tuple(total / tf.cast(count, tf.float64) for total in sums)

    signature = [*_signature(tf, full, dtype, True), tf.TensorSpec([], tf.int32)]
    return tf.function(value_and_gradient, input_signature=signature, reduce_retracing=True)


@functools.cache
def _on_gpu() -> bool:
    """Whether TensorFlow computes on a GPU."""
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def _block_rows(k: int, full: bool) -> int:
    """Rows per block of a pass: all of them on a GPU; on the CPU about `_CPU_BLOCK` entries (`_CPU_BLOCK_FULL` for
    a kernel's, whose products run faster on taller blocks)."""
    if _on_gpu():
        return 2**31 - 1
    return max(1, (_CPU_BLOCK_FULL if full else _CPU_BLOCK) // k)


@functools.cache
def _tensorflow_nll_each(full: bool, dtype: str):
    """The `tf.function` of `Passes.nll_each`."""
    import tensorflow as tf

    def nll_each(features, labels, weights, bias):
        logits = _calibrated(tf, features, weights, bias, full)
        return tf.cast(tf.reduce_logsumexp(logits, axis=1) - tf.gather(logits, labels, batch_dims=1), tf.float64)

    return tf.function(nll_each, input_signature=_signature(tf, full, dtype, False), reduce_retracing=True)


@functools.cache
def _tensorflow_separates(full: bool, dtype: str):
    """The `tf.function` of `Passes.separates`."""
    import tensorflow as tf

    def separates(features, labels, weights, bias):
        predicted = tf.argmax(_calibrated(tf, features, weights, bias, full), axis=1, output_type=tf.int32)
        return tf.reduce_all(predicted == labels)

    return tf.function(separates, input_signature=_signature(tf, full, dtype, False), reduce_retracing=True)
