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


def test_weight_decay_is_the_models_not_the_optimizers():
    # the recipe's weight decay is coupled L2 on the kernels, built into the model (tests/experiments/test_models.py)
    for recipe in (training.recipe_for("resnet20"), training.Recipe(optimizer="sgd", weight_decay=1e-2)):
        assert recipe.weight_decay and recipe.build_optimizer().weight_decay is None
