"""Classifier builders used by the examples and the command line: each returns logits.

The paper's networks (Table 3 and the distillation table), by name through
`build`; the table below lists `MODEL_NAMES` and where each definition comes
from. "The authors' code" is github.com/mmaher22/Instance-based-label-smoothing
(`models/*.py`); `docs/cli/networks.md` has the parameter counts and recipes.

| name                   | network                                                                  |
|------------------------|--------------------------------------------------------------------------|
| `mlp`                  | 5 x 64 ReLU, the synthetic task (paper §3)                               |
| `lenet`                | LeNet-5 (the paper's LeNet, meliketoy/wide-resnet.pytorch)              |
| `alexnet`              | the distillation student: 3 conv + 2 dense (the authors' `shallownet.py`)|
| `resnet{6n+2}`         | CIFAR ResNet, option-A zero-padding shortcuts (He et al., 2016)          |
| `resnet{6n+2}b`        | the same with 1x1 projection shortcuts (option B)                        |
| `resnet{6n+2}sd`       | CIFAR ResNet with stochastic depth, survival 1 -> 0.5 (Huang et al.)     |
| `resnet18`, `resnet50` | ImageNet ResNets at CIFAR scale: 3x3 stem, no max-pool (kuangliu style)  |
| `densenet{6m+4}`       | DenseNet-BC, growth 12, compression 0.5 (`densenet40` in the paper)      |
| `wrn-{6n+4}-{width}`   | Wide ResNet (`wrn-34-10` is the paper's "ResNet32W")                     |
| `inceptionv4`          | Inception-v4 at CIFAR resolution (weiaicunzai/pytorch-cifar100)          |

Every builder takes `weight_decay`: the paper's (PyTorch SGD's) coupled weight
decay, an L2 penalty `weight_decay / 2 * ||W||^2` on every Conv2D and Dense
kernel (`kernel_regularizer`), so `weight_decay * W` joins the gradient and
passes through momentum. Keras' own optimizer `weight_decay` is decoupled and,
under momentum 0.9, about ten times weaker. The penalty enters the training
loss (and Keras' `val_loss`), never the hard-label `val_nll` metric that model
selection monitors. `recipes.recipe_for` gives the paper's value per network.

Batch normalisation keeps Keras' defaults (momentum 0.99, epsilon 1e-3;
PyTorch's are 0.9 and 1e-5) in every network, as the first networks here did.
"""

from __future__ import annotations

import re

import keras

from keras_ils.comparison.networks import mlp, mlp_shape
from keras_ils_experiments.zoo.densenets import densenet
from keras_ils_experiments.zoo.inception import inceptionv4
from keras_ils_experiments.zoo.layers import StochasticDepth, ZeroPadShortcut
from keras_ils_experiments.zoo.resnets import resnet, resnet18, resnet50, stochastic_depth_resnet
from keras_ils_experiments.zoo.small_cnns import alexnet, lenet
from keras_ils_experiments.zoo.wide_resnets import wide_resnet

MODEL_NAMES = (
    "mlp",
    "lenet",
    "alexnet",
    "resnet20",
    "resnet32",
    "resnet56",
    "resnet110",
    "resnet110sd",
    "resnet152sd",
    "resnet18",
    "resnet50",
    "densenet40",
    "wrn-16-4",
    "wrn-28-10",
    "wrn-34-10",
    "inceptionv4",
)


def build(name: str, num_classes: int, input_shape: tuple, weight_decay: float | None = None) -> keras.Model:
    """A model by name: `MODEL_NAMES` and the families of the module table.

    `mlp`, `lenet`, `alexnet`, `resnet18`, `resnet50`, `inceptionv4`;
    `resnet{6n+2}` (option A), `resnet{6n+2}b` (option B),
    `resnet{6n+2}sd` (stochastic depth); `densenet{6m+4}` (DenseNet-BC);
    `wrn-{6n+4}-{width}`; `mlp-{hidden layers}-{units}` (`mlp` is `mlp-5-64`).
    (`resnet50` is the bottleneck ResNet-50, not the CIFAR ResNet of depth 6 * 8 + 2.)

    `weight_decay` puts `L2(weight_decay / 2)` on every Conv2D and Dense
    kernel (the module docstring says why); give it the recipe's,
    `recipes.recipe_for(name, dataset).weight_decay`. Defaults to `None` (none).

    Example:

    >>> build("resnet20", 10, (32, 32, 3)).name
    'resnet20'
    >>> model = build("mlp", 3, (2,), weight_decay=1e-4)
    >>> {float(layer.kernel_regularizer.l2) for layer in model.layers}
    {5e-05}
    """
    fixed = {"mlp": mlp, "lenet": lenet, "alexnet": alexnet, "resnet18": resnet18, "resnet50": resnet50}
    fixed["inceptionv4"] = inceptionv4
    if name in fixed:
        return fixed[name](num_classes, input_shape, weight_decay=weight_decay)
    match = re.fullmatch(r"(resnet|densenet)(\d+)(b|sd)?", name)
    if match and match[1] == "resnet" and match[3] == "sd":
        return stochastic_depth_resnet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    if match and match[1] == "resnet":
        shortcut = "projection" if match[3] == "b" else "zero_pad"
        return resnet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay, shortcut=shortcut)
    if match and match[3] is None:
        return densenet(int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    shape = mlp_shape(name)
    if shape is not None:
        return mlp(num_classes, input_shape, *shape, name=name, weight_decay=weight_decay)
    match = re.fullmatch(r"wrn-(\d+)-(\d+)", name)
    if match:
        return wide_resnet(int(match[1]), int(match[2]), num_classes, input_shape, weight_decay=weight_decay)
    raise ValueError(f"Invalid value for argument `model`. Expected one of {MODEL_NAMES}. Received: model={name!r}")


__all__ = [
    "MODEL_NAMES",
    "StochasticDepth",
    "ZeroPadShortcut",
    "alexnet",
    "build",
    "densenet",
    "inceptionv4",
    "lenet",
    "mlp",
    "mlp_shape",
    "resnet",
    "resnet18",
    "resnet50",
    "stochastic_depth_resnet",
    "wide_resnet",
]
