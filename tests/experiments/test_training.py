import numpy as np

from keras_ils.experiments import training


def test_paper_recipes():
    mlp = training.recipe_for("mlp", "synthetic")
    assert (mlp.optimizer, mlp.learning_rate, mlp.epochs, mlp.patience, mlp.augment) == ("adam", 1e-2, 500, 10, False)
    resnet = training.recipe_for("resnet110", "cifar10")
    assert (resnet.optimizer, resnet.learning_rate, resnet.momentum, resnet.weight_decay) == ("sgd", 0.1, 0.9, 1e-4)
    assert (resnet.batch_size, resnet.epochs, resnet.augment) == (128, 200, True)
    assert not training.recipe_for("resnet20", "svhn_cropped").augment
    # step decay x0.1 at epochs 80 and 150 of 200, as the paper's ResNet schedule
    rates = [resnet.learning_rate_at(e) for e in (0, 79, 80, 149, 150, 199)]
    np.testing.assert_allclose(rates, [0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_overrides():
    recipe = training.recipe_for("mlp", epochs=7, batch_size=None)
    assert recipe.epochs == 7 and recipe.batch_size == 32


def test_augmentation_keeps_shape_and_content():
    import tensorflow as tf

    image = tf.reshape(tf.range(32 * 32 * 3, dtype=tf.float32), (32, 32, 3))
    out, label = training.augment_cifar(image, 3)
    assert out.shape == (32, 32, 3) and label == 3
    original = set(np.asarray(image).ravel().tolist()) | {0.0}
    assert set(np.asarray(out).ravel().tolist()) <= original  # only crops, flips and zero padding


def test_weight_decay_is_coupled_l2_on_kernels_like_pytorch_sgd():
    import keras
    import tensorflow as tf

    model = keras.Sequential(
        [keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    recipe = training.Recipe(optimizer="sgd", weight_decay=1e-2)
    assert recipe.build_optimizer().weight_decay is None
    training.apply_weight_decay(model, recipe.weight_decay)
    kernels = [layer.kernel for layer in model.layers if hasattr(layer, "kernel")]
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses)
    np.testing.assert_allclose(float(penalty), 0.5e-2 * sum(float((k.numpy() ** 2).sum()) for k in kernels), rtol=1e-5)
    for kernel, grad in zip(kernels, tape.gradient(penalty, kernels), strict=True):
        np.testing.assert_allclose(grad, 1e-2 * kernel.numpy(), rtol=1e-5)  # PyTorch adds weight_decay * W
