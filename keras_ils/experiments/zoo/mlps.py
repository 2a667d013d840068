"""The paper's synthetic-task network: a ReLU MLP."""

from __future__ import annotations

import keras

from keras_ils.experiments.zoo._parts import check_classes, kernel_regularizer


def mlp(
    num_classes: int,
    input_shape: tuple,
    hidden_layers: int = 5,
    units: int = 64,
    name: str = "mlp",
    weight_decay: float | None = None,
) -> keras.Model:
    """The paper's synthetic-task network: `hidden_layers` ReLU layers of `units`, logits out.

    `weight_decay` (see `keras_ils.experiments.zoo.models`) puts `L2(weight_decay / 2)` on
    every kernel; `None` or `0` puts none. The other builders take it too.

    Example:

    >>> model = mlp(num_classes=3, input_shape=(2,))
    >>> model.output_shape, len(model.layers)
    ((None, 3), 6)

    References:
        Maher & Kull (2021), §3 (5 hidden layers of 64 ReLU units).
    """
    check_classes(num_classes)
    l2 = kernel_regularizer(weight_decay)
    layers = [keras.Input(shape=tuple(input_shape))]
    layers += [keras.layers.Dense(units, activation="relu", kernel_regularizer=l2()) for _ in range(hidden_layers)]
    layers.append(keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2()))
    return keras.Sequential(layers, name=name)


__all__ = ["mlp"]
