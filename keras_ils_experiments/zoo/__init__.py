"""The paper's networks by name (Table 3 and the distillation table), and their training recipes.

| module         | what it holds                                                                         |
|----------------|---------------------------------------------------------------------------------------|
| `models`       | the name registry: `MODEL_NAMES`, `mlp_shape`, `build` (and every builder, re-exported) |
| `recipes`      | the paper's training recipes: `Recipe`, `RECIPES`, `recipe_family`, `recipe_for`       |
| `resnets`      | CIFAR ResNets (option A or B shortcuts), with stochastic depth; ResNet-18/50           |
| `densenets`    | DenseNet-BC                                                                           |
| `wide_resnets` | Wide ResNets                                                                          |
| `small_cnns`   | LeNet-5 and the distillation student ("AlexNet")                                      |
| `inception`    | Inception-v4 at CIFAR resolution                                                      |
| `layers`       | `StochasticDepth` and `ZeroPadShortcut`, registered Keras layers                      |

Importing it registers the paper's networks with the library
(`keras_ils.comparison.networks.register`), so the command's `--model` and
`keras_ils.comparison.networks.build` take their names.

Example:

>>> from keras_ils.comparison import networks
>>> from keras_ils_experiments import zoo
>>> networks.build("lenet", 10, (32, 32, 3)).name, networks.recipe_for("resnet20", "cifar10").augment
('lenet', True)
"""

from keras_ils.comparison import networks
from keras_ils_experiments.zoo.densenets import densenet
from keras_ils_experiments.zoo.inception import inceptionv4
from keras_ils_experiments.zoo.layers import StochasticDepth, ZeroPadShortcut
from keras_ils_experiments.zoo.models import MODEL_NAMES, build
from keras_ils_experiments.zoo.recipes import RECIPES, recipe_family, recipe_for
from keras_ils_experiments.zoo.resnets import resnet, resnet18, resnet50, stochastic_depth_resnet
from keras_ils_experiments.zoo.small_cnns import alexnet, lenet
from keras_ils_experiments.zoo.wide_resnets import wide_resnet

__all__ = [
    "MODEL_NAMES",
    "PAPER_NETWORKS",
    "RECIPES",
    "StochasticDepth",
    "ZeroPadShortcut",
    "alexnet",
    "build",
    "densenet",
    "inceptionv4",
    "lenet",
    "recipe_family",
    "recipe_for",
    "resnet",
    "resnet18",
    "resnet50",
    "stochastic_depth_resnet",
    "wide_resnet",
]

# the paper's names (those of `models.build` beyond the library's `mlp`): built and trained by the paper's recipes
PAPER_NETWORKS = networks.Network(
    pattern=r"lenet|alexnet|inceptionv4|resnet\d+(b|sd)?|densenet\d+|wrn-\d+-\d+",
    build=build,
    recipe=recipe_for,
    names="the paper's: lenet, alexnet, resnet{6n+2}[b|sd], resnet18, resnet50, densenet{6m+4}, wrn-D-W, inceptionv4",
)
networks.register(PAPER_NETWORKS)
