import keras
import numpy as np
import pytest

from keras_ils.comparison import networks
from keras_ils.comparison.engine import stacked_mlps


def _keras_mlp(weights, row, **model_args):
    model = networks.mlp(3, (2,), **model_args)
    model.set_weights([np.asarray(w[row]) for pair in weights for w in pair])
    return model


class TestInitialWeights:
    def test_glorot_uniform_statistics_and_zero_biases(self):
        weights = stacked_mlps.initial_weights(range(200), 2, 3)
        assert [k.shape[1:] for k, _ in weights] == [(2, 64)] + [(64, 64)] * 4 + [(64, 3)]
        for kernel, bias in weights:
            fan_in, fan_out = kernel.shape[1:]
            limit = np.sqrt(6 / (fan_in + fan_out))
            assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.95 * limit
            np.testing.assert_allclose(kernel.var(), 2 / (fan_in + fan_out), rtol=0.05)  # Glorot's variance
            assert not bias.any()

    def test_same_as_keras_initialiser_in_distribution(self):
        ours = stacked_mlps.initial_weights(range(50), 64, 64, hidden_layers=0)[0][0]
        theirs = np.stack([keras.initializers.GlorotUniform(seed=s)((64, 64)) for s in range(50)])
        np.testing.assert_allclose(np.quantile(ours, [0.1, 0.5, 0.9]), np.quantile(theirs, [0.1, 0.5, 0.9]), atol=0.01)

    def test_pytorch_scheme_is_torch_linear_defaults(self):
        for kernel, bias in stacked_mlps.initial_weights(range(200), 2, 3, scheme="pytorch"):
            limit = 1 / np.sqrt(kernel.shape[1])  # 1 / sqrt(fan_in), for kernels and biases alike
            for w in (kernel, bias):
                assert np.abs(w).max() <= limit and np.abs(w).max() > 0.9 * limit
            np.testing.assert_allclose(kernel.var(), limit**2 / 3, rtol=0.05)
        with pytest.raises(ValueError, match="Invalid value for argument `scheme`"):
            stacked_mlps.initial_weights([0], 2, 3, scheme="he")

    def test_a_seed_fixes_a_model_whatever_its_neighbours(self):
        a = stacked_mlps.initial_weights([4, 5], 2, 3)
        b = stacked_mlps.initial_weights([5], 2, 3)
        np.testing.assert_array_equal(a[2][0][1], b[2][0][0])
        repeated = stacked_mlps.initial_weights([5, 4, 5], 2, 3, scheme="pytorch")  # a seed drawn once, rows shared
        alone = stacked_mlps.initial_weights([5], 2, 3, scheme="pytorch")
        for (kernel, bias), (kernel_alone, bias_alone) in zip(repeated, alone, strict=True):
            for row in (0, 2):
                np.testing.assert_array_equal(kernel[row], kernel_alone[0])
                np.testing.assert_array_equal(bias[row], bias_alone[0])


def test_mlp_logits_match_keras_predict():
    weights = stacked_mlps.initial_weights([0, 1], 2, 3)
    weights = [(k, np.full_like(b, 0.1)) for k, b in weights]
    x = np.random.default_rng(0).normal(size=(7, 2)).astype(np.float32)
    logits = stacked_mlps.mlp_logits(weights, x, batch_size=3)
    for row in range(2):
        np.testing.assert_allclose(logits[row], _keras_mlp(weights, row).predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    per_model = stacked_mlps.mlp_logits(weights, np.stack([x, x[::-1]]))
    # float32 sums in another batch layout differ by ~1e-7; another model's logits would differ by ~0.1
    np.testing.assert_allclose(per_model[1], logits[1][::-1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Invalid value for argument `batch_size`"):
        stacked_mlps.mlp_logits(weights, x, batch_size=0)


def test_epoch_order_is_a_seeded_permutation():
    assert sorted(stacked_mlps.epoch_order(1, 0, 150)) == list(range(150))
    np.testing.assert_array_equal(stacked_mlps.epoch_order(1, 2, 150), stacked_mlps.epoch_order(1, 2, 150))
    assert not np.array_equal(stacked_mlps.epoch_order(1, 2, 150), stacked_mlps.epoch_order(1, 3, 150))
