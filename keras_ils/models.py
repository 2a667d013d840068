"""Classifier builders used by the examples and the command line: each returns logits."""

from __future__ import annotations

import keras


def mlp(
    num_classes: int, input_shape: tuple, hidden_layers: int = 5, units: int = 64, name: str = "mlp"
) -> keras.Model:
    """The paper's synthetic-task network: `hidden_layers` ReLU layers of `units`, logits out.

    Example:

    >>> model = mlp(num_classes=3, input_shape=(2,))
    >>> model.output_shape, len(model.layers)
    ((None, 3), 6)

    References:
        Maher & Kull (2021), §3 (5 hidden layers of 64 ReLU units).
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(
            f"Invalid value for argument `num_classes`. Expected an int >= 2. Received: num_classes={num_classes!r}"
        )
    layers = [keras.Input(shape=tuple(input_shape))]
    layers += [keras.layers.Dense(units, activation="relu") for _ in range(hidden_layers)]
    layers.append(keras.layers.Dense(num_classes, name="logits"))
    return keras.Sequential(layers, name=name)
