import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from keras_ils import ILSLoss, TemperatureScaling, calibrate, fit_temperature, teacher_targets
from keras_ils.calibration import fit_temperatures


def _nll(t, logits, labels):
    return -log_softmax(logits / t, axis=1)[np.arange(len(labels)), labels].mean()


def _overconfident(rng, n=3000, k=5, scale=3.0):
    labels = rng.integers(0, k, n)
    calibrated = 1.5 * (rng.normal(size=(n, k)) + 1.5 * np.eye(k)[labels])
    return labels, scale * calibrated


class TestFitTemperature:
    @pytest.mark.parametrize("scale", [0.3, 1.0, 3.0, 10.0])
    def test_matches_scipy_optimum(self, rng, scale):
        labels, logits = _overconfident(rng, scale=scale)
        want = minimize_scalar(
            _nll, bounds=(0.01, 100), args=(logits, labels), method="bounded", options={"xatol": 1e-10}
        ).x
        got = fit_temperature(logits, labels)
        assert abs(got - want) / want < 1e-3
        assert _nll(got, logits, labels) <= _nll(want, logits, labels) + 1e-9

    def test_label_forms(self, rng):
        labels, logits = _overconfident(rng, n=500)
        t = fit_temperature(logits, labels)
        assert fit_temperature(logits, np.eye(5)[labels]) == pytest.approx(t, rel=1e-9)
        assert fit_temperature(logits, teacher_targets(labels, logits)) == pytest.approx(t, rel=1e-9)

    def test_separable_data_hits_the_lower_bound(self):
        logits = np.array([[5.0, 0.0], [0.0, 5.0]])
        assert fit_temperature(logits, [0, 1]) == 0.01

    @pytest.mark.parametrize(
        "logits, labels, match",
        [
            (np.zeros((4,)), [0, 1, 0, 1], "shape"),
            (np.zeros((4, 1)), [0, 0, 0, 0], "shape"),
            (np.array([[np.nan, 0.0]]), [0], "finite"),
            (np.zeros((3, 2)), [0, 1], "same length"),
            (np.zeros((2, 2)), [0, 2], "labels"),
        ],
    )
    def test_bad_input(self, logits, labels, match):
        with pytest.raises(ValueError, match=match):
            fit_temperature(logits, labels)


class TestFitTemperatures:
    def test_each_model_matches_its_scipy_optimum(self):
        rng = np.random.default_rng(1)
        labels = rng.integers(0, 3, (6, 150))
        logits = rng.normal(size=(6, 150, 3)) + 2 * np.eye(3)[labels]
        logits *= np.array([0.2, 0.5, 1.0, 2.0, 5.0, 20.0])[:, None, None]
        got = fit_temperatures(logits, labels)
        for model, (z, y) in enumerate(zip(logits, labels, strict=True)):
            want = minimize_scalar(_nll, bounds=(0.01, 100), args=(z, y), method="bounded", options={"xatol": 1e-10}).x
            assert abs(got[model] - want) / want < 1e-3
            assert _nll(got[model], z, y) <= _nll(want, z, y) + 1e-9

    def test_separated_and_reversed_models_stop_at_the_bounds(self):
        separated = np.array([[[10.0, -10.0], [-10.0, 10.0]], [[-10.0, 10.0], [10.0, -10.0]]])
        np.testing.assert_array_equal(fit_temperatures(separated, np.array([[0, 1], [0, 1]])), [0.01, 100.0])


class TestTemperatureScalingLayer:
    def test_divides_logits(self, rng):
        x = rng.normal(size=(4, 3)).astype("float32")
        np.testing.assert_allclose(ops.convert_to_numpy(TemperatureScaling(2.5)(x)), x / 2.5, rtol=1e-6)

    def test_probabilities_mode(self, rng):
        p = rng.dirichlet(np.ones(3), size=4).astype("float32")
        got = ops.convert_to_numpy(TemperatureScaling(2.0, from_logits=False)(p))
        want = np.exp(np.log(p) / 2.0)
        np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5)

    def test_trainable_temperature_learns_the_nll_optimum(self, rng):
        labels, logits = _overconfident(rng, n=2000, k=3)
        layer = TemperatureScaling(1.0)
        model = keras.Sequential([keras.Input((3,)), layer])
        model.compile(
            optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        model.fit(logits.astype("float32"), labels, epochs=300, batch_size=2000, verbose=0)
        assert float(layer.temperature.numpy()) == pytest.approx(fit_temperature(logits, labels), rel=0.02)

    def test_fixed_temperature_is_not_trained(self):
        layer = TemperatureScaling(3.0, trainable=False)
        layer.build((None, 3))
        assert layer.trainable_weights == [] and float(layer.temperature.numpy()) == 3.0

    @pytest.mark.parametrize(
        "policy, jit_compile",
        [("float32", True), ("mixed_float16", False), ("mixed_float16", True), ("mixed_bfloat16", True)],
    )
    def test_trains_under_jit_compile_and_mixed_precision(self, rng, policy, jit_compile):
        # an ILS student's trainable temperature: same outputs, losses and learned T as in float32
        labels, logits = _overconfident(rng, n=512, k=3)
        x, y = logits.astype("float32"), teacher_targets(labels, logits / 3.0)

        def train(policy, jit_compile):
            keras.mixed_precision.set_global_policy(policy)
            try:
                layer = TemperatureScaling(1.0)
                model = keras.Sequential([keras.Input((3,)), layer])
                model.compile(
                    optimizer=keras.optimizers.Adam(0.05),
                    loss=ILSLoss(method="ils", p1=0.8, p2=2.0),
                    jit_compile=jit_compile,
                )
                history = model.fit(x, y, epochs=10, batch_size=128, shuffle=False, verbose=0)
                return model, float(layer.temperature.numpy()), history.history["loss"]
            finally:
                keras.mixed_precision.set_global_policy("float32")

        _, want_t, want_loss = train("float32", False)
        model, got_t, got_loss = train(policy, jit_compile)
        compute_dtype = "float32" if policy == "float32" else policy.split("_")[1]
        rtol = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}[compute_dtype]
        assert model.layers[-1].temperature.dtype == "float32"
        assert got_t == pytest.approx(want_t, rel=rtol) and abs(got_t - 1.0) > 0.1
        np.testing.assert_allclose(got_loss, want_loss, rtol=rtol)
        outputs = model.predict(x, verbose=0)
        assert outputs.dtype == compute_dtype
        got = ops.convert_to_numpy(ops.cast(outputs, "float32"))
        np.testing.assert_allclose(got, x / got_t, rtol=2 * rtol, atol=1e-6)  # input, T and output rounded

    def test_config_and_keras_file_round_trip(self, tmp_path, rng):
        layer = TemperatureScaling(1.7, from_logits=True, name="ts")
        config = layer.get_config()
        assert TemperatureScaling.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert restored.get_config() == config
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), layer])
        x = rng.normal(size=(5, 3)).astype("float32")
        model.save(tmp_path / "m.keras")
        np.testing.assert_allclose(
            keras.saving.load_model(tmp_path / "m.keras").predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6
        )

    @pytest.mark.parametrize("temperature", [0, -1.0, "2"])
    def test_bad_temperature(self, temperature):
        with pytest.raises(ValueError, match="Invalid value for argument `temperature`"):
            TemperatureScaling(temperature)


class TestCalibrate:
    def _model(self, rng, scale=10.0):
        keras.utils.set_random_seed(0)
        x = rng.normal(size=(400, 4)).astype("float32")
        y = (x[:, 0] + 0.5 * rng.normal(size=400) > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.set_weights([scale * rng.normal(size=(4, 3)).astype("float32"), np.zeros(3, "float32")])
        return model, x, y

    def test_arrays(self, rng):
        model, x, y = self._model(rng)
        calibrated = calibrate(model, (x, y))
        logits = model.predict(x, verbose=0)
        t = fit_temperature(logits, y)
        assert float(calibrated.layers[-1].temperature.numpy()) == pytest.approx(t, rel=1e-6)
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), logits / t, rtol=1e-5)

    def test_shuffled_dataset_keeps_pairs(self, rng):
        model, x, y = self._model(rng)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(400, seed=1).batch(32)
        t = fit_temperature(model.predict(x, verbose=0), y)
        calibrated = calibrate(model, ds)
        assert float(calibrated.layers[-1].temperature.numpy()) == pytest.approx(t, rel=1e-5)

    def test_probability_model(self, rng):
        model, x, y = self._model(rng, scale=2.0)  # no probability below the log's clip
        prob_model = keras.Sequential([model, keras.layers.Softmax()])
        calibrated = calibrate(prob_model, (x, y), from_logits=False)
        t = fit_temperature(model.predict(x, verbose=0), y)
        want = ops.convert_to_numpy(ops.softmax(model.predict(x, verbose=0) / t))
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), want, rtol=1e-4, atol=1e-6)

    def test_subclassed_model(self, rng):
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(3)

            def call(self, x):
                return self.dense(x)

        _, x, y = self._model(rng)
        net = Net()
        net(x[:1])
        calibrated = calibrate(net, (x, y))
        t = float(calibrated.layers[-1].temperature.numpy())
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), net.predict(x, verbose=0) / t, rtol=1e-5)

    def test_keras_file_round_trip(self, rng, tmp_path):
        model, x, y = self._model(rng)
        calibrated = calibrate(model, (x, y))
        calibrated.save(tmp_path / "c.keras")
        loaded = keras.saving.load_model(tmp_path / "c.keras")
        np.testing.assert_allclose(loaded.predict(x, verbose=0), calibrated.predict(x, verbose=0), rtol=1e-6)

    def test_dataset_without_labels(self, rng):
        model, x, _ = self._model(rng)
        with pytest.raises(ValueError, match="without labels"):
            calibrate(model, tf.data.Dataset.from_tensor_slices(x).batch(8))
