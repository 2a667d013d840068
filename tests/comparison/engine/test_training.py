import numpy as np
import tensorflow as tf

from keras_ils.comparison import networks
from keras_ils.comparison.engine import training


def test_augmentation_keeps_shape_and_content():
    image = tf.reshape(tf.range(32 * 32 * 3, dtype=tf.float32), (32, 32, 3))
    out, label = training.augment_cifar(image, 3)
    assert out.shape == (32, 32, 3) and label == 3
    original = set(np.asarray(image).ravel().tolist()) | {0.0}
    assert set(np.asarray(out).ravel().tolist()) <= original  # only crops, flips and zero padding


def test_training_pipeline_batches_and_augments_by_the_recipe():
    x = np.arange(5 * 4 * 4 * 1, dtype=np.float32).reshape(5, 4, 4, 1)
    dataset = tf.data.Dataset.from_tensor_slices((x, np.arange(5)))
    plain = list(training.training_pipeline(dataset, networks.Recipe(batch_size=2), seed=0))
    assert [len(y) for _, y in plain] == [2, 2, 1]
    # shuffled, never augmented: the same images, each with its own label
    seen = {int(label): image for xs, ys in plain for image, label in zip(xs.numpy(), ys.numpy(), strict=True)}
    assert sorted(seen) == list(range(5))
    for label, image in seen.items():
        np.testing.assert_array_equal(image, x[label])
