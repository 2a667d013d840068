"""The networks a comparison trains by name, and how each trains (its `Recipe`).

The library knows two families; `register` adds more (importing
`keras_ils_experiments` registers the paper's: LeNet, the ResNets, DenseNet,
Wide ResNets, Inception-v4, the distillation student):

| name       | network                                                  | recipe                                      |
|------------|----------------------------------------------------------|---------------------------------------------|
| `mlp`      | 5 x 64 ReLU, the synthetic task's (paper §3)            | `MLP_RECIPE` (synthetic), else `TABLE_RECIPE` |
| `mlp-D-W`  | `D` hidden ReLU layers of `W` units                     | the same                                    |
| `cnn`      | two 3x3 convolutions, max-pooling, a dense layer: images | `CUSTOM_RECIPE`: Adam 1e-3, early stopping  |

`MLP_RECIPE` is the paper's Adam 1e-2 with early stopping; `TABLE_RECIPE`
adds coupled weight decay 1e-2 at Adam 1e-3, for tables and your vectors.

Every builder returns an uncompiled model that outputs logits, and takes
`weight_decay`: coupled L2, a penalty `weight_decay / 2 * ||W||^2` on every
kernel (PyTorch SGD's weight decay, which the paper's recipes give), never
Keras' decoupled optimizer `weight_decay`; the MLPs put it on their biases
too, as the vectorised engine (`MLPTraining.weight_decay`) and PyTorch do.

Example:

>>> build("mlp", 3, (2,)).output_shape, recipe_for("mlp", "synthetic").learning_rate
((None, 3), 0.01)
>>> recipe_for("mlp", "wine.csv").learning_rate, recipe_for("mlp", "wine.csv").weight_decay
(0.001, 0.01)
>>> build("cnn", 10, (8, 8, 1)).output_shape, recipe_for("cnn", epochs=5).epochs
((None, 10), 5)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import keras

from keras_ils._checks import integer_at_least, number_in

__all__ = [
    "CNN_NETWORKS",
    "CUSTOM_RECIPE",
    "MLP_NETWORKS",
    "MLP_RECIPE",
    "Network",
    "TABLE_RECIPE",
    "Recipe",
    "build",
    "check_classes",
    "cnn",
    "kernel_regularizer",
    "mlp",
    "mlp_shape",
    "network_family",
    "overridden",
    "recipe_for",
    "register",
]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to train one network: the optimizer, its schedule, the batch size, early stopping, augmentation."""

    optimizer: str = "adam"
    learning_rate: float = 1e-2
    momentum: float = 0.9
    weight_decay: float | None = None
    epochs: int = 500
    batch_size: int = 32
    decay_at: tuple = ()  # fractions of `epochs` where the learning rate is multiplied by `decay_factor`
    patience: int | None = 10  # None: no early stop, the best epoch is still restored
    augment: bool = False  # random crop (4-pixel pad) and horizontal flip, for CIFAR
    decay_factor: float = 0.1
    nesterov: bool = False

    def build_optimizer(self):
        """The optimizer; weight decay is not its business (the network's kernels carry it, see `build`)."""
        if self.optimizer == "adam":
            return keras.optimizers.Adam(self.learning_rate)
        return keras.optimizers.SGD(self.learning_rate, momentum=self.momentum, nesterov=self.nesterov)

    @property
    def milestones(self) -> tuple:
        """The epochs where the rate is multiplied by `decay_factor` (`decay_at` times `epochs`, rounded)."""
        return tuple(round(fraction * self.epochs) for fraction in self.decay_at)

    def learning_rate_at(self, epoch: int) -> float:
        """The rate of (0-based) `epoch`: `learning_rate * decay_factor ** (milestones <= epoch)`."""
        passed = sum(epoch >= milestone for milestone in self.milestones)
        return self.learning_rate * self.decay_factor**passed


# the MLP's on the paper's synthetic task: Adam 1e-2, early stopping on the validation NLL after 10 epochs
MLP_RECIPE = Recipe()
# the MLP's on any other data (tables of a few hundred rows to thousands): Adam 1e-3 and coupled weight decay
# 1e-2 (on every weight), early stopping as above. A validation split of 20-30 examples is often classified
# without error, so its NLL falls as long as the network grows more confident and early stopping never binds;
# MLP_RECIPE then left the few misclassified test examples at -log p of 25-37 (iris, wine: No LS test NLL 3.9 at 83 %
# accuracy). The decay bounds the logits; measured in docs/results/real-data.md ("The default recipe on tables").
TABLE_RECIPE = Recipe(learning_rate=1e-3, weight_decay=1e-2)
# a network of your own (`build_model`) and the `cnn`: Keras' default Adam, early stopping on the validation NLL
# (the best epoch restored), so `epochs` is a ceiling rather than a schedule
CUSTOM_RECIPE = Recipe(optimizer="adam", learning_rate=1e-3, epochs=200, batch_size=32, patience=10)


def kernel_regularizer(weight_decay):
    """A function making each kernel's regulariser: `L2(weight_decay / 2)`, or `None` without weight decay."""
    if weight_decay is not None:
        weight_decay = number_in("weight_decay", weight_decay, 0.0, expected="a float >= 0 or None")
    return lambda: keras.regularizers.L2(weight_decay / 2) if weight_decay else None


def check_classes(num_classes):
    """`num_classes` must be an int >= 2 (a `ValueError` naming it otherwise)."""
    integer_at_least("num_classes", num_classes, 2)


def mlp(
    num_classes: int,
    input_shape: tuple,
    hidden_layers: int = 5,
    units: int = 64,
    name: str = "mlp",
    weight_decay: float | None = None,
) -> keras.Model:
    """The paper's synthetic-task network: `hidden_layers` ReLU layers of `units`, logits out.

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
    layers += [
        keras.layers.Dense(units, activation="relu", kernel_regularizer=l2(), bias_regularizer=l2())
        for _ in range(hidden_layers)
    ]
    layers.append(keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2(), bias_regularizer=l2()))
    return keras.Sequential(layers, name=name)


def cnn(num_classes: int, input_shape: tuple, weight_decay: float | None = None) -> keras.Model:
    """A small image network: two 3x3 ReLU convolutions (32, 64), 2x2 max-pooling, 128 ReLU units, logits out.

    The default network of a comparison on images (`[H, W, C]` examples);
    for anything larger pass your own (`compare(build_model=...)`).

    Example:

    >>> cnn(10, (28, 28, 1)).output_shape
    (None, 10)
    """
    check_classes(num_classes)
    if len(input_shape) != 3:
        raise ValueError(f"`cnn` takes images shaped [height, width, channels]. Received: input_shape={input_shape}")
    l2 = kernel_regularizer(weight_decay)
    layers = [keras.Input(shape=tuple(input_shape))]
    layers += [keras.layers.Conv2D(32, 3, padding="same", activation="relu", kernel_regularizer=l2())]
    layers += [keras.layers.Conv2D(64, 3, padding="same", activation="relu", kernel_regularizer=l2())]
    layers += [keras.layers.MaxPooling2D(), keras.layers.Flatten()]
    layers += [keras.layers.Dense(128, activation="relu", kernel_regularizer=l2())]
    layers.append(keras.layers.Dense(num_classes, name="logits", kernel_regularizer=l2()))
    return keras.Sequential(layers, name="cnn")


def mlp_shape(name: str) -> tuple[int, int] | None:
    """`(hidden_layers, units)` of an MLP name (`mlp` is the paper's 5 x 64, `mlp-D-W` any), else `None`.

    Example:

    >>> mlp_shape("mlp"), mlp_shape("mlp-2-128"), mlp_shape("lenet")
    ((5, 64), (2, 128), None)
    """
    if name == "mlp":
        return 5, 64
    match = re.fullmatch(r"mlp-([1-9]\d*)-([1-9]\d*)", name)
    if match:
        return int(match[1]), int(match[2])
    return None


@dataclasses.dataclass(frozen=True)
class Network:
    """A family of named networks: the names it takes, how it builds one, how that one trains.

    Attributes:
        pattern: a regular expression the whole name matches (`re.fullmatch`).
        build: `build(name, num_classes, input_shape, weight_decay) -> keras.Model` (logits out).
        recipe: `recipe(name, dataset_name) -> Recipe`.
        names: the names as the error of an unknown name lists them, e.g. `"mlp, mlp-D-W"`.
    """

    pattern: str
    build: Callable
    recipe: Callable
    names: str


def _mlp(name, num_classes, input_shape, weight_decay):
    return mlp(num_classes, input_shape, *mlp_shape(name), name=name, weight_decay=weight_decay)


def _mlp_recipe(dataset_name: str) -> Recipe:
    """The paper's recipe on its synthetic task, `TABLE_RECIPE` on any other data."""
    return MLP_RECIPE if dataset_name == "synthetic" else TABLE_RECIPE


def _cnn(name, num_classes, input_shape, weight_decay):
    return cnn(num_classes, input_shape, weight_decay=weight_decay)


# the library's families: always tried first, so their names (and `uses_engine`'s reading of `mlp-D-W`) stay theirs
MLP_NETWORKS = Network(r"mlp|mlp-[1-9]\d*-[1-9]\d*", _mlp, lambda name, dataset: _mlp_recipe(dataset), "mlp, mlp-D-W")
CNN_NETWORKS = Network("cnn", _cnn, lambda name, dataset: CUSTOM_RECIPE, "cnn")
_LIBRARY = (MLP_NETWORKS, CNN_NETWORKS)
_REGISTERED = []  # `register`'s, in order


def register(network: Network) -> None:
    r"""Makes `network`'s names known to `build`, `recipe_for` and the command's `--model`.

    The library's names (`mlp`, `mlp-D-W`, `cnn`) stay the library's; among
    registered families the last registered wins, and registering a pattern
    again replaces its family. For example, a family of one-layer MLPs of
    any width, `wide-W`:

        register(Network(r"wide-\d+", lambda name, k, shape, wd: mlp(k, shape, 1, int(name[5:]), name=name),
                         lambda name, dataset: CUSTOM_RECIPE, "wide-W"))
        build("wide-32", 10, (64,))
    """
    if not isinstance(network, Network):
        raise TypeError(f"`register` takes a `Network`. Received: network={network!r} of type {type(network)}")
    try:
        re.compile(network.pattern)
    except (re.error, TypeError) as error:
        raise ValueError(
            f"Invalid value for `Network.pattern`. Expected a regular expression. Received: {network.pattern!r} "
            f"({error})"
        ) from None
    for field in ("build", "recipe"):
        if not callable(getattr(network, field)):
            raise TypeError(f"`Network.{field}` must be a function. Received: {getattr(network, field)!r}")
    _REGISTERED[:] = [known for known in _REGISTERED if known.pattern != network.pattern] + [network]


def network_family(name: str) -> Network:
    """The `Network` that takes `name`; a `ValueError` listing the known names when none does.

    Example:

    >>> network_family("mlp-2-8") is network_family("mlp") is MLP_NETWORKS
    True
    """
    for network in (*_LIBRARY, *reversed(_REGISTERED)):
        if isinstance(name, str) and re.fullmatch(network.pattern, name):
            return network
    known = ", ".join(network.names for network in (*_LIBRARY, *_REGISTERED))
    hint = "" if _REGISTERED else "; `import keras_ils_experiments` adds the paper's: lenet, resnet20, wrn-28-10, ..."
    raise ValueError(
        f"Invalid value for argument `model`. Expected a registered network name ({known}{hint}). Received: "
        f"model={name!r}"
    )


def build(name: str, num_classes: int, input_shape: tuple, weight_decay: float | None = None) -> keras.Model:
    """A new, uncompiled network by name (logits out); `weight_decay` puts `L2(weight_decay / 2)` on its kernels."""
    return network_family(name).build(name, num_classes, tuple(input_shape), weight_decay)


def recipe_for(name: str, dataset_name: str = "", **overrides) -> Recipe:
    """How the network `name` trains on `dataset_name`, with `overrides` (those set to `None` are ignored).

    Milestones are fractions of `epochs`, so an `epochs` override keeps the schedule's shape.
    """
    return overridden(network_family(name).recipe(name, dataset_name), **overrides)


def overridden(recipe: Recipe, **overrides) -> Recipe:
    """`recipe` with `overrides` (those set to `None` are ignored).

    Example:

    >>> overridden(CUSTOM_RECIPE, epochs=20, batch_size=None).epochs
    20
    """
    return dataclasses.replace(recipe, **{key: value for key, value in overrides.items() if value is not None})
