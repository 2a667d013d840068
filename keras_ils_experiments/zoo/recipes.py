"""The paper's training recipes, one per network family of the zoo.

`recipe_for(model_name, dataset_name)` picks the recipe by architecture
(paper appendix; SGD with Nesterov momentum 0.9, as the authors' code, and
an initial rate of 0.1 unless noted; the rate is multiplied by the factor at
each milestone epoch):

| recipe     | networks                        | epochs | milestones  | factor | batch | weight decay |
|------------|---------------------------------|--------|-------------|--------|-------|--------------|
| MLP        | `mlp`                           | 500    | Adam 1e-2, constant, early stopping (patience 10) | | 32 | - |
| LeNet      | `lenet`                         | 300    | 60/120/160  | 0.1    | 128   | 1e-4         |
| DenseNet   | `densenet*`                     | 300    | 150/225     | 0.1    | 64    | 1e-4         |
| ResNet     | `resnet*` (and `resnet18/50`)   | 200    | 80/150      | 0.1    | 128   | 1e-4         |
| ResNet-SD  | `resnet*sd`                     | 500    | 250/325     | 0.1    | 128   | 1e-4         |
| WRN        | `wrn-*`                         | 200    | 60/120/160  | 0.2    | 128   | 5e-4         |
| Inception  | `inceptionv4`                   | 200    | 30/60/90    | 0.1    | 256   | 1e-4         |
| student    | `alexnet`                       | 150    | Adam 1e-2, constant | | 256 | -                     |

Milestones are stored as fractions of `epochs` (`Recipe.decay_at`), so a
shorter run (`epochs=` override) keeps the schedule's shape;
`Recipe.milestones` gives them in epochs. The Inception and student rows
come from the appendix's text. For the student the appendix says the rate
is "reduced by 10 % after each 150 iterations" of a 150-epoch run; the
authors' `Network-distillation.py` instead runs 200 epochs of Adam 1e-3
with x0.2 every 100: the recipe keeps the text's constant Adam 1e-2.
Random crop and flip augment CIFAR only (`augment`).
"""

from __future__ import annotations

import dataclasses
import re

from keras_ils._checks import invalid
from keras_ils.comparison.networks import MLP_RECIPE, Recipe


def _sgd(epochs, milestones, batch_size, weight_decay=1e-4, decay_factor=0.1):
    """An SGD recipe of the paper's appendix: Nesterov momentum 0.9 from 0.1, `milestones` in epochs."""
    return Recipe(
        optimizer="sgd",
        learning_rate=0.1,
        momentum=0.9,
        nesterov=True,
        weight_decay=weight_decay,
        epochs=epochs,
        batch_size=batch_size,
        decay_at=tuple(milestone / epochs for milestone in milestones),
        decay_factor=decay_factor,
        patience=None,
    )


RECIPES = {
    "mlp": MLP_RECIPE,
    "lenet": _sgd(300, (60, 120, 160), 128),
    "densenet": _sgd(300, (150, 225), 64),
    "resnet": _sgd(200, (80, 150), 128),
    "resnet-sd": _sgd(500, (250, 325), 128),
    "wrn": _sgd(200, (60, 120, 160), 128, weight_decay=5e-4, decay_factor=0.2),
    "inception": _sgd(200, (30, 60, 90), 256),
    "student": Recipe(learning_rate=1e-2, epochs=150, batch_size=256, patience=None),
}


def recipe_family(model_name: str) -> str:
    """The `RECIPES` key of a `models.build` name.

    Example:

    >>> [recipe_family(name) for name in ("resnet110", "resnet152sd", "wrn-34-10", "densenet40", "alexnet")]
    ['resnet', 'resnet-sd', 'wrn', 'densenet', 'student']
    """
    if model_name in ("mlp", "lenet"):
        return model_name
    if re.fullmatch(r"mlp-\d+-\d+", model_name):
        return "mlp"
    if model_name == "alexnet":
        return "student"
    if model_name == "inceptionv4":
        return "inception"
    if re.fullmatch(r"resnet\d+sd", model_name):
        return "resnet-sd"
    if re.fullmatch(r"resnet\d+b?", model_name):
        return "resnet"
    if re.fullmatch(r"densenet\d+", model_name):
        return "densenet"
    if re.fullmatch(r"wrn-\d+-\d+", model_name):
        return "wrn"
    raise invalid(  # worded as `models.build` words it, which names the argument `model`
        "model",
        "a name of keras_ils_experiments.zoo.models.build (mlp, mlp-D-W, lenet, alexnet, resnet*, resnet*sd, "
        "densenet*, wrn-*, inceptionv4)",
        model_name,
    )


def recipe_for(model_name: str, dataset_name: str = "", **overrides) -> Recipe:
    """The paper's recipe for a model (and dataset: augmentation for CIFAR), with overrides.

    The recipe is picked by architecture (`recipe_family`, the module table);
    overrides set to `None` are ignored. Milestones scale with an `epochs`
    override.

    Example:

    >>> recipe = recipe_for("wrn-34-10", "cifar10")
    >>> recipe.milestones, recipe.decay_factor, recipe.batch_size, recipe.weight_decay, recipe.nesterov
    ((60, 120, 160), 0.2, 128, 0.0005, True)
    >>> recipe_for("resnet20", "cifar10", epochs=10).learning_rate_at(8)
    0.001...
    """
    family = recipe_family(model_name)
    recipe = RECIPES[family]
    if family != "mlp":
        recipe = dataclasses.replace(recipe, augment=dataset_name.startswith("cifar"))
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(recipe, **overrides)


__all__ = ["RECIPES", "Recipe", "recipe_family", "recipe_for"]
