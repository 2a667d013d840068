"""Pieces the zoo's builders share: the coupled weight decay, the convolution, BN-ReLU, the logits."""

from __future__ import annotations

import keras

from keras_ils.comparison.networks import check_classes, kernel_regularizer  # the library's, written once


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


__all__ = ["bn_relu", "check_classes", "conv", "dense_logits", "kernel_regularizer"]
