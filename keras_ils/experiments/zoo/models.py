"""Classifier builders used by the examples and the command line: each returns logits.

The paper's networks (Table 3 and the distillation table), by name through
`build`; the table below lists `MODEL_NAMES` and where each definition comes
from. "The authors' code" is github.com/mmaher22/Instance-based-label-smoothing
(`models/*.py`); `docs/cli/networks.md` has the parameter counts and recipes.

| name                   | network                                                                  |
|------------------------|--------------------------------------------------------------------------|
| `mlp`                  | 5 x 64 ReLU, the synthetic task (paper §3)                               |
| `lenet`                | LeNet-5 (the paper's LeNet, meliketoy/wide-resnet.pytorch)              |
| `alexnet`              | the distillation student: 3 conv + 2 dense (the authors' `shallownet.py`)|
| `resnet{6n+2}`         | CIFAR ResNet, option-A zero-padding shortcuts (He et al., 2016)          |
| `resnet{6n+2}b`        | the same with 1x1 projection shortcuts (option B)                        |
| `resnet{6n+2}sd`       | CIFAR ResNet with stochastic depth, survival 1 -> 0.5 (Huang et al.)     |
| `resnet18`, `resnet50` | ImageNet ResNets at CIFAR scale: 3x3 stem, no max-pool (kuangliu style)  |
| `densenet{6m+4}`       | DenseNet-BC, growth 12, compression 0.5 (`densenet40` in the paper)      |
| `wrn-{6n+4}-{width}`   | Wide ResNet (`wrn-34-10` is the paper's "ResNet32W")                     |
| `inceptionv4`          | Inception-v4 at CIFAR resolution (weiaicunzai/pytorch-cifar100)          |

Every builder takes `weight_decay`: the paper's (PyTorch SGD's) coupled weight
decay, an L2 penalty `weight_decay / 2 * ||W||^2` on every Conv2D and Dense
kernel (`kernel_regularizer`), so `weight_decay * W` joins the gradient and
passes through momentum. Keras' own optimizer `weight_decay` is decoupled and,
under momentum 0.9, about ten times weaker. The penalty enters the training
loss (and Keras' `val_loss`), never the hard-label `val_nll` metric that model
selection monitors. `training.recipe_for` gives the paper's value per network.

Batch normalisation keeps Keras' defaults (momentum 0.99, epsilon 1e-3;
PyTorch's are 0.9 and 1e-5) in every network, as the first networks here did.
"""

from __future__ import annotations

import re

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


def mlp(
    num_classes: int,
    input_shape: tuple,
    hidden_layers: int = 5,
    units: int = 64,
    name: str = "mlp",
    weight_decay: float | None = None,
) -> keras.Model:
    """The paper's synthetic-task network: `hidden_layers` ReLU layers of `units`, logits out.

    `weight_decay` (see the module docstring) puts `L2(weight_decay / 2)` on
    every kernel; `None` or `0` puts none. The other builders take it too.

    Example:

    >>> model = mlp(num_classes=3, input_shape=(2,))
    >>> model.output_shape, len(model.layers)
    ((None, 3), 6)

    References:
        Maher & Kull (2021), §3 (5 hidden layers of 64 ReLU units).
    """
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
    layers = [keras.Input(shape=tuple(input_shape))]
    layers += [keras.layers.Dense(units, activation="relu", kernel_regularizer=l2()) for _ in range(hidden_layers)]
    layers.append(keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2()))
    return keras.Sequential(layers, name=name)


def _weight_decay(weight_decay):
    """A function making each kernel's regulariser: `L2(weight_decay / 2)`, or `None` without weight decay."""
    if weight_decay is not None:
        weight_decay = number_in("weight_decay", weight_decay, 0.0, expected="a float >= 0 or None")
    return lambda: keras.regularizers.L2(weight_decay / 2) if weight_decay else None


def _conv(filters, kernel, l2, strides=1, padding="same", use_bias=False):
    return keras.layers.Conv2D(
        filters,
        kernel,
        strides=strides,
        padding=padding,
        use_bias=use_bias,
        kernel_initializer="he_normal",
        kernel_regularizer=l2(),
    )


def _bn_relu(x):
    return keras.layers.ReLU()(keras.layers.BatchNormalization()(x))


def _logits(x, num_classes, l2):
    return keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2())(x)


def _basic_block(x, filters, strides, l2, shortcut, survival=None):
    """conv-BN-ReLU-conv-BN, added to the shortcut, ReLU; the branch through `StochasticDepth` when `survival`."""
    y = _bn_relu(_conv(filters, 3, l2, strides)(x))
    y = keras.layers.BatchNormalization()(_conv(filters, 3, l2)(y))
    if survival is not None:
        y = StochasticDepth(survival)(y)
    if strides != 1 or x.shape[-1] != filters:
        if shortcut == "projection":
            x = keras.layers.BatchNormalization()(_conv(filters, 1, l2, strides)(x))
        else:
            x = ZeroPadShortcut(filters, strides, pooling=shortcut)(x)
    return keras.layers.ReLU()(keras.layers.Add()([y, x]))


def _cifar_resnet_blocks(depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise invalid("depth", "6n + 2 with n >= 1 (20, 32, 56, 110)", depth)
    return (depth - 2) // 6


def _cifar_resnet(depth, num_classes, input_shape, name, weight_decay, shortcut, survivals):
    _check_classes(num_classes)
    blocks = _cifar_resnet_blocks(depth)
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _bn_relu(_conv(16, 3, l2)(inputs))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            survival = survivals[stage * blocks + block] if survivals else None
            x = _basic_block(x, filters, 2 if stage > 0 and block == 0 else 1, l2, shortcut, survival)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name)


def resnet(
    depth: int,
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    name: str | None = None,
    weight_decay: float | None = None,
    shortcut: str = "zero_pad",
) -> keras.Model:
    """CIFAR-style ResNet of He et al. (2016): `depth = 6n + 2`, stages of 16/32/64 filters, logits out.

    Shortcuts that change shape are option A by default (`"zero_pad"`:
    subsampled identity plus zero channels, no parameters), as in He et al.'s
    CIFAR experiments and the authors' `resnet.py`; `"projection"` is option B
    (1x1 convolution and batch normalisation, `build("resnet{depth}b", ...)`).

    Args:
        depth: `6n + 2` (20, 32, 44, 56, 110).
        num_classes: classes of the logits.
        input_shape: Defaults to `(32, 32, 3)`.
        name: Defaults to `resnet{depth}` (`resnet{depth}b` for projections).
        weight_decay: see the module docstring. Defaults to `None`.
        shortcut: `"zero_pad"` (option A) or `"projection"` (option B).

    Example:

    >>> model = resnet(20, num_classes=10)
    >>> sum(int(w.numpy().size) for w in model.trainable_weights)  # He et al., Table 6: 0.27M
    269722

    References:
        He et al. (2016), "Deep Residual Learning for Image Recognition", §4.2.
    """
    if shortcut not in ("zero_pad", "projection"):
        raise invalid("shortcut", '"zero_pad" (option A) or "projection" (option B)', shortcut)
    default_name = f"resnet{depth}" + ("b" if shortcut == "projection" else "")
    kind = "subsample" if shortcut == "zero_pad" else shortcut
    return _cifar_resnet(depth, num_classes, input_shape, name or default_name, weight_decay, kind, None)


def stochastic_depth_resnet(
    depth: int,
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    final_survival: float = 0.5,
    name: str | None = None,
    weight_decay: float | None = None,
) -> keras.Model:
    """CIFAR ResNet (`6n + 2`) with stochastic depth: block `l` of `L = 3n` survives with `1 - l / L * (1 - p_L)`.

    The survival probability decays linearly from 1 at the input to
    `final_survival` (`p_L`, 0.5 in Huang et al. and the paper) at the last
    block; each residual branch ends in a `StochasticDepth` layer (inverted
    scaling: the inference network is the plain ResNet). Shape-changing
    shortcuts average 2x2 windows and add zero channels, as Huang et al.'s and
    the authors' `resnet_sd.py` do. The paper's ResNet-110-SD is depth 110
    (n = 18) and its SVHN ResNet-152-SD depth 152 (n = 25).

    Example:

    >>> model = stochastic_depth_resnet(8, num_classes=10)
    >>> [round(layer.survival_probability, 3) for layer in model.layers if isinstance(layer, StochasticDepth)]
    [0.833, 0.667, 0.5]

    References:
        Huang et al. (2016), "Deep Networks with Stochastic Depth", §3 (linear decay rule).
    """
    final_survival = number_in("final_survival", final_survival, 0.0, 1.0, low_open=True)
    total = 3 * _cifar_resnet_blocks(depth)
    survivals = [1 - (block + 1) / total * (1 - final_survival) for block in range(total)]
    return _cifar_resnet(
        depth, num_classes, input_shape, name or f"resnet{depth}sd", weight_decay, "average", survivals
    )


def _bottleneck_block(x, planes, strides, l2):
    y = _bn_relu(_conv(planes, 1, l2)(x))
    y = _bn_relu(_conv(planes, 3, l2, strides)(y))
    y = keras.layers.BatchNormalization()(_conv(4 * planes, 1, l2)(y))
    if strides != 1 or x.shape[-1] != 4 * planes:
        x = keras.layers.BatchNormalization()(_conv(4 * planes, 1, l2, strides)(x))
    return keras.layers.ReLU()(keras.layers.Add()([y, x]))


def _four_stage_resnet(stage_blocks, bottleneck, num_classes, input_shape, name, weight_decay):
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _bn_relu(_conv(64, 3, l2)(inputs))
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), stage_blocks, strict=True)):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            if bottleneck:
                x = _bottleneck_block(x, planes, strides, l2)
            else:
                x = _basic_block(x, planes, strides, l2, "projection")
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name)


def resnet18(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "resnet18", weight_decay: float | None = None
) -> keras.Model:
    """ResNet-18 at CIFAR scale: 3x3 stem of 64, no max-pool, basic blocks [2, 2, 2, 2], projection shortcuts.

    The CIFAR ResNet-18 of kuangliu/pytorch-cifar, a distillation teacher in
    the paper (11.2M parameters for 10 classes).

    Example:

    >>> resnet18(num_classes=10).output_shape
    (None, 10)

    References:
        He et al. (2016), Table 1 (ResNet-18); github.com/kuangliu/pytorch-cifar `models/resnet.py`.
    """
    return _four_stage_resnet((2, 2, 2, 2), False, num_classes, input_shape, name, weight_decay)


def resnet50(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "resnet50", weight_decay: float | None = None
) -> keras.Model:
    """ResNet-50 at CIFAR scale: 3x3 stem of 64, no max-pool, bottleneck blocks [3, 4, 6, 3] (expansion 4).

    The CIFAR ResNet-50 of kuangliu/pytorch-cifar, a distillation teacher in
    the paper (23.5M parameters for 10 classes). The stride sits on the 3x3
    convolution of a stage's first block.

    References:
        He et al. (2016), Table 1 (ResNet-50); github.com/kuangliu/pytorch-cifar `models/resnet.py`.
    """
    return _four_stage_resnet((3, 4, 6, 3), True, num_classes, input_shape, name, weight_decay)


def densenet(
    depth: int,
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    growth_rate: int = 12,
    compression: float = 0.5,
    name: str | None = None,
    weight_decay: float | None = None,
) -> keras.Model:
    """DenseNet-BC for CIFAR (Huang et al., 2017): three dense blocks of `(depth - 4) / 6` bottleneck layers.

    A 3x3 convolution to `2 * growth_rate` channels; each bottleneck layer is
    BN-ReLU-1x1 conv (`4 * growth_rate`)-BN-ReLU-3x3 conv (`growth_rate`),
    concatenated to its input; a transition (BN-ReLU-1x1 conv to
    `floor(compression * channels)`, 2x2 average pooling) between blocks;
    BN-ReLU, global average pooling and the logits at the end. `depth=40`
    with the defaults is the paper's DenseNet-40 (the authors'
    `densenet.py`, `DenseNet3(40)`: bottleneck, compression 0.5).

    Example:

    >>> densenet(40, num_classes=10).name
    'densenet40'

    References:
        Huang et al. (2017), "Densely Connected Convolutional Networks", §3 (DenseNet-BC).
    """
    _check_classes(num_classes)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 10 or (depth - 4) % 6:
        raise invalid("depth", "6m + 4 with m >= 1 (40, 100, 190, 250)", depth)
    integer_at_least("growth_rate", growth_rate, 1)
    compression = number_in("compression", compression, 0.0, 1.0, low_open=True)
    layers_per_block = (depth - 4) // 6
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _conv(2 * growth_rate, 3, l2)(inputs)
    for block in range(3):
        for _ in range(layers_per_block):
            y = _conv(4 * growth_rate, 1, l2)(_bn_relu(x))
            y = _conv(growth_rate, 3, l2)(_bn_relu(y))
            x = keras.layers.Concatenate()([x, y])
        if block < 2:
            x = _conv(int(x.shape[-1] * compression), 1, l2)(_bn_relu(x))
            x = keras.layers.AveragePooling2D(2)(x)
    x = keras.layers.GlobalAveragePooling2D()(_bn_relu(x))
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name or f"densenet{depth}")


def wide_resnet(
    depth: int,
    width: int,
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    dropout: float = 0.0,
    name=None,
    weight_decay: float | None = None,
) -> keras.Model:
    """Wide ResNet WRN-`depth`-`width` of Zagoruyko & Komodakis (2016), pre-activation blocks, logits out.

    `wrn-34-10` is the paper's "ResNet32W" (the authors' code trains
    WRN-34-10).

    Example:

    >>> wide_resnet(10, 1, num_classes=10).output_shape
    (None, 10)

    References:
        Zagoruyko & Komodakis (2016), "Wide Residual Networks" (`depth = 6n + 4`).
    """
    _check_classes(num_classes)
    if (depth - 4) % 6 or depth < 10:
        raise ValueError(
            f"Invalid value for argument `depth`. Expected 6n + 4 (16, 22, 28, 34). Received: depth={depth}"
        )
    blocks = (depth - 4) // 6
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _conv(16, 3, l2)(inputs)
    for stage, filters in enumerate((16 * width, 32 * width, 64 * width)):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            pre = _bn_relu(x)
            y = _bn_relu(_conv(filters, 3, l2, strides)(pre))
            if dropout:
                y = keras.layers.Dropout(dropout)(y)
            y = _conv(filters, 3, l2)(y)
            shortcut = x if strides == 1 and x.shape[-1] == filters else _conv(filters, 1, l2, strides)(pre)
            x = keras.layers.Add()([y, shortcut])
    x = keras.layers.GlobalAveragePooling2D()(_bn_relu(x))
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name or f"wrn{depth}_{width}")


def lenet(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "lenet", weight_decay: float | None = None
) -> keras.Model:
    """LeNet-5 as used by the paper for CIFAR: two 5x5 conv + max-pool stages, dense 120 and 84, logits out.

    Example:

    >>> lenet(num_classes=10).count_params()
    62006
    """
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
    return keras.Sequential(
        [
            keras.Input(shape=tuple(input_shape)),
            keras.layers.Conv2D(6, 5, activation="relu", kernel_regularizer=l2()),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(16, 5, activation="relu", kernel_regularizer=l2()),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(120, activation="relu", kernel_regularizer=l2()),
            keras.layers.Dense(84, activation="relu", kernel_regularizer=l2()),
            keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2()),
        ],
        name=name,
    )


def alexnet(
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    channels: int = 32,
    dropout: float = 0.5,
    name: str = "alexnet",
    weight_decay: float | None = None,
) -> keras.Model:
    """The paper's "AlexNet" distillation student: 3 conv + 2 dense layers.

    Three stages of 3x3 convolution (`channels`, `2 * channels`,
    `4 * channels` filters, with bias) - BN - 2x2 max-pool - ReLU, then dense
    `4 * channels` - BN - ReLU - dropout, and the logits. Source: the
    authors' `models/shallownet.py` (the 5-layer CNN of
    peterliht/knowledge-distillation-pytorch, which the paper cites) with
    their `utils/params.json`: `num_channels=32`, `dropout_rate=0.5`. Their
    code flattens a fixed 4x4 map (32x32 inputs); `Flatten` here takes any
    input size, so Fashion-MNIST's 28x28 gives 3x3.

    Example:

    >>> alexnet(num_classes=10).count_params()
    358218
    """
    _check_classes(num_classes)
    integer_at_least("channels", channels, 1)
    dropout = number_in("dropout", dropout, 0.0, 1.0, high_open=True)
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = inputs
    for filters in (channels, 2 * channels, 4 * channels):
        x = keras.layers.BatchNormalization()(_conv(filters, 3, l2, use_bias=True)(x))
        x = keras.layers.ReLU()(keras.layers.MaxPooling2D(2)(x))
    x = keras.layers.Dense(4 * channels, kernel_regularizer=l2())(keras.layers.Flatten()(x))
    x = keras.layers.Dropout(dropout)(_bn_relu(x))
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name)


def _conv_bn_relu(x, l2, filters, kernel, strides=1, padding="same"):
    return _bn_relu(_conv(filters, kernel, l2, strides, padding)(x))


def _chain(x, l2, *convs):
    for conv in convs:
        x = _conv_bn_relu(x, l2, *conv)
    return x


def _pool_conv(x, l2, filters):
    return _conv_bn_relu(keras.layers.AveragePooling2D(3, strides=1, padding="same")(x), l2, filters, 1)


def inceptionv4(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "inceptionv4", weight_decay: float | None = None
) -> keras.Model:
    """Inception-v4 (Szegedy et al., 2017) at CIFAR resolution, the paper's InceptionV4 distillation teacher.

    The full network - stem, 4 Inception-A, Reduction-A (k, l, m, n = 192,
    224, 256, 384), 7 Inception-B, Reduction-B, 3 Inception-C, global average
    pooling, dropout 0.2, logits - with every convolution
    conv(no bias)-BN-ReLU, as in weiaicunzai/pytorch-cifar100
    `models/inceptionv4.py`, which the paper's appendix names and the
    authors' `models/inception.py` copies. That version adapts the stem to
    32x32 inputs (its first 3x3 convolution is the only unpadded one and
    nothing else in the stem downsamples), so the grids are 30, 14 and 7
    pixels rather than ImageNet's 35, 17 and 8. About 41M parameters. The
    3x3 average pools exclude the zero padding from their mean (Keras);
    PyTorch's default includes it.

    References:
        Szegedy et al. (2017), "Inception-v4, Inception-ResNet and the Impact of Residual Connections on
        Learning", Figures 3-9.
    """
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
    cat = lambda *branches: keras.layers.Concatenate()(list(branches))  # noqa: E731
    max_pool = lambda x, strides, padding: keras.layers.MaxPooling2D(3, strides, padding)(x)  # noqa: E731
    inputs = keras.Input(shape=tuple(input_shape))
    x = _chain(inputs, l2, (32, 3, 1, "valid"), (32, 3), (64, 3))
    x = cat(_conv_bn_relu(x, l2, 96, 3), max_pool(x, 1, "same"))
    x = cat(_chain(x, l2, (64, 1), (64, (7, 1)), (64, (1, 7)), (96, 3)), _chain(x, l2, (64, 1), (96, 3)))
    x = cat(max_pool(x, 1, "same"), _conv_bn_relu(x, l2, 192, 3))
    for _ in range(4):  # Inception-A
        x = cat(
            _chain(x, l2, (64, 1), (96, 3), (96, 3)),
            _chain(x, l2, (64, 1), (96, 3)),
            _conv_bn_relu(x, l2, 96, 1),
            _pool_conv(x, l2, 96),
        )
    x = cat(  # Reduction-A
        _chain(x, l2, (192, 1), (224, 3), (256, 3, 2, "valid")),
        _conv_bn_relu(x, l2, 384, 3, 2, "valid"),
        max_pool(x, 2, "valid"),
    )
    for _ in range(7):  # Inception-B
        x = cat(
            _conv_bn_relu(x, l2, 384, 1),
            _chain(x, l2, (192, 1), (224, (1, 7)), (256, (7, 1))),
            _chain(x, l2, (192, 1), (192, (1, 7)), (224, (7, 1)), (224, (1, 7)), (256, (7, 1))),
            _pool_conv(x, l2, 128),
        )
    x = cat(  # Reduction-B
        _chain(x, l2, (192, 1), (192, 3, 2)),
        _chain(x, l2, (256, 1), (256, (1, 7)), (320, (7, 1)), (320, 3, 2)),
        max_pool(x, 2, "same"),
    )
    for _ in range(3):  # Inception-C
        narrow = _conv_bn_relu(x, l2, 384, 1)
        stack = _chain(x, l2, (384, 1), (448, (1, 3)), (512, (3, 1)))
        x = cat(
            _conv_bn_relu(x, l2, 256, 1),
            _conv_bn_relu(narrow, l2, 256, (3, 1)),
            _conv_bn_relu(narrow, l2, 256, (1, 3)),
            _conv_bn_relu(stack, l2, 256, (1, 3)),
            _conv_bn_relu(stack, l2, 256, (3, 1)),
            _pool_conv(x, l2, 256),
        )
    x = keras.layers.Dropout(0.2)(keras.layers.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, _logits(x, num_classes, l2), name=name)


def _check_classes(num_classes):
    integer_at_least("num_classes", num_classes, 2)


MODEL_NAMES = (
    "mlp",
    "lenet",
    "alexnet",
    "resnet20",
    "resnet32",
    "resnet56",
    "resnet110",
    "resnet110sd",
    "resnet152sd",
    "resnet18",
    "resnet50",
    "densenet40",
    "wrn-16-4",
    "wrn-28-10",
    "wrn-34-10",
    "inceptionv4",
)


def mlp_shape(name: str) -> tuple[int, int] | None:
    """`(hidden_layers, units)` of an MLP name (`mlp` is the paper's 5 x 64, `mlp-D-W` any), else `None`.

    Example:

    >>> mlp_shape("mlp"), mlp_shape("mlp-2-128"), mlp_shape("lenet")
    ((5, 64), (2, 128), None)
    """
    if name == "mlp":
        return 5, 64
    match = re.fullmatch(r"mlp-(\d+)-(\d+)", name)
    if match and int(match[1]) >= 1 and int(match[2]) >= 1:
        return int(match[1]), int(match[2])
    return None


def build(name: str, num_classes: int, input_shape: tuple, weight_decay: float | None = None) -> keras.Model:
    """A model by name: `MODEL_NAMES` and the families of the module table.

    `mlp`, `lenet`, `alexnet`, `resnet18`, `resnet50`, `inceptionv4`;
    `resnet{6n+2}` (option A), `resnet{6n+2}b` (option B),
    `resnet{6n+2}sd` (stochastic depth); `densenet{6m+4}` (DenseNet-BC);
    `wrn-{6n+4}-{width}`; `mlp-{hidden layers}-{units}` (`mlp` is `mlp-5-64`).
    (`resnet50` is the bottleneck ResNet-50, not the CIFAR ResNet of depth 6 * 8 + 2.)

    `weight_decay` puts `L2(weight_decay / 2)` on every Conv2D and Dense
    kernel (the module docstring says why); give it the recipe's,
    `training.recipe_for(name, dataset).weight_decay`. Defaults to `None` (none).

    Example:

    >>> build("resnet20", 10, (32, 32, 3)).name
    'resnet20'
    >>> model = build("mlp", 3, (2,), weight_decay=1e-4)
    >>> {float(layer.kernel_regularizer.l2) for layer in model.layers}
    {5e-05}
    """
    fixed = {"mlp": mlp, "lenet": lenet, "alexnet": alexnet, "resnet18": resnet18, "resnet50": resnet50}
    fixed["inceptionv4"] = inceptionv4
    if name in fixed:
        return fixed[name](num_classes, input_shape, weight_decay=weight_decay)
    match = re.fullmatch(r"(resnet|densenet)(\d+)(b|sd)?", name)
    if match and match[1] == "resnet" and match[3] == "sd":
        return stochastic_depth_resnet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    if match and match[1] == "resnet":
        shortcut = "projection" if match[3] == "b" else "zero_pad"
        return resnet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay, shortcut=shortcut)
    if match and match[3] is None:
        return densenet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    shape = mlp_shape(name)
    if shape is not None:
        return mlp(num_classes, input_shape, *shape, name=name, weight_decay=weight_decay)
    match = re.fullmatch(r"wrn-(\d+)-(\d+)", name)
    if match:
        return wide_resnet(int(match[1]), int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    raise ValueError(f"Invalid value for argument `model`. Expected one of {MODEL_NAMES}. Received: model={name!r}")
