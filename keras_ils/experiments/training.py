"""Training recipes of the paper and one `fit` that applies them with Keras callbacks.

- `mlp`: Adam 1e-2, constant rate, batch 32, up to 500 epochs, early stopping
  with patience 10 (paper §3).
- image networks: SGD 0.1 with momentum 0.9 and weight decay 1e-4, rate x0.1
  at 40 % and 75 % of the epochs, batch 128, 200 epochs, random crop + flip
  for CIFAR (paper appendix, ResNet recipe).

The best validation epoch (lowest hard-label cross-entropy, `monitor`) is
always restored. Weight decay (`Recipe.weight_decay`) is the model's, not the
optimizer's: coupled L2 on the kernels, as PyTorch's SGD applies it, put there
by `models.build(..., weight_decay=recipe.weight_decay)`; it never enters the
monitored `val_nll`.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to train one model; see the module table for the paper's values."""

    optimizer: str = "adam"
    learning_rate: float = 1e-2
    momentum: float = 0.9
    weight_decay: float | None = None
    epochs: int = 500
    batch_size: int = 32
    decay_at: tuple = ()  # fractions of `epochs` where the learning rate is multiplied by 0.1
    patience: int | None = 10  # None: no early stop, the best epoch is still restored
    augment: bool = False  # random crop (4-pixel pad) and horizontal flip, for CIFAR

    def build_optimizer(self):
        """The optimizer; weight decay is not its business (the model's kernels carry it, see `models.build`)."""
        if self.optimizer == "adam":
            return keras.optimizers.Adam(self.learning_rate)
        return keras.optimizers.SGD(self.learning_rate, momentum=self.momentum)

    def learning_rate_at(self, epoch: int) -> float:
        passed = sum(epoch >= round(fraction * self.epochs) for fraction in self.decay_at)
        return self.learning_rate * 0.1**passed


def recipe_for(model_name: str, dataset_name: str = "", **overrides) -> Recipe:
    """The paper's recipe for a model (and dataset: augmentation for CIFAR), with overrides.

    Example:

    >>> recipe_for("resnet20", "cifar10", epochs=10).learning_rate_at(8)
    0.001...
    """
    if model_name == "mlp":
        recipe = Recipe()
    else:
        recipe = Recipe(
            optimizer="sgd",
            learning_rate=0.1,
            weight_decay=1e-4,
            epochs=200,
            batch_size=128,
            decay_at=(0.4, 0.75),
            patience=None,
            augment=dataset_name.startswith("cifar"),
        )
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(recipe, **overrides)


def augment_cifar(x, y):
    """Random crop after 4-pixel zero padding, and a random horizontal flip (He et al., 2016)."""
    height, width = x.shape[0], x.shape[1]
    x = tf.image.pad_to_bounding_box(x, 4, 4, height + 8, width + 8)
    x = tf.image.random_crop(x, [height, width, x.shape[-1]])
    return tf.image.random_flip_left_right(x), y


def training_pipeline(train: tf.data.Dataset, recipe: Recipe, seed: int = 0) -> tf.data.Dataset:
    """Unbatched `(x, y)` (teacher targets attached) -> cached, shuffled, augmented, batched, prefetched."""
    dataset = train.cache().shuffle(8192, seed=seed, reshuffle_each_iteration=True)
    if recipe.augment:
        dataset = dataset.map(augment_cifar, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(recipe.batch_size).prefetch(tf.data.AUTOTUNE)


def evaluation_pipeline(dataset: tf.data.Dataset, batch_size: int = 512) -> tf.data.Dataset:
    return dataset.batch(batch_size).cache().prefetch(tf.data.AUTOTUNE)


def fit(
    model,
    train: tf.data.Dataset,
    validation: tf.data.Dataset,
    recipe: Recipe,
    *,
    monitor: str = "val_loss",
    seed: int = 0,
    verbose=0,
):
    """Trains a compiled `model` by `recipe`; returns the Keras `History`.

    `recipe.weight_decay` is not applied here: build the model with it
    (`models.build(name, num_classes, input_shape, weight_decay=recipe.weight_decay)`).
    The epoch with the lowest `monitor` is restored. Monitor a hard-label
    cross-entropy: `val_loss` of `ILSLoss` on sparse labels is one, except for
    `method="ls"` (label-smoothed) and the bootstrap baseline; compiling with
    `keras_ils.metrics.NegativeLogLikelihood(from_logits=True)` and monitoring
    `"val_nll"` is right for every loss.
    """
    callbacks = [
        keras.callbacks.EarlyStopping(
            monitor=monitor,
            patience=recipe.patience if recipe.patience is not None else recipe.epochs,
            restore_best_weights=True,
        )
    ]
    if recipe.decay_at:
        callbacks.append(keras.callbacks.LearningRateScheduler(lambda epoch, lr: recipe.learning_rate_at(epoch)))
    return model.fit(
        training_pipeline(train, recipe, seed),
        validation_data=evaluation_pipeline(validation),
        epochs=recipe.epochs,
        callbacks=callbacks,
        shuffle=False,  # the pipeline shuffles
        verbose=verbose,
    )
