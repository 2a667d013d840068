"""The small CNNs: LeNet-5 and the paper's "AlexNet" distillation student."""

from __future__ import annotations

import keras

from keras_ils._checks import integer_at_least, number_in
from keras_ils_experiments.zoo._parts import bn_relu, check_classes, conv, dense_logits, kernel_regularizer


def lenet(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "lenet", weight_decay: float | None = None
) -> keras.Model:
    """LeNet-5 as used by the paper for CIFAR: two 5x5 conv + max-pool stages, dense 120 and 84, logits out.

    Example:

    >>> lenet(num_classes=10).count_params()
    62006
    """
    check_classes(num_classes)
    l2 = kernel_regularizer(weight_decay)
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
    check_classes(num_classes)
    integer_at_least("channels", channels, 1)
    dropout = number_in("dropout", dropout, 0.0, 1.0, high_open=True)
    l2 = kernel_regularizer(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = inputs
    for filters in (channels, 2 * channels, 4 * channels):
        x = keras.layers.BatchNormalization()(conv(filters, 3, l2, use_bias=True)(x))
        x = keras.layers.ReLU()(keras.layers.MaxPooling2D(2)(x))
    x = keras.layers.Dense(4 * channels, kernel_regularizer=l2())(keras.layers.Flatten()(x))
    x = keras.layers.Dropout(dropout)(bn_relu(x))
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name)


__all__ = ["alexnet", "lenet"]
