import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import ILSLoss, teacher_targets
from keras_ils.baselines import BootstrapSoftLoss, bootstrap_targets, class_similarity_logits

import reference


def _numpy_cls_targets(x, y, labels, k, epsilon):
    """Liu & JaJa's class-similarity LS with Euclidean class-mean distances, written out directly."""
    means = np.stack([x[y == c].mean(0) for c in range(k)])
    d = np.linalg.norm(means[:, None] - means[None], axis=-1)
    scale = d[~np.eye(k, dtype=bool)].mean()
    out = np.zeros((len(labels), k))
    for i, t in enumerate(labels):
        w = np.array([np.exp(-d[t, j] / scale) if j != t else 0.0 for j in range(k)])
        out[i] = epsilon * w / w.sum()
        out[i, t] = 1 - epsilon
    return out


class TestClassSimilarity:
    def test_targets_against_numpy(self, rng):
        x = rng.normal(size=(200, 5)) + 3 * np.eye(5)[rng.integers(0, 5, 200)]
        y = rng.integers(0, 4, 200)
        rows = class_similarity_logits((x, y), 4)
        labels = rng.integers(0, 4, 10)
        loss_targets = ILSLoss(method="ils2", epsilon=0.1)
        student = rng.normal(size=(10, 4))
        got = keras.ops.convert_to_numpy(
            ILSLoss(method="ils2", epsilon=0.1, reduction=None)(teacher_targets(labels, rows[labels]), student)
        )
        want = reference.cross_entropy(_numpy_cls_targets(x, y, labels, 4, 0.1), student)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert loss_targets.method == "ils2"

    def test_dataset_input_equals_arrays(self, rng):
        x = rng.normal(size=(100, 2, 3)).astype("float32")
        y = rng.integers(0, 3, 100)
        from_arrays = class_similarity_logits((x, y), 3)
        from_ds = class_similarity_logits(tf.data.Dataset.from_tensor_slices((x, y)), 3)
        np.testing.assert_allclose(from_ds, from_arrays, rtol=1e-5)

    def test_bad_input(self, rng):
        x, y = rng.normal(size=(10, 2)), np.array([0] * 5 + [1] * 5)
        with pytest.raises(ValueError, match="classes \\[2\\] have none"):
            class_similarity_logits((x, y), 3)
        with pytest.raises(ValueError, match="Invalid value for argument `temperature`"):
            class_similarity_logits((x, y), 2, temperature=0)
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            class_similarity_logits((x, y + 5), 3)


class TestBootstrapSoft:
    def test_targets_and_loss_against_numpy(self, rng):
        labels, logits = rng.integers(0, 3, 8), rng.normal(size=(8, 3))
        want_targets = 0.95 * np.eye(3)[labels] + 0.05 * reference.softmax(logits)
        got = keras.ops.convert_to_numpy(bootstrap_targets(np.eye(3)[labels], logits, 0.95))
        np.testing.assert_allclose(got, want_targets, rtol=1e-5)
        loss = BootstrapSoftLoss(reduction=None)
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(loss(labels, logits)), reference.cross_entropy(want_targets, logits), rtol=1e-5
        )

    def test_prediction_is_not_back_propagated(self, rng):
        labels, logits = rng.integers(0, 3, 8), tf.Variable(rng.normal(size=(8, 3)).astype("float32"))
        with tf.GradientTape() as tape:
            value = BootstrapSoftLoss(beta=0.8)(labels, logits)
        fixed = tf.constant(0.8 * np.eye(3)[labels] + 0.2 * reference.softmax(logits.numpy()), tf.float32)
        with tf.GradientTape() as tape2:
            plain = keras.losses.CategoricalCrossentropy(from_logits=True)(fixed, logits)
        np.testing.assert_allclose(tape.gradient(value, logits), tape2.gradient(plain, logits), rtol=1e-5, atol=1e-7)

    def test_serialization(self, tmp_path, rng):
        loss = BootstrapSoftLoss(beta=0.9)
        assert BootstrapSoftLoss.from_config(loss.get_config()).get_config() == loss.get_config()
        x, y = rng.normal(size=(16, 3)).astype("float32"), rng.integers(0, 3, 16)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss=loss)
        model.fit(x, y, epochs=1, verbose=0)
        model.save(tmp_path / "m.keras")
        assert keras.saving.load_model(tmp_path / "m.keras").loss.get_config() == loss.get_config()

    @pytest.mark.parametrize("beta", [0.0, 1.5, -0.2])
    def test_bad_beta(self, beta):
        with pytest.raises(ValueError, match="Invalid value for argument `beta`"):
            BootstrapSoftLoss(beta=beta)
