"""Classifier builders used by the examples and the command line: each returns logits.

Every builder takes `weight_decay`: the paper's (PyTorch SGD's) coupled weight
decay, an L2 penalty `weight_decay / 2 * ||W||^2` on every Conv2D and Dense
kernel (`kernel_regularizer`), so `weight_decay * W` joins the gradient and
passes through momentum. Keras' own optimizer `weight_decay` is decoupled and,
under momentum 0.9, about ten times weaker. The penalty enters the training
loss (and Keras' `val_loss`), never the hard-label `val_nll` metric that model
selection monitors. `training.recipe_for` gives the paper's value per network.
"""

from __future__ import annotations

import keras

from keras_ils._checks import integer_at_least, number_in


def mlp(
    num_classes: int,
    input_shape: tuple,
    hidden_layers: int = 5,
    units: int = 64,
    name: str = "mlp",
    weight_decay: float | None = None,
) -> keras.Model:
    """The paper's synthetic-task network: `hidden_layers` ReLU layers of `units`, logits out.

    `weight_decay` (see the module docstring) puts `L2(weight_decay / 2)` on
    every kernel; `None` or `0` puts none. The other builders take it too.

    Example:

    >>> model = mlp(num_classes=3, input_shape=(2,))
    >>> model.output_shape, len(model.layers)
    ((None, 3), 6)

    References:
        Maher & Kull (2021), §3 (5 hidden layers of 64 ReLU units).
    """
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
    layers = [keras.Input(shape=tuple(input_shape))]
    layers += [keras.layers.Dense(units, activation="relu", kernel_regularizer=l2()) for _ in range(hidden_layers)]
    layers.append(keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2()))
    return keras.Sequential(layers, name=name)


def _weight_decay(weight_decay):
    """A function making each kernel's regulariser: `L2(weight_decay / 2)`, or `None` without weight decay."""
    if weight_decay is not None:
        weight_decay = number_in("weight_decay", weight_decay, 0.0, expected="a float >= 0 or None")
    return lambda: keras.regularizers.L2(weight_decay / 2) if weight_decay else None


def _conv(filters, kernel, l2, strides=1):
    return keras.layers.Conv2D(
        filters,
        kernel,
        strides=strides,
        padding="same",
        use_bias=False,
        kernel_initializer="he_normal",
        kernel_regularizer=l2(),
    )


def _resnet_block(x, filters, strides, l2):
    shortcut = x
    y = keras.layers.ReLU()(keras.layers.BatchNormalization()(_conv(filters, 3, l2, strides)(x)))
    y = keras.layers.BatchNormalization()(_conv(filters, 3, l2)(y))
    if strides != 1 or x.shape[-1] != filters:
        shortcut = keras.layers.BatchNormalization()(_conv(filters, 1, l2, strides)(x))
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def resnet(
    depth: int,
    num_classes: int,
    input_shape: tuple = (32, 32, 3),
    name: str | None = None,
    weight_decay: float | None = None,
) -> keras.Model:
    """CIFAR-style ResNet of He et al. (2016): `depth = 6n + 2`, stages of 16/32/64 filters, logits out.

    Shortcuts that change shape use a 1x1 convolution (option B).

    Example:

    >>> resnet(20, num_classes=10).count_params() > 270_000
    True

    References:
        He et al. (2016), §4.2 (depths 20, 32, 44, 56, 110).
    """
    _check_classes(num_classes)
    if (depth - 2) % 6 or depth < 8:
        raise ValueError(
            f"Invalid value for argument `depth`. Expected 6n + 2 (20, 32, 56, 110). Received: depth={depth}"
        )
    blocks = (depth - 2) // 6
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(_conv(16, 3, l2)(inputs)))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            x = _resnet_block(x, filters, 2 if stage > 0 and block == 0 else 1, l2)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2())(x)
    return keras.Model(inputs, outputs, name=name or f"resnet{depth}")


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

    Example:

    >>> wide_resnet(10, 1, num_classes=10).output_shape
    (None, 10)

    References:
        Zagoruyko & Komodakis (2016), "Wide Residual Networks" (`depth = 6n + 4`).
    """
    _check_classes(num_classes)
    if (depth - 4) % 6 or depth < 10:
        raise ValueError(f"Invalid value for argument `depth`. Expected 6n + 4 (16, 22, 28). Received: depth={depth}")
    blocks = (depth - 4) // 6
    l2 = _weight_decay(weight_decay)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _conv(16, 3, l2)(inputs)
    for stage, filters in enumerate((16 * width, 32 * width, 64 * width)):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            pre = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
            y = _conv(filters, 3, l2, strides)(pre)
            y = keras.layers.ReLU()(keras.layers.BatchNormalization()(y))
            if dropout:
                y = keras.layers.Dropout(dropout)(y)
            y = _conv(filters, 3, l2)(y)
            shortcut = x if strides == 1 and x.shape[-1] == filters else _conv(filters, 1, l2, strides)(pre)
            x = keras.layers.Add()([y, shortcut])
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2())(x)
    return keras.Model(inputs, outputs, name=name or f"wrn{depth}_{width}")


def lenet(
    num_classes: int, input_shape: tuple = (32, 32, 3), name: str = "lenet", weight_decay: float | None = None
) -> keras.Model:
    """LeNet-5 as used by the paper for CIFAR: two 5x5 conv + max-pool stages, dense 120 and 84, logits out.

    Example:

    >>> lenet(num_classes=10).count_params()
    62006
    """
    _check_classes(num_classes)
    l2 = _weight_decay(weight_decay)
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


def _check_classes(num_classes):
    integer_at_least("num_classes", num_classes, 2)


MODEL_NAMES = ("mlp", "lenet", "resnet20", "resnet32", "resnet56", "resnet110", "wrn-16-4", "wrn-28-10")


def build(name: str, num_classes: int, input_shape: tuple, weight_decay: float | None = None) -> keras.Model:
    """A model by name: `mlp`, `lenet`, `resnet{20,32,56,110}` (any `resnet{6n+2}`), `wrn-{depth}-{width}`.

    `weight_decay` puts `L2(weight_decay / 2)` on every Conv2D and Dense
    kernel (the module docstring says why); give it the recipe's,
    `training.recipe_for(name, dataset).weight_decay`. Defaults to `None` (none).

    Example:

    >>> build("resnet20", 10, (32, 32, 3)).name
    'resnet20'
    >>> model = build("mlp", 3, (2,), weight_decay=1e-4)
    >>> {float(layer.kernel_regularizer.l2) for layer in model.layers}
    {5e-05}
    """
    if name == "mlp":
        return mlp(num_classes, input_shape, weight_decay=weight_decay)
    if name == "lenet":
        return lenet(num_classes, input_shape, weight_decay=weight_decay)
    if name.startswith("resnet") and name[6:].isdigit():
        return resnet(int(name[6:]), num_classes, input_shape, weight_decay=weight_decay)
    parts = name.split("-")
    if len(parts) == 3 and parts[0] == "wrn" and parts[1].isdigit() and parts[2].isdigit():
        return wide_resnet(int(parts[1]), int(parts[2]), num_classes, input_shape, weight_decay=weight_decay)
    raise ValueError(f"Invalid value for argument `model`. Expected one of {MODEL_NAMES}. Received: model={name!r}")
