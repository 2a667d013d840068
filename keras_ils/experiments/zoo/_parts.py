"""Pieces the zoo's builders share: the coupled weight decay, the convolution, BN-ReLU, the logits."""

from __future__ import annotations

import keras

from keras_ils._checks import integer_at_least, number_in


def kernel_regularizer(weight_decay):
    """A function making each kernel's regulariser: `L2(weight_decay / 2)`, or `None` without weight decay."""
    if weight_decay is not None:
        weight_decay = number_in("weight_decay", weight_decay, 0.0, expected="a float >= 0 or None")
    return lambda: keras.regularizers.L2(weight_decay / 2) if weight_decay else None


def conv(filters, kernel, l2, strides=1, padding="same", use_bias=False):
    """A He-normal `Conv2D` (no bias by default) whose kernel carries `l2()` (`kernel_regularizer`'s)."""
    return keras.layers.Conv2D(
        filters,
        kernel,
        strides=strides,
        padding=padding,
        use_bias=use_bias,
        kernel_initializer="he_normal",
        kernel_regularizer=l2(),
    )


def bn_relu(x):
    """Batch normalisation (Keras' defaults), then ReLU."""
    return keras.layers.ReLU()(keras.layers.BatchNormalization()(x))


def dense_logits(x, num_classes, l2):
    """The `logits` layer: `Dense(num_classes)` with `l2()` on its kernel, applied to `x`."""
    return keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2())(x)


def check_classes(num_classes):
    """`num_classes` must be an int >= 2 (a `ValueError` naming it otherwise)."""
    integer_at_least("num_classes", num_classes, 2)


__all__ = ["bn_relu", "check_classes", "conv", "dense_logits", "kernel_regularizer"]
