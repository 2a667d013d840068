import keras
import numpy as np
import pytest

from keras_ils.comparison import networks
from keras_ils_experiments import zoo
from keras_ils_experiments.zoo import recipes


def test_paper_recipes():
    mlp = recipes.recipe_for("mlp", "synthetic")
    assert (mlp.optimizer, mlp.learning_rate, mlp.epochs, mlp.patience, mlp.augment) == ("adam", 1e-2, 500, 10, False)
    resnet = recipes.recipe_for("resnet110", "cifar10")
    assert (resnet.optimizer, resnet.learning_rate, resnet.momentum, resnet.weight_decay) == ("sgd", 0.1, 0.9, 1e-4)
    assert (resnet.batch_size, resnet.epochs, resnet.augment) == (128, 200, True)
    assert not recipes.recipe_for("resnet20", "svhn_cropped").augment
    # step decay x0.1 at epochs 80 and 150 of 200, as the paper's ResNet schedule
    rates = [resnet.learning_rate_at(e) for e in (0, 79, 80, 149, 150, 199)]
    np.testing.assert_allclose(rates, [0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_overrides():
    recipe = recipes.recipe_for("mlp", epochs=7, batch_size=None)
    assert recipe.epochs == 7 and recipe.batch_size == 32


def test_weight_decay_is_the_models_not_the_optimizers():
    # the recipe's weight decay is coupled L2 on the kernels, built into the model
    # (tests/experiments/zoo/test_models.py)
    for recipe in (recipes.recipe_for("resnet20"), networks.Recipe(optimizer="sgd", weight_decay=1e-2)):
        assert recipe.weight_decay and recipe.build_optimizer().weight_decay is None


# The table (paper appendix): SGD, momentum 0.9, lr 0.1; (epochs, milestones, factor, batch, weight decay)
PAPER_RECIPES = {
    "lenet": (300, (60, 120, 160), 0.1, 128, 1e-4),
    "densenet40": (300, (150, 225), 0.1, 64, 1e-4),
    "resnet110": (200, (80, 150), 0.1, 128, 1e-4),
    "resnet18": (200, (80, 150), 0.1, 128, 1e-4),
    "resnet50": (200, (80, 150), 0.1, 128, 1e-4),
    "resnet110sd": (500, (250, 325), 0.1, 128, 1e-4),
    "resnet152sd": (500, (250, 325), 0.1, 128, 1e-4),
    "wrn-34-10": (200, (60, 120, 160), 0.2, 128, 5e-4),
    "inceptionv4": (200, (30, 60, 90), 0.1, 256, 1e-4),  # the appendix's InceptionV4 paragraph
}


@pytest.mark.parametrize("model_name", sorted(PAPER_RECIPES))
def test_each_networks_recipe_is_the_papers(model_name):
    epochs, milestones, factor, batch_size, weight_decay = PAPER_RECIPES[model_name]
    recipe = recipes.recipe_for(model_name, "cifar100")
    assert (recipe.optimizer, recipe.learning_rate, recipe.momentum, recipe.nesterov) == ("sgd", 0.1, 0.9, True)
    assert (recipe.epochs, recipe.milestones, recipe.decay_factor) == (epochs, milestones, factor)
    assert (recipe.batch_size, recipe.weight_decay, recipe.patience, recipe.augment) == (
        batch_size,
        weight_decay,
        None,
        True,
    )
    # the rate just before and at each milestone, from the table
    for passed, milestone in enumerate(milestones):
        assert recipe.learning_rate_at(milestone - 1) == pytest.approx(0.1 * factor**passed)
        assert recipe.learning_rate_at(milestone) == pytest.approx(0.1 * factor ** (passed + 1))
    assert recipe.learning_rate_at(epochs - 1) == pytest.approx(0.1 * factor ** len(milestones))
    optimizer = recipe.build_optimizer()
    assert isinstance(optimizer, keras.optimizers.SGD) and optimizer.nesterov and optimizer.momentum == 0.9


def test_the_mlp_recipe_is_unchanged():
    recipe = recipes.recipe_for("mlp", "synthetic")
    assert recipe == networks.Recipe()
    assert (recipe.optimizer, recipe.learning_rate, recipe.batch_size, recipe.epochs, recipe.patience) == (
        "adam",
        1e-2,
        32,
        500,
        10,
    )
    assert recipe.milestones == () and recipe.learning_rate_at(499) == 1e-2
    assert isinstance(recipe.build_optimizer(), keras.optimizers.Adam)


def test_the_distillation_student_recipe():
    # appendix, knowledge distillation: Adam 1e-2, batch 256, 150 epochs
    recipe = recipes.recipe_for("alexnet", "fashion_mnist")
    assert (recipe.optimizer, recipe.learning_rate, recipe.batch_size, recipe.epochs) == ("adam", 1e-2, 256, 150)
    assert recipe.weight_decay is None and not recipe.augment
    assert recipes.recipe_for("alexnet", "cifar10").augment


def test_variants_follow_their_family():
    assert recipes.recipe_for("resnet20b") == recipes.recipe_for("resnet20")
    assert recipes.recipe_for("densenet100") == recipes.recipe_for("densenet40")
    assert recipes.recipe_for("wrn-16-4").decay_factor == 0.2


def test_milestones_scale_with_an_epochs_override():
    recipe = recipes.recipe_for("lenet", "cifar10", epochs=30)
    assert recipe.milestones == (6, 12, 16)
    np.testing.assert_allclose([recipe.learning_rate_at(e) for e in (5, 6, 12, 16)], [0.1, 0.01, 0.001, 0.0001])


@pytest.mark.parametrize("name", ["vgg16", "resnet", "resnetsd", "wrn-34", ""])
def test_unknown_model_has_no_recipe(name):
    with pytest.raises(ValueError, match="Invalid value for argument `model`"):
        recipes.recipe_for(name, "cifar10")


@pytest.mark.parametrize(
    "model_name", ["lenet", "alexnet", "resnet20", "resnet20b", "resnet110sd", "densenet40", "wrn-16-4"]
)
def test_importing_the_zoo_registers_its_networks_with_the_library(model_name):
    assert networks.network_family(model_name) is zoo.PAPER_NETWORKS
    assert networks.recipe_for(model_name, "cifar10", epochs=3) == recipes.recipe_for(model_name, "cifar10", epochs=3)
    assert (
        networks.build(model_name, 10, (32, 32, 3)).count_params()
        == zoo.build(model_name, 10, (32, 32, 3)).count_params()
    )


def test_the_library_keeps_its_own_names():
    assert networks.network_family("mlp-2-8") is not zoo.PAPER_NETWORKS
    assert networks.recipe_for("mlp", "synthetic") == recipes.recipe_for("mlp") == networks.MLP_RECIPE
