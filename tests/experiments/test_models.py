import keras
import pytest

from keras_ils.experiments import models


def test_mlp_is_the_papers_network():
    model = models.mlp(num_classes=3, input_shape=(2,))
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [layer.units for layer in dense] == [64] * 5 + [3]
    assert all(layer.activation is keras.activations.relu for layer in dense[:-1])
    assert dense[-1].activation is keras.activations.linear  # logits
    assert model.count_params() == (2 * 64 + 64) + 4 * (64 * 64 + 64) + (64 * 3 + 3)


def test_bad_class_count():
    with pytest.raises(ValueError, match="Invalid value for argument `num_classes`"):
        models.mlp(num_classes=1, input_shape=(2,))


@pytest.mark.parametrize(
    "name, params",
    [
        ("resnet20", 0.27e6),  # He et al. (2016), Table 6: 0.27M
        ("resnet32", 0.46e6),  # 0.46M
        ("wrn-16-4", 2.7e6),  # Zagoruyko & Komodakis (2016), Table 1: 2.7M
    ],
)
def test_image_networks_have_the_published_sizes(name, params):
    model = models.build(name, 10, (32, 32, 3))
    assert model.output_shape == (None, 10)
    assert abs(model.count_params() - params) / params < 0.06


def test_lenet_parameter_count():
    # conv 5x5x3x6+6, conv 5x5x6x16+16, dense 400x120+120, 120x84+84, 84x10+10
    assert models.build("lenet", 10, (32, 32, 3)).count_params() == 456 + 2416 + 48120 + 10164 + 850


@pytest.mark.parametrize("name", ["resnet21", "wrn-15-2", "vgg16"])
def test_unknown_or_invalid_model(name):
    with pytest.raises(ValueError, match="Invalid value for argument"):
        models.build(name, 10, (32, 32, 3))
