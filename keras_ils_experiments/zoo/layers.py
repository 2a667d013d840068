"""The zoo's own Keras layers: stochastic depth and the parameter-free ResNet shortcut (option A)."""

from __future__ import annotations

import keras
from keras import ops

from keras_ils._checks import integer_at_least, invalid, number_in


@keras.saving.register_keras_serializable(package="keras_ils")
class StochasticDepth(keras.layers.Layer):
    """Drops a residual branch as a whole while training (Huang et al., 2016); the identity at inference.

    In training, each call draws one Bernoulli(`survival_probability`) for
    the whole batch (as Huang et al.'s and the authors' code do) and returns
    `inputs / survival_probability` when the branch survives, zeros when it
    is dropped. At inference it returns `inputs` unchanged.

    This is inverted scaling, the authors' `resnet_sd.py`: the branch's
    expected training output equals its inference output, so the inference
    network is the plain ResNet with nothing to rescale, and a saved model
    predicts like any ResNet. Huang et al. instead leave training unscaled and
    multiply the branch by `survival_probability` at inference; both give the
    same expectation. The dropped branch is still computed (its batch
    normalisation statistics still update); only its output is discarded.

    Args:
        survival_probability: probability that the branch is kept, in (0, 1].
        seed: seed of the draws. Defaults to `None` (from Keras' global seed).

    Call arguments:
        inputs: the residual branch's output.
        training: whether to drop. Defaults to `False` (inference).

    Example:

    >>> import numpy as np
    >>> layer = StochasticDepth(0.5, seed=0)
    >>> x = np.ones((2, 3), "float32")
    >>> bool(np.all(layer(x) == x))
    True
    >>> sorted({float(layer(x, training=True)[0, 0]) for _ in range(20)})
    [0.0, 2.0]

    References:
        Huang et al. (2016), "Deep Networks with Stochastic Depth", §3.
    """

    def __init__(self, survival_probability: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.survival_probability = number_in("survival_probability", survival_probability, 0.0, 1.0, low_open=True)
        if seed is not None:
            integer_at_least("seed", seed, 0)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=False):
        if not training:
            return inputs
        draw = keras.random.uniform((), seed=self.seed_generator)
        keep = ops.cast(draw < self.survival_probability, inputs.dtype)
        return inputs * keep / ops.cast(self.survival_probability, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "survival_probability": self.survival_probability, "seed": self.seed}


@keras.saving.register_keras_serializable(package="keras_ils")
class ZeroPadShortcut(keras.layers.Layer):
    """A parameter-free ResNet shortcut: spatial downsampling by `strides`, zero channels added up to `filters`.

    He et al.'s option A. `pooling="subsample"` keeps every `strides`-th
    pixel (`x[:, ::s, ::s]`, He et al. and the authors' `resnet.py`);
    `pooling="average"` averages `s x s` windows (Huang et al.'s
    stochastic-depth code and the authors' `resnet_sd.py`). The zero
    channels are split evenly before and after the input's (the authors'
    `resnet_sd.py` appends them all after: the same network up to a channel
    permutation).

    Args:
        filters: output channels, at least the input's.
        strides: spatial downsampling factor. Defaults to `2`.
        pooling: `"subsample"` or `"average"`. Defaults to `"subsample"`.

    Call arguments:
        inputs: `[batch, height, width, channels]`.

    Example:

    >>> import numpy as np
    >>> x = np.arange(2 * 4 * 4 * 1, dtype="float32").reshape(2, 4, 4, 1)
    >>> y = np.asarray(ZeroPadShortcut(4)(x))
    >>> y.shape, y[0, :, :, 1].tolist(), float(np.abs(y[..., [0, 2, 3]]).sum())
    ((2, 2, 2, 4), [[0.0, 2.0], [8.0, 10.0]], 0.0)
    """

    def __init__(self, filters: int, strides: int = 2, pooling: str = "subsample", **kwargs):
        super().__init__(**kwargs)
        self.filters = integer_at_least("filters", filters, 1)
        self.strides = integer_at_least("strides", strides, 1)
        if pooling not in ("subsample", "average"):
            raise invalid("pooling", '"subsample" or "average"', pooling)
        self.pooling = pooling

    def build(self, input_shape):
        if input_shape[-1] > self.filters:
            raise ValueError(
                f"Invalid value for argument `filters`. Expected at least the input's {input_shape[-1]} channels. "
                f"Received: filters={self.filters}"
            )

    def call(self, inputs):
        s = self.strides
        if s > 1 and self.pooling == "subsample":
            inputs = inputs[:, ::s, ::s, :]
        elif s > 1:
            inputs = ops.average_pool(inputs, pool_size=s, strides=s, padding="same")
        extra = self.filters - inputs.shape[-1]
        return ops.pad(inputs, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])

    def compute_output_shape(self, input_shape):
        size = lambda n: None if n is None else -(-n // self.strides)  # noqa: E731
        return (input_shape[0], size(input_shape[1]), size(input_shape[2]), self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "strides": self.strides, "pooling": self.pooling}


__all__ = ["StochasticDepth", "ZeroPadShortcut"]
