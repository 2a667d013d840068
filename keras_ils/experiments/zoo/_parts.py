"""Pieces the zoo's builders share: the coupled weight decay, the convolution, BN-ReLU, the logits."""

from __future__ import annotations

import keras

from keras_ils._checks import integer_at_least, number_in


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


def _check_classes(num_classes):
    integer_at_least("num_classes", num_classes, 2)


__all__ = []
