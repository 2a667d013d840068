"""One `fit` that trains a Keras model by a `Recipe` (`keras_ils.comparison.networks`), with Keras callbacks.

Random crop and flip augment CIFAR only (`augment_cifar`, when the recipe
says `augment`).

The best validation epoch (lowest hard-label cross-entropy, `monitor`) is
always restored. Weight decay (`Recipe.weight_decay`) is the model's, not the
optimizer's: coupled L2 on the kernels, as PyTorch's SGD applies it, put there
by `networks.build(..., weight_decay=recipe.weight_decay)`; it never enters the
monitored `val_nll`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_ils.comparison.networks import Recipe


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
    callbacks=(),
):
    """Trains a compiled `model` by `recipe`; returns the Keras `History`.

    `recipe.weight_decay` is not applied here: build the model with it
    (`networks.build(name, num_classes, input_shape, weight_decay=recipe.weight_decay)`).
    The epoch with the lowest `monitor` is restored. Monitor a hard-label
    cross-entropy: `val_loss` of `ILSLoss` on sparse labels is one, except for
    `method="ls"` (label-smoothed) and the bootstrap baseline; compiling with
    `keras_ils.metrics.NegativeLogLikelihood(from_logits=True)` and monitoring
    `"val_nll"` is right for every loss. `callbacks` are added to the recipe's.
    """
    callbacks = [
        *callbacks,
        keras.callbacks.EarlyStopping(
            monitor=monitor,
            patience=recipe.patience if recipe.patience is not None else recipe.epochs,
            restore_best_weights=True,
        ),
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


__all__ = ["augment_cifar", "evaluation_pipeline", "fit", "training_pipeline"]
