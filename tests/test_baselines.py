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

    @pytest.mark.tensorflow_only
    def test_gradient_is_reeds_cross_entropy_plus_entropy(self, rng):
        labels, z = rng.integers(0, 3, 8), rng.normal(size=(8, 3)).astype("float32")
        logits = tf.Variable(z)
        with tf.GradientTape() as tape:
            value = BootstrapSoftLoss(beta=0.8, reduction="sum")(labels, logits)
        # d/dz [beta * CE(y, p) + (1 - beta) * H(p)], written out: beta (p - y) - (1 - beta) p (log p - sum p log p)
        p = reference.softmax(z)
        entropy_grad = -p * (np.log(p) - (p * np.log(p)).sum(1, keepdims=True))
        want = 0.8 * (p - np.eye(3)[labels]) + 0.2 * entropy_grad
        np.testing.assert_allclose(tape.gradient(value, logits), want, rtol=1e-4, atol=1e-6)

    @pytest.mark.tensorflow_only
    def test_without_back_propagation_the_gradient_is_scaled_cross_entropy(self, rng):
        labels, z = rng.integers(0, 3, 8), rng.normal(size=(8, 3)).astype("float32")
        logits = tf.Variable(z)
        with tf.GradientTape() as tape:
            value = BootstrapSoftLoss(beta=0.8, back_propagate_prediction=False, reduction="sum")(labels, logits)
        want = 0.8 * (reference.softmax(z) - np.eye(3)[labels])
        np.testing.assert_allclose(tape.gradient(value, logits), want, rtol=1e-4, atol=1e-6)

    def test_serialization(self, tmp_path, rng):
        loss = BootstrapSoftLoss(beta=0.9, back_propagate_prediction=False)
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


class TestBetaSmoothing:
    def test_targets_against_numpy(self, rng):
        from keras_ils.baselines import beta_smoothing_targets

        labels, logits, samples = rng.integers(0, 4, 12), rng.normal(size=(12, 4)), rng.beta(3.0, 1.0, 12)
        p_t = reference.softmax(logits)[np.arange(12), labels]
        b = np.empty(12)
        b[np.argsort(p_t)] = np.sort(samples)  # least confident gets the smallest b
        smoothed = b[:, None] * np.eye(4)[labels] + ((1 - b) / 3)[:, None] * (1 - np.eye(4)[labels])
        want = 0.6 * np.eye(4)[labels] + 0.4 * smoothed  # (1 - alpha) hard + alpha Beta-smoothed
        got = keras.ops.convert_to_numpy(beta_smoothing_targets(np.eye(4)[labels], logits, samples, alpha=0.4))
        np.testing.assert_allclose(got, want, rtol=1e-5)
        np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-6)

    def test_loss_is_cross_entropy_against_the_seeded_draws(self, rng):
        from keras_ils.baselines import BetaSmoothingLoss, beta_smoothing_targets

        labels, logits = rng.integers(0, 3, 10), rng.normal(size=(10, 3)).astype("float32")
        got = BetaSmoothingLoss(alpha=0.4, a=2.0, seed=7, reduction=None)(labels, logits)
        samples = keras.random.uniform((10,), seed=keras.random.SeedGenerator(7)) ** 0.5  # Beta(2, 1) draws
        want = reference.cross_entropy(
            keras.ops.convert_to_numpy(beta_smoothing_targets(np.eye(3)[labels], logits, samples, 0.4)), logits
        )
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-5)

    @pytest.mark.parametrize("epsilon, k", [(0.1, 10), (0.05, 3), (0.2, 100)])
    def test_shape_matches_the_ls_smoothing_mass(self, epsilon, k):
        from keras_ils.baselines import beta_shape_for_epsilon

        a = beta_shape_for_epsilon(epsilon, k, alpha=0.4)
        draws = np.random.default_rng(0).beta(a, 1.0, 400_000)
        # expected smoothing mass alpha * (1 - b) equals LS's epsilon * (K - 1) / K
        assert np.mean(0.4 * (1 - draws)) == pytest.approx(epsilon * (k - 1) / k, abs=2e-3)

    def test_draws_follow_beta_a_1(self, rng):
        from scipy import stats

        from keras_ils.baselines import BetaSmoothingLoss

        # With alpha = 1 and K = 2 each example's loss is -(b log p0 + (1 - b) log p1): solve it for b.
        logits = rng.normal(size=(20000, 2)).astype("float32")
        per_example = BetaSmoothingLoss(alpha=1.0, a=3.0, seed=3, reduction=None)(np.zeros(20000, "int32"), logits)
        log_p = np.log(reference.softmax(logits))
        b = (keras.ops.convert_to_numpy(per_example) + log_p[:, 1]) / (log_p[:, 1] - log_p[:, 0])
        assert stats.kstest(b, stats.beta(3.0, 1.0).cdf).pvalue > 0.01
        # and the larger draws went to the more confident examples
        assert stats.spearmanr(b, log_p[:, 0]).statistic > 0.99

    def test_trains_and_serialises(self, tmp_path, rng):
        from keras_ils.baselines import BetaSmoothingLoss

        loss = BetaSmoothingLoss(alpha=0.4, a=3.0, seed=1)
        assert BetaSmoothingLoss.from_config(loss.get_config()).get_config() == loss.get_config()
        x, y = rng.normal(size=(32, 3)).astype("float32"), rng.integers(0, 3, 32)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss=loss, jit_compile=True)
        history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        model.save(tmp_path / "m.keras")
        assert keras.saving.load_model(tmp_path / "m.keras").loss.get_config() == loss.get_config()

    def test_bad_arguments(self):
        from keras_ils.baselines import BetaSmoothingLoss, beta_shape_for_epsilon

        with pytest.raises(ValueError, match="Invalid value for argument `alpha`"):
            BetaSmoothingLoss(alpha=1.5)
        with pytest.raises(ValueError, match="Invalid value for argument `a`"):
            BetaSmoothingLoss(a=0)
        with pytest.raises(ValueError, match="No Beta"):
            beta_shape_for_epsilon(0.5, 10, alpha=0.4)
