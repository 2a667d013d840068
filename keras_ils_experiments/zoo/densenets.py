"""DenseNet-BC for CIFAR."""

from __future__ import annotations

import keras

from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils_experiments.zoo._parts import bn_relu, check_classes, conv, dense_logits, kernel_regularizer


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
    check_classes(num_classes)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 10 or (depth - 4) % 6:
        raise invalid("depth", "6m + 4 with m >= 1 (40, 100, 190, 250)", depth)
    integer_at_least("growth_rate", growth_rate, 1)
    compression = number_in("compression", compression, 0.0, 1.0, low_open=True)
    layers_per_block = (depth - 4) // 6
    l2 = kernel_regularizer(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = conv(2 * growth_rate, 3, l2)(inputs)
    for block in range(3):
        for _ in range(layers_per_block):
            y = conv(4 * growth_rate, 1, l2)(bn_relu(x))
            y = conv(growth_rate, 3, l2)(bn_relu(y))
            x = keras.layers.Concatenate()([x, y])
        if block < 2:
            x = conv(int(x.shape[-1] * compression), 1, l2)(bn_relu(x))
            x = keras.layers.AveragePooling2D(2)(x)
    x = keras.layers.GlobalAveragePooling2D()(bn_relu(x))
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name or f"densenet{depth}")


__all__ = ["densenet"]
