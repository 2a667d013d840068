"""Inception-v4 at CIFAR resolution, the paper's InceptionV4 distillation teacher."""

from __future__ import annotations

import keras

from keras_ils_experiments.zoo._parts import bn_relu, check_classes, conv, dense_logits, kernel_regularizer


def _conv_bn_relu(x, l2, filters, kernel, strides=1, padding="same"):
    return bn_relu(conv(filters, kernel, l2, strides, padding)(x))


def _chain(x, l2, *convs):
    for spec in convs:
        x = _conv_bn_relu(x, l2, *spec)
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
    check_classes(num_classes)
    l2 = kernel_regularizer(weight_decay)
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
    return keras.Model(inputs, dense_logits(x, num_classes, l2), name=name)


__all__ = ["inceptionv4"]
