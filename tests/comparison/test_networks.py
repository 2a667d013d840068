"""The networks a comparison trains by name: the library's two families, the registry, the recipes."""

import dataclasses

import keras
import numpy as np
import pytest

from keras_ils.comparison import networks
from keras_ils.comparison.data import datasets


def test_mlp_names_build_their_shape():
    model = networks.build("mlp-2-7", 4, (3,))
    kernels = [layer.kernel.shape for layer in model.layers]
    assert kernels == [(3, 7), (7, 7), (7, 4)] and model.name == "mlp-2-7"
    assert [layer.kernel.shape for layer in networks.build("mlp", 3, (2,)).layers][1:-1] == [(64, 64)] * 4


def test_cnn_outputs_logits_for_images():
    model = networks.build("cnn", 10, (8, 8, 1))
    x = np.random.default_rng(0).normal(size=(5, 8, 8, 1)).astype("float32")
    logits = keras.ops.convert_to_numpy(model(x))
    assert logits.shape == (5, 10) and model.layers[-1].activation is keras.activations.linear
    assert not np.allclose(logits.sum(1), 1.0)  # logits, not probabilities
    with pytest.raises(ValueError, match=r"`cnn` takes images shaped \[height, width, channels\]"):
        networks.build("cnn", 3, (4,))


def test_weight_decay_is_half_on_every_kernel():
    for name, shape in (("mlp-1-4", (2,)), ("cnn", (6, 6, 1))):
        model = networks.build(name, 3, shape, weight_decay=0.2)
        l2 = [float(layer.kernel_regularizer.l2) for layer in model.layers if hasattr(layer, "kernel")]
        np.testing.assert_allclose(l2, 0.1)


def test_the_mlps_penalty_is_the_engines_coupled_decay_on_every_weight():
    """`weight_decay / 2 * ||w||^2` over kernels and biases: its gradient `weight_decay * w` is what the vectorised
    engine adds to every weight's gradient (`MLPTraining.weight_decay`, PyTorch's Adam)."""
    model = networks.build("mlp-2-4", 3, (2,), weight_decay=0.2)
    for weight in model.weights:
        weight.assign(np.random.default_rng(0).normal(size=weight.shape))
    model(np.zeros((1, 2), "float32"))
    squares = sum(float(np.sum(np.square(keras.ops.convert_to_numpy(w)))) for w in model.weights)
    np.testing.assert_allclose(float(sum(keras.ops.convert_to_numpy(loss) for loss in model.losses)), 0.1 * squares,
                               rtol=1e-5)  # fmt: skip


def test_recipes_and_overrides():
    assert networks.recipe_for("mlp-3-8", "synthetic") == networks.MLP_RECIPE
    assert networks.recipe_for("mlp", "wine.csv") == networks.recipe_for("mlp") == networks.TABLE_RECIPE
    assert (networks.TABLE_RECIPE.learning_rate, networks.TABLE_RECIPE.weight_decay) == (1e-3, 1e-2)
    recipe = networks.recipe_for("cnn", "digits", epochs=7, batch_size=None)
    assert recipe == dataclasses.replace(networks.CUSTOM_RECIPE, epochs=7)
    assert (recipe.optimizer, recipe.learning_rate, recipe.patience) == ("adam", 1e-3, 10)


def test_a_step_schedule_multiplies_at_its_milestones():
    recipe = networks.Recipe(learning_rate=0.1, epochs=10, decay_at=(0.3, 0.8), decay_factor=0.5)
    assert recipe.milestones == (3, 8)
    assert [recipe.learning_rate_at(epoch) for epoch in (0, 2, 3, 7, 8, 9)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]


@pytest.mark.parametrize("name", ["mlp-0-4", "mlp-01-4", "mlp-2", "resnet2x", "", 3])
def test_an_unknown_name_lists_the_known_ones(monkeypatch, name):
    monkeypatch.setattr(networks, "_REGISTERED", [])  # the library alone
    with pytest.raises(ValueError, match=r"Invalid value for argument `model`\. Expected a registered network name "
                       r"\(mlp, mlp-D-W, cnn; `import keras_ils_experiments` adds the paper's"):  # fmt: skip
        networks.build(name, 3, (2,))
    if isinstance(name, str):
        assert networks.mlp_shape(name) is None  # the vectorised engine reads the same names


def test_a_registered_family_builds_and_trains_by_its_recipe(monkeypatch):
    monkeypatch.setattr(networks, "_REGISTERED", [])  # the registry as it was, afterwards
    recipe = networks.Recipe(epochs=3)
    wide = networks.Network(r"wide-\d+", lambda name, k, shape, wd: networks.mlp(k, shape, 1, int(name[5:])),
                            lambda name, dataset: recipe, "wide-N")  # fmt: skip
    networks.register(wide)
    assert networks.build("wide-9", 3, (2,)).layers[0].kernel.shape == (2, 9)
    assert networks.recipe_for("wide-9") == recipe and networks.network_family("wide-9") is wide
    again = networks.Network(wide.pattern, wide.build, wide.recipe, "wide-N, again")
    networks.register(again)  # the same pattern: replaced, not listed twice
    assert networks._REGISTERED == [again]
    with pytest.raises(ValueError, match=r"\(mlp, mlp-D-W, cnn, wide-N, again\)\. Received: model='nope'"):
        networks.build("nope", 3, (2,))  # no hint about the paper's networks once some are registered


def test_the_librarys_names_stay_the_librarys(monkeypatch):
    monkeypatch.setattr(networks, "_REGISTERED", [])
    greedy = networks.Network(r".*", lambda *args: None, lambda name, dataset: networks.CUSTOM_RECIPE, "anything")
    networks.register(greedy)
    assert networks.network_family("mlp-3-32") is networks.MLP_NETWORKS  # what the vectorised engine trains
    assert networks.network_family("cnn") is networks.CNN_NETWORKS
    assert networks.network_family("lenet") is greedy


@pytest.mark.parametrize(
    "network, error, match",
    [
        ("wide", TypeError, "`register` takes a `Network`"),
        (networks.Network("(", print, print, "x"), ValueError, r"`Network.pattern`\. Expected a regular expression"),
        (networks.Network("x", None, print, "x"), TypeError, r"`Network.build` must be a function"),
        (networks.Network("x", print, "adam", "x"), TypeError, r"`Network.recipe` must be a function"),
    ],
)
def test_register_refuses_what_cannot_be_a_family(monkeypatch, network, error, match):
    monkeypatch.setattr(networks, "_REGISTERED", [])
    with pytest.raises(error, match=match):
        networks.register(network)
    assert networks._REGISTERED == []


def test_a_dataset_catalogue_by_prefix(monkeypatch):
    monkeypatch.setattr(datasets, "_SOURCES", {})
    with pytest.raises(ValueError, match=r"install `keras-ils\[experiments\]`.*Received: dataset='tfds:cifar10'"):
        datasets.load("tfds:cifar10")
    seen = {}

    def load_mine(name, **settings):
        seen.update(name=name, **settings)
        return datasets.load_synthetic(n_test=4)

    datasets.register_source("mine", load_mine)
    assert datasets.load("mine:abc", validation_fraction=0.25).name == "synthetic"
    assert seen["name"] == "abc" and seen["validation_fraction"] == 0.25 and seen["train_splits"] == ("train",)
    assert seen["seed"] == 0
    datasets.load("mine:abc", validation_size=7, seed=3)  # a registered catalogue takes the tfds-style settings
    assert (seen["validation_size"], seen["seed"]) == (7, 3)
    with pytest.raises(ValueError, match=r"Unknown dataset 'other:abc'.*\(mine:NAME, e\.g\. tfds:cifar10\)"):
        datasets.load("other:abc")
    with pytest.raises(ValueError, match=r"Invalid value for argument `prefix`\. Expected an identifier"):
        datasets.register_source("not an identifier", load_mine)
    with pytest.raises(TypeError, match=r"Argument `loader` must be a function"):
        datasets.register_source("mine", "load_mine")
