"""Stacked MLPs: weights with a leading model axis, their initialisation, batch orders and logits.

Every network is a row of stacked weights (`[models, in, out]` kernels,
`[models, out]` biases) of `keras_ils.comparison.networks.mlp`'s
architecture; `keras_ils.comparison.engine.vectorised.train_mlps` trains them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_ils._checks import integer_at_least


def layer_sizes(input_dim: int, num_classes: int, hidden_layers: int = 5, units: int = 64) -> list:
    """`[(in, out), ...]` of `keras_ils.comparison.networks.mlp(num_classes, (input_dim,), hidden_layers, units)`.

    Example:

    >>> layer_sizes(2, 3, hidden_layers=2, units=4)
    [(2, 4), (4, 4), (4, 3)]
    """
    sizes = [input_dim] + [units] * hidden_layers + [num_classes]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


INITIALISATIONS = ("keras", "pytorch")


def initial_weights(
    seeds, input_dim: int, num_classes: int, hidden_layers: int = 5, units: int = 64, scheme: str = "keras"
) -> list:
    """Initial MLP weights for each seed, drawn with `numpy.random.default_rng(seed)` layer by layer.

    - `"keras"` (the package's): Keras' `Dense` defaults, Glorot-uniform
      kernels (uniform in `[-l, l]`, `l = sqrt(6 / (fan_in + fan_out))`) and
      zero biases.
    - `"pytorch"`: `torch.nn.Linear`'s defaults, kernels and biases uniform in
      `[-1/sqrt(fan_in), 1/sqrt(fan_in)]` (the paper's authors trained with
      PyTorch); for comparing with the paper, not what `keras_ils.comparison.networks.mlp`
      starts from.

    Returns:
        `[(kernel [M, in, out], bias [M, out]), ...]` float32.

    Example:

    >>> w = initial_weights([0, 1], 2, 3, hidden_layers=1, units=4)
    >>> [k.shape for k, b in w], bool(np.abs(w[0][0]).max() <= np.sqrt(6 / 6)), bool(w[0][1].any())
    ([(2, 2, 4), (2, 4, 3)], True, False)
    """
    if scheme not in INITIALISATIONS:
        raise ValueError(
            f"Invalid value for argument `scheme`. Expected one of {INITIALISATIONS}. Received: {scheme!r}"
        )
    sizes = layer_sizes(input_dim, num_classes, hidden_layers, units)
    unique_seeds, rows = np.unique(np.asarray(seeds, np.int64), return_inverse=True)  # each seed drawn once
    kernels = [np.empty((len(unique_seeds), i, o), np.float32) for i, o in sizes]
    biases = [np.zeros((len(unique_seeds), o), np.float32) for _, o in sizes]
    for row, seed in enumerate(unique_seeds):
        rng = np.random.default_rng(int(seed))
        for kernel, bias, (fan_in, fan_out) in zip(kernels, biases, sizes, strict=True):
            if scheme == "keras":
                limit = np.sqrt(6.0 / (fan_in + fan_out))
                kernel[row] = rng.uniform(-limit, limit, (fan_in, fan_out))
            else:
                limit = 1.0 / np.sqrt(fan_in)
                kernel[row] = rng.uniform(-limit, limit, (fan_in, fan_out))
                bias[row] = rng.uniform(-limit, limit, fan_out)
    return [(kernel[rows], bias[rows]) for kernel, bias in zip(kernels, biases, strict=True)]


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order in which a model with `seed` visits its `n` training points in `epoch`.

    `numpy.random.default_rng([seed, epoch]).permutation(n)`; consecutive
    slices of `batch_size` are the mini-batches (the last one may be shorter).

    Example:

    >>> sorted(epoch_order(0, 3, 5).tolist())
    [0, 1, 2, 3, 4]
    """
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


def pairs(flat) -> list:
    """`[(kernel, bias), ...]` from the flat list `[kernel, bias, kernel, bias, ...]`.

    Example:

    >>> pairs(["k1", "b1", "k2", "b2"])
    [('k1', 'b1'), ('k2', 'b2')]
    """
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def forward(params, x):
    """Logits of stacked MLPs: `params` `[(kernel [m, i, o], bias [m, o])]`, `x [m, n, d]`."""
    h = x
    for layer, (kernel, bias) in enumerate(params):
        h = tf.matmul(h, kernel) + bias[:, None, :]
        if layer < len(params) - 1:
            h = tf.nn.relu(h)
    return h


_compiled_forward = tf.function(forward, jit_compile=True, reduce_retracing=True)
_MODEL_MULTIPLE = 8  # model counts are padded to a multiple of this, so that few shapes are compiled


def mlp_logits(weights, x, *, batch_size: int = 1024) -> np.ndarray:
    """Logits `[M, n, K]` of stacked MLPs on `x` (`[M, n, d]` per model, or `[n, d]` shared).

    The forward pass is compiled with XLA, `batch_size` points of every
    model at a time; the model count is padded to a multiple of 8, and the
    points to whole batches (fewer than `batch_size` points: to the next power
    of two), with zeros, so that few shapes are ever compiled.

    Example:

    >>> w = initial_weights([0, 1], 2, 3, hidden_layers=1, units=4)
    >>> mlp_logits(w, np.zeros((5, 2), np.float32)).shape
    (2, 5, 3)
    """
    integer_at_least("batch_size", batch_size, 1)
    x = np.asarray(x, np.float32)
    num_models, n = weights[0][0].shape[0], x.shape[-2]
    extra_models = -num_models % _MODEL_MULTIPLE
    params = [
        tuple(
            tf.constant(np.pad(np.asarray(w, np.float32), [(0, extra_models)] + [(0, 0)] * (np.ndim(w) - 1)))
            for w in pair
        )
        for pair in weights
    ]
    batch = min(batch_size, 1 << (n - 1).bit_length())
    x = np.pad(np.broadcast_to(x, (num_models, n, x.shape[-1])), [(0, extra_models), (0, -n % batch), (0, 0)])
    logits = [_compiled_forward(params, tf.constant(x[:, s : s + batch])).numpy() for s in range(0, n, batch)]
    return np.concatenate(logits, axis=1)[:num_models, :n]


__all__ = ["INITIALISATIONS", "epoch_order", "forward", "initial_weights", "layer_sizes", "mlp_logits", "pairs"]
