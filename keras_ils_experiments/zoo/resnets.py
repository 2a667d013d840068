"""ResNets: CIFAR ResNets (option A or B shortcuts), with stochastic depth, and ResNet-18/50 at CIFAR scale."""

from __future__ import annotations

import keras

from keras_ils._checks import invalid, number_in
from keras_ils_experiments.zoo._parts import bn_relu, check_classes, conv, dense_logits, kernel_regularizer
from keras_ils_experiments.zoo.layers import StochasticDepth, ZeroPadShortcut


def _basic_block(x, filters, strides, l2, shortcut, survival=None):
    """conv-BN-ReLU-conv-BN, added to the shortcut, ReLU; the branch through `StochasticDepth` when `survival`."""
    y = bn_relu(conv(filters, 3, l2, strides)(x))
    y = keras.layers.BatchNormalization()(conv(filters, 3, l2)(y))
    if survival is not None:
        y = StochasticDepth(survival)(y)
    if strides != 1 or x.shape[-1] != filters:
        if shortcut == "projection":
            x = keras.layers.BatchNormalization()(conv(filters, 1, l2, strides)(x))
        else:
            x = ZeroPadShortcut(filters, strides, pooling=shortcut)(x)
    return keras.layers.ReLU()(keras.layers.Add()([y, x]))


def _cifar_resnet_blocks(depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise invalid("depth", "6n + 2 with n >= 1 (20, 32, 56, 110)", depth)
    return (depth - 2) // 6


def _cifar_resnet(depth, num_classes, input_shape, name, weight_decay, shortcut, survivals):
    check_classes(num_classes)
    blocks = _cifar_resnet_blocks(depth)
    l2 = kernel_regularizer(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = bn_relu(conv(16, 3, l2)(inputs))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            survival = survivals[stage * blocks + block] if survivals else None
            x = _basic_block(x, filters, 2 if stage > 0 and block == 0 else 1, l2, shortcut, survival)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name)


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
        weight_decay: see `keras_ils_experiments.zoo.models`. Defaults to `None`.
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
    y = bn_relu(conv(planes, 1, l2)(x))
    y = bn_relu(conv(planes, 3, l2, strides)(y))
    y = keras.layers.BatchNormalization()(conv(4 * planes, 1, l2)(y))
    if strides != 1 or x.shape[-1] != 4 * planes:
        x = keras.layers.BatchNormalization()(conv(4 * planes, 1, l2, strides)(x))
    return keras.layers.ReLU()(keras.layers.Add()([y, x]))


def _four_stage_resnet(stage_blocks, bottleneck, num_classes, input_shape, name, weight_decay):
    check_classes(num_classes)
    l2 = kernel_regularizer(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = bn_relu(conv(64, 3, l2)(inputs))
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), stage_blocks, strict=True)):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            if bottleneck:
                x = _bottleneck_block(x, planes, strides, l2)
            else:
                x = _basic_block(x, planes, strides, l2, "projection")
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name)


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


__all__ = ["resnet", "resnet18", "resnet50", "stochastic_depth_resnet"]
