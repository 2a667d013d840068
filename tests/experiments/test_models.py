import keras
import numpy as np
import pytest
import tensorflow as tf

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


@pytest.mark.parametrize(
    "name, input_shape", [("mlp", (2,)), ("lenet", (32, 32, 3)), ("resnet8", (8, 8, 3)), ("wrn-10-2", (8, 8, 3))]
)
def test_weight_decay_is_coupled_l2_on_every_kernel_like_pytorch_sgd(name, input_shape):
    model = models.build(name, 10, input_shape, weight_decay=1e-2)
    layers = [layer for layer in model.layers if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    kernels = [layer.kernel for layer in layers]
    assert len(kernels) == len(model.losses) > 1  # one penalty per Conv2D/Dense kernel, none on biases or BN
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses)
    expected = 1e-2 / 2 * sum(float(np.sum(kernel.numpy().astype(np.float64) ** 2)) for kernel in kernels)
    np.testing.assert_allclose(float(penalty), expected, rtol=1e-5)
    for kernel, grad in zip(kernels, tape.gradient(penalty, kernels), strict=True):
        np.testing.assert_allclose(grad, 1e-2 * kernel.numpy(), rtol=1e-5)  # PyTorch adds weight_decay * W


def test_weight_decay_enters_the_training_loss():
    model = models.mlp(3, (2,), hidden_layers=1, units=4, weight_decay=0.1)
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = np.ones((4, 2), "float32"), np.array([0, 1, 2, 0])
    plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model.predict(x, verbose=0))
    kernels = [layer.kernel.numpy() for layer in model.layers]
    penalty = 0.05 * sum(float(np.sum(kernel.astype(np.float64) ** 2)) for kernel in kernels)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), float(plain) + penalty, rtol=1e-5)


@pytest.mark.parametrize("weight_decay", [None, 0, 0.0])
def test_no_weight_decay_no_regulariser(weight_decay):
    assert models.build("lenet", 10, (32, 32, 3), weight_decay=weight_decay).losses == []


@pytest.mark.parametrize("weight_decay", [-1e-4, float("nan"), "1e-4", True])
def test_bad_weight_decay(weight_decay):
    with pytest.raises(ValueError, match="Invalid value for argument `weight_decay`"):
        models.build("mlp", 3, (2,), weight_decay=weight_decay)
