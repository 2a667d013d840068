"""The paper's networks by name (Table 3 and the distillation table), and their training recipes.

| module         | what it holds                                                                         |
|----------------|---------------------------------------------------------------------------------------|
| `models`       | the name registry: `MODEL_NAMES`, `mlp_shape`, `build` (and every builder, re-exported) |
| `recipes`      | the paper's training recipes: `Recipe`, `RECIPES`, `recipe_family`, `recipe_for`       |
| `mlps`         | the synthetic task's ReLU MLP                                                         |
| `resnets`      | CIFAR ResNets (option A or B shortcuts), with stochastic depth; ResNet-18/50           |
| `densenets`    | DenseNet-BC                                                                           |
| `wide_resnets` | Wide ResNets                                                                          |
| `small_cnns`   | LeNet-5 and the distillation student ("AlexNet")                                      |
| `inception`    | Inception-v4 at CIFAR resolution                                                      |
| `layers`       | `StochasticDepth` and `ZeroPadShortcut`, registered Keras layers                      |

Example:

>>> from keras_ils.experiments import zoo
>>> zoo.build("mlp", 3, (2,)).output_shape, zoo.recipe_for("mlp").batch_size
((None, 3), 32)
"""

from keras_ils.experiments.zoo.densenets import densenet
from keras_ils.experiments.zoo.inception import inceptionv4
from keras_ils.experiments.zoo.layers import StochasticDepth, ZeroPadShortcut
from keras_ils.experiments.zoo.mlps import mlp
from keras_ils.experiments.zoo.models import MODEL_NAMES, build, mlp_shape
from keras_ils.experiments.zoo.recipes import RECIPES, Recipe, recipe_family, recipe_for
from keras_ils.experiments.zoo.resnets import resnet, resnet18, resnet50, stochastic_depth_resnet
from keras_ils.experiments.zoo.small_cnns import alexnet, lenet
from keras_ils.experiments.zoo.wide_resnets import wide_resnet

__all__ = [
    "MODEL_NAMES",
    "RECIPES",
    "Recipe",
    "StochasticDepth",
    "ZeroPadShortcut",
    "alexnet",
    "build",
    "densenet",
    "inceptionv4",
    "lenet",
    "mlp",
    "mlp_shape",
    "recipe_family",
    "recipe_for",
    "resnet",
    "resnet18",
    "resnet50",
    "stochastic_depth_resnet",
    "wide_resnet",
]
