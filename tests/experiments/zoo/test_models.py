import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils.comparison import networks
from keras_ils_experiments.zoo import models


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
    "name, input_shape",
    [
        ("mlp", (2,)),
        ("lenet", (32, 32, 3)),
        ("resnet8", (8, 8, 3)),
        ("resnet8sd", (8, 8, 3)),
        ("wrn-10-2", (8, 8, 3)),
        ("densenet10", (8, 8, 3)),
        ("alexnet", (8, 8, 3)),
    ],
)
def test_weight_decay_is_coupled_l2_on_every_kernel_like_pytorch_sgd(name, input_shape):
    model = models.build(name, 10, input_shape, weight_decay=1e-2)
    layers = [layer for layer in model.layers if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    kernels = [layer.kernel for layer in layers]
    if name == "mlp":  # the MLPs decay their biases too, as the vectorised engine and PyTorch's SGD do
        kernels += [layer.bias for layer in layers]
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


# --- Parameter counts computed by hand from each definition (PyTorch's convention: trainable weights only; Keras'
# count_params() adds the two non-trainable statistics of every batch normalisation) ---


def _trainable(model):
    return sum(int(np.prod(weight.shape)) for weight in model.trainable_weights)


def _conv(kernel, cin, cout, bias=False):
    height, width = (kernel, kernel) if isinstance(kernel, int) else kernel
    return height * width * cin * cout + (cout if bias else 0)


def _bn(channels):
    return 2 * channels  # gamma and beta


def _dense(cin, cout):
    return cin * cout + cout


def _cifar_resnet(n, classes, projection=False):
    """He et al.'s CIFAR ResNet 6n+2: option A shortcuts have no parameters, option B a 1x1 conv + BN."""
    total, cin = _conv(3, 3, 16) + _bn(16), 16
    for width in (16, 32, 64):
        for _ in range(n):
            total += _conv(3, cin, width) + _bn(width) + _conv(3, width, width) + _bn(width)
            if projection and cin != width:
                total += _conv(1, cin, width) + _bn(width)
            cin = width
    return total + _dense(64, classes)


def _densenet_bc(depth, classes, k=12):
    """DenseNet-BC: 2k stem channels, (depth - 4) / 6 bottleneck layers per block, compression 0.5."""
    total, channels = _conv(3, 3, 2 * k), 2 * k
    for block in range(3):
        for _ in range((depth - 4) // 6):
            total += _bn(channels) + _conv(1, channels, 4 * k) + _bn(4 * k) + _conv(3, 4 * k, k)
            channels += k
        if block < 2:
            total += _bn(channels) + _conv(1, channels, channels // 2)
            channels //= 2
    return total + _bn(channels) + _dense(channels, classes)


def _four_stage_resnet(blocks, bottleneck, classes):
    """kuangliu/pytorch-cifar ResNet-18/50: 3x3 stem of 64, stages of 64..512 planes, 1x1 conv + BN projections."""
    total, cin = _conv(3, 3, 64) + _bn(64), 64
    for planes, count in zip((64, 128, 256, 512), blocks, strict=True):
        for _ in range(count):
            if bottleneck:
                out = 4 * planes
                total += _conv(1, cin, planes) + _bn(planes) + _conv(3, planes, planes) + _bn(planes)
                total += _conv(1, planes, out) + _bn(out)
            else:
                out = planes
                total += _conv(3, cin, planes) + _bn(planes) + _conv(3, planes, planes) + _bn(planes)
            if cin != out:  # every stride-2 block changes the width too
                total += _conv(1, cin, out) + _bn(out)
            cin = out
    return total + _dense(cin, classes)


def _wide_resnet(depth, width, classes):
    """Zagoruyko & Komodakis: pre-activation blocks, 1x1 conv shortcut where the width changes, final BN."""
    total, cin = _conv(3, 3, 16), 16
    for filters in (16 * width, 32 * width, 64 * width):
        for _ in range((depth - 4) // 6):
            total += _bn(cin) + _conv(3, cin, filters) + _bn(filters) + _conv(3, filters, filters)
            if cin != filters:
                total += _conv(1, cin, filters)
            cin = filters
    return total + _bn(cin) + _dense(cin, classes)


def _alexnet(classes, channels=3):
    # the authors' shallownet.py: conv(bias)+BN x3 (32, 64, 128), fc 4*4*128 -> 128 + BN1d, fc 128 -> K
    convs = _conv(3, channels, 32, True) + _conv(3, 32, 64, True) + _conv(3, 64, 128, True) + _bn(32 + 64 + 128)
    return convs + _dense(4 * 4 * 128, 128) + _bn(128) + _dense(128, classes)


def _inceptionv4(classes):
    """weiaicunzai/pytorch-cifar100 inceptionv4.py: every convolution is conv (no bias) + BN."""
    a = [(1, 384, 64), (3, 64, 96), (3, 96, 96), (1, 384, 64), (3, 64, 96), (1, 384, 96), (1, 384, 96)]
    b = [(1, 1024, 384), (1, 1024, 192), ((1, 7), 192, 224), ((7, 1), 224, 256)]
    b += [(1, 1024, 192), ((1, 7), 192, 192), ((7, 1), 192, 224), ((1, 7), 224, 224), ((7, 1), 224, 256)]
    b += [(1, 1024, 128)]
    c = [(1, 1536, 384), ((1, 3), 384, 448), ((3, 1), 448, 512), ((1, 3), 512, 256), ((3, 1), 512, 256)]
    c += [(1, 1536, 384), ((3, 1), 384, 256), ((1, 3), 384, 256), (1, 1536, 256), (1, 1536, 256)]
    convs = [(3, 3, 32), (3, 32, 32), (3, 32, 64), (3, 64, 96)]  # stem
    convs += [(1, 160, 64), ((7, 1), 64, 64), ((1, 7), 64, 64), (3, 64, 96), (1, 160, 64), (3, 64, 96), (3, 192, 192)]
    convs += 4 * a
    convs += [(1, 384, 192), (3, 192, 224), (3, 224, 256), (3, 384, 384)]  # reduction A (k, l, m, n)
    convs += 7 * b
    convs += [(1, 1024, 192), (3, 192, 192), (1, 1024, 256), ((1, 7), 256, 256), ((7, 1), 256, 320), (3, 320, 320)]
    convs += 3 * c
    return sum(_conv(kernel, cin, cout) + _bn(cout) for kernel, cin, cout in convs) + _dense(1536, classes)


def _one_step_trains(model, input_shape=(32, 32, 3), classes=10):
    """One SGD step on two images: finite loss, every trainable weight of a kernel moves."""
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        run_eagerly=True,  # one step: tracing the graph would cost far more than the step
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, *input_shape)).astype("float32")
    kernels = [layer.kernel for layer in model.layers if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    before = [kernel.numpy().copy() for kernel in kernels]
    loss = model.train_on_batch(x, np.array([0, classes - 1]))
    assert np.isfinite(loss)
    assert model.predict(x, verbose=0).shape == (2, classes)
    assert all(not np.array_equal(old, kernel.numpy()) for old, kernel in zip(before, kernels, strict=True))


@pytest.mark.parametrize(
    "name, expected, published",
    [
        ("resnet20", _cifar_resnet(3, 10), 0.27e6),  # He et al. (2016), Table 6: 0.27M
        pytest.param("resnet20b", _cifar_resnet(3, 10, projection=True), None, marks=pytest.mark.slow),
        # He et al. (2016), Table 6: 1.7M; its training step (14 s eagerly on 2 cores) is slow, its count is not
        pytest.param("resnet110", _cifar_resnet(18, 10), 1.7e6, marks=pytest.mark.slow),
        pytest.param("densenet40", _densenet_bc(40, 10), None, marks=pytest.mark.slow),
        ("alexnet", _alexnet(10), None),
    ],
)
def test_parameter_count_and_one_training_step(name, expected, published):
    model = models.build(name, 10, (32, 32, 3), weight_decay=1e-4)
    assert _trainable(model) == expected
    if published:
        digits = 2 if published < 1e6 else 1
        assert round(expected / 1e6, digits) == published / 1e6
    _one_step_trains(model)


@pytest.mark.parametrize(
    "name, expected, published",
    [
        # Huang et al. (2017), Table 2: DenseNet-BC k=12, 0.8M
        pytest.param("densenet100", _densenet_bc(100, 10), 0.8e6, marks=pytest.mark.slow),
        ("resnet18", _four_stage_resnet((2, 2, 2, 2), False, 10), 11.2e6),  # kuangliu/pytorch-cifar: 11.2M
    ],
)
def test_parameter_count_against_the_published_figure(name, expected, published):
    assert _trainable(models.build(name, 10, (32, 32, 3))) == expected
    assert round(expected / 1e5) == published / 1e5


HEAVY_NETWORKS = [
    ("resnet18", 10, _four_stage_resnet((2, 2, 2, 2), False, 10), 11.2e6),
    ("resnet50", 10, _four_stage_resnet((3, 4, 6, 3), True, 10), 23.5e6),  # kuangliu/pytorch-cifar: 23.5M
    ("resnet110", 10, _cifar_resnet(18, 10), 1.7e6),  # He et al. (2016), Table 6: 1.7M
    ("resnet110sd", 10, _cifar_resnet(18, 10), None),  # stochastic depth adds no parameter
    ("resnet152sd", 10, _cifar_resnet(25, 10), None),  # n = 25
    ("wrn-28-10", 10, _wide_resnet(28, 10, 10), 36.5e6),  # Zagoruyko & Komodakis (2016), Table 1: 36.5M
    ("wrn-34-10", 10, _wide_resnet(34, 10, 10), None),
    ("inceptionv4", 100, _inceptionv4(100), 41.3e6),  # weiaicunzai/pytorch-cifar100 README (CIFAR-100): 41.3M
]


@pytest.mark.parametrize(
    "name, classes, expected, published",
    # building one is 5-20 s on 2 cores: the default run builds the smallest, `-m slow` all of them
    [HEAVY_NETWORKS[0]] + [pytest.param(*network, marks=pytest.mark.slow) for network in HEAVY_NETWORKS[1:]],
)
def test_heavy_networks_parameter_count(name, classes, expected, published):
    model = models.build(name, classes, (32, 32, 3), weight_decay=1e-4)  # building is seconds; training is not
    assert _trainable(model) == expected
    if published:
        assert round(expected / 1e5) == published / 1e5


@pytest.mark.slow
@pytest.mark.parametrize("name, classes", [(name, classes) for name, classes, _, _ in HEAVY_NETWORKS])
def test_heavy_networks_one_training_step(name, classes):
    _one_step_trains(models.build(name, classes, (32, 32, 3), weight_decay=1e-4), classes=classes)


def test_alexnet_takes_fashion_mnist_images():
    # 28x28x1: three 2x2 pools leave 3x3x128 for the first dense layer
    model = models.build("alexnet", 10, (28, 28, 1))
    assert _trainable(model) == _alexnet(10, channels=1) - _dense(4 * 4 * 128, 128) + _dense(3 * 3 * 128, 128)


def test_option_a_shortcuts_have_no_parameters_option_b_projects():
    def one_by_one(model):
        return [
            layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D) and layer.kernel_size == (1, 1)
        ]

    option_a, option_b = models.build("resnet20", 10, (32, 32, 3)), models.build("resnet20b", 10, (32, 32, 3))
    assert not one_by_one(option_a) and len(one_by_one(option_b)) == 2  # the two stage transitions
    assert sum(isinstance(layer, models.ZeroPadShortcut) for layer in option_a.layers) == 2
    assert option_a.name == "resnet20" and option_b.name == "resnet20b"


def test_model_names_reach_their_builders():
    assert {"densenet40", "resnet110sd", "resnet152sd", "wrn-34-10", "alexnet", "resnet18", "resnet50"} <= set(
        models.MODEL_NAMES
    )
    assert {"inceptionv4", "resnet20", "resnet32", "resnet56", "resnet110"} <= set(models.MODEL_NAMES)
    sd = models.build("resnet8sd", 10, (8, 8, 3))
    assert sd.name == "resnet8sd" and sum(isinstance(layer, models.StochasticDepth) for layer in sd.layers) == 3


@pytest.mark.parametrize("name", ["resnet21sd", "resnet8x", "densenet41", "densenet40b", "wrn-34-10-1", "alexnet2"])
def test_unknown_or_invalid_variant(name):
    with pytest.raises(ValueError, match="Invalid value for argument"):
        models.build(name, 10, (32, 32, 3))


@pytest.mark.parametrize(
    "builder, kwargs, argument",
    [
        (models.resnet, dict(depth=20, num_classes=10, shortcut="C"), "shortcut"),
        (models.stochastic_depth_resnet, dict(depth=20, num_classes=10, final_survival=0.0), "final_survival"),
        (models.stochastic_depth_resnet, dict(depth=22, num_classes=10), "depth"),
        (models.densenet, dict(depth=40, num_classes=10, compression=1.5), "compression"),
        (models.densenet, dict(depth=40, num_classes=10, growth_rate=0), "growth_rate"),
        (models.alexnet, dict(num_classes=10, dropout=1.0), "dropout"),
    ],
)
def test_bad_builder_arguments(builder, kwargs, argument):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
        builder(**kwargs)


def test_stochastic_depth_survival_decays_linearly_to_one_half():
    model = models.stochastic_depth_resnet(20, 10)
    survivals = [layer.survival_probability for layer in model.layers if isinstance(layer, models.StochasticDepth)]
    # Huang et al. (2016), Eq. 4: p_l = 1 - l / L (1 - p_L), L = 9 blocks, p_L = 0.5
    np.testing.assert_allclose(survivals, [1 - 0.5 * block / 9 for block in range(1, 10)])
    assert survivals[-1] == 0.5


class TestStochasticDepth:
    def test_identity_at_inference(self):
        layer = models.StochasticDepth(0.5, seed=0)
        x = np.random.default_rng(0).normal(size=(4, 3, 3, 2)).astype("float32")
        for training in (None, False):
            np.testing.assert_array_equal(layer(x, training=training), x)

    def test_drops_whole_branches_with_the_survival_frequency(self):
        survival, draws = 0.7, 2000
        layer = models.StochasticDepth(survival, seed=1234)
        x = np.ones((4, 5), "float32")
        call = tf.function(lambda: layer(x, training=True))  # the seed generator's state advances in the graph
        outputs = np.stack([call().numpy() for _ in range(draws)])
        per_call = outputs.reshape(draws, -1)
        assert np.all(per_call == per_call[:, :1])  # the whole batch's branch is kept or dropped at once
        np.testing.assert_allclose(np.unique(per_call), [0.0, 1 / survival], rtol=1e-6)  # inverted scaling
        kept = np.mean(per_call[:, 0] > 0)
        assert abs(kept - survival) < 4 * np.sqrt(survival * (1 - survival) / draws)  # binomial, 4 sigma
        assert abs(np.mean(per_call) - 1.0) < 0.05  # the expectation is the inference output

    def test_config_round_trip(self):
        layer = models.StochasticDepth(0.8, seed=3, name="sd")
        config = layer.get_config()
        assert models.StochasticDepth.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert isinstance(restored, models.StochasticDepth) and restored.survival_probability == 0.8

    @pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.5, float("nan"), "0.5", True])
    def test_bad_survival_probability(self, value):
        with pytest.raises(ValueError, match="Invalid value for argument `survival_probability`"):
            models.StochasticDepth(value)

    @pytest.mark.slow  # a resnet's graph-mode training and .keras round trip (~10 s); test_config_round_trip is fast
    def test_resnet_trains_in_graph_mode_then_saves_and_loads_predicting_the_same(self, tmp_path):
        keras.utils.set_random_seed(0)
        model = models.build("resnet8sd", 3, (8, 8, 3), weight_decay=1e-4)
        model.compile(
            optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False
        )
        x = np.random.default_rng(0).normal(size=(6, 8, 8, 3)).astype("float32")
        model.fit(x, np.array([0, 1, 2, 0, 1, 2]), batch_size=3, epochs=1, verbose=0)
        path = tmp_path / "resnet8sd.keras"
        model.save(path)
        loaded = keras.models.load_model(path)  # no custom_objects: the layers are registered
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
        survivals = [layer.survival_probability for layer in loaded.layers if isinstance(layer, models.StochasticDepth)]
        np.testing.assert_allclose(survivals, [1 - 0.5 / 3, 1 - 1 / 3, 0.5])


class TestZeroPadShortcut:
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype("float32")

    def test_subsample_is_he_et_al_option_a(self):
        expected = np.zeros((2, 3, 3, 8), "float32")
        expected[..., 2:5] = self.x[:, ::2, ::2, :]  # 5 zero channels: 2 before, 3 after
        np.testing.assert_array_equal(models.ZeroPadShortcut(8)(self.x), expected)

    def test_average_is_the_stochastic_depth_codes(self):
        expected = np.zeros((2, 3, 3, 6), "float32")
        expected[..., 1:4] = self.x.reshape(2, 3, 2, 3, 2, 3).mean(axis=(2, 4))
        np.testing.assert_allclose(models.ZeroPadShortcut(6, pooling="average")(self.x), expected, rtol=1e-6)

    def test_config_round_trip(self):
        layer = models.ZeroPadShortcut(8, strides=2, pooling="average")
        config = layer.get_config()
        assert models.ZeroPadShortcut.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert (restored.filters, restored.strides, restored.pooling) == (8, 2, "average")

    @pytest.mark.parametrize(
        "kwargs, argument", [(dict(filters=0), "filters"), (dict(filters=4, pooling="max"), "pooling")]
    )
    def test_bad_arguments(self, kwargs, argument):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
            models.ZeroPadShortcut(**kwargs)

    def test_fewer_filters_than_input_channels(self):
        with pytest.raises(ValueError, match="Invalid value for argument `filters`"):
            models.ZeroPadShortcut(2)(self.x)


def test_mlp_by_depth_and_width():
    model = models.build("mlp-2-16", 4, (7,))
    assert networks.mlp_shape("mlp-2-16") == (2, 16) and networks.mlp_shape("mlp-0-16") is None
    assert model.count_params() == (7 * 16 + 16) + (16 * 16 + 16) + (16 * 4 + 4)
