"""Wide ResNets (Zagoruyko & Komodakis, 2016)."""

from __future__ import annotations

import keras

from keras_ils_experiments.zoo._parts import bn_relu, check_classes, conv, dense_logits, kernel_regularizer


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
    check_classes(num_classes)
    if (depth - 4) % 6 or depth < 10:
        raise ValueError(
            f"Invalid value for argument `depth`. Expected 6n + 4 (16, 22, 28, 34). Received: depth={depth}"
        )
    blocks = (depth - 4) // 6
    l2 = kernel_regularizer(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = conv(16, 3, l2)(inputs)
    for stage, filters in enumerate((16 * width, 32 * width, 64 * width)):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            pre = bn_relu(x)
            y = bn_relu(conv(filters, 3, l2, strides)(pre))
            if dropout:
                y = keras.layers.Dropout(dropout)(y)
            y = conv(filters, 3, l2)(y)
            shortcut = x if strides == 1 and x.shape[-1] == filters else conv(filters, 1, l2, strides)(pre)
            x = keras.layers.Add()([y, shortcut])
    x = keras.layers.GlobalAveragePooling2D()(bn_relu(x))
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name or f"wrn{depth}_{width}")


__all__ = ["wide_resnet"]
