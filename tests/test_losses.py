import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_ils
from keras_ils import ILSLoss, teacher_targets

import reference

METHODS = ["none", "ls", "ils1", "ils2", "ils"]
HP = dict(epsilon=0.15, p1=0.85, p2=1.5, temperature=2.0)


def _np(x):
    return ops.convert_to_numpy(x)


@pytest.fixture
def batch(rng):
    n, k = 32, 5
    labels = rng.integers(0, k, n)
    return labels, 3 * rng.normal(size=(n, k)), rng.normal(size=(n, k))


@pytest.mark.parametrize("method", METHODS)
def test_teacher_targets_give_cross_entropy_against_reference_targets(batch, method):
    labels, teacher, student = batch
    loss = ILSLoss(method=method, **HP, reduction=None)
    got = _np(loss(teacher_targets(labels, teacher), student))
    want = reference.cross_entropy(reference.ils_targets(labels, teacher, method, **HP), student)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_sparse_labels_with_ls_match_keras_label_smoothing(batch, eps):
    labels, _, student = batch
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps)
    want = _np(keras_loss(np.eye(5)[labels], student))
    for y in (labels, labels[:, None]):
        np.testing.assert_allclose(_np(ILSLoss(method="ls", epsilon=eps)(y, student)), want, rtol=1e-6)


@pytest.mark.parametrize("method", ["none", "ils1", "ils2", "ils"])
def test_sparse_labels_give_plain_cross_entropy(batch, method):
    labels, _, student = batch
    want = _np(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, student))
    np.testing.assert_allclose(_np(ILSLoss(method=method)(labels, student)), want, rtol=1e-6)


@pytest.mark.parametrize("method", ["none", "ils1", "ils2", "ils"])
def test_soft_targets_are_used_as_given(batch, rng, method):
    _, _, student = batch
    soft = rng.dirichlet(np.ones(5), size=len(student))
    want = _np(keras.losses.CategoricalCrossentropy(from_logits=True)(soft, student))
    np.testing.assert_allclose(_np(ILSLoss(method=method)(soft, student)), want, rtol=1e-6)


class TestLabelSmoothingAsKeras:
    """`method="ls"` on one-hot and soft targets is Keras' `CategoricalCrossentropy(label_smoothing=eps)`."""

    @pytest.mark.parametrize("from_logits", [True, False])
    @pytest.mark.parametrize("targets", ["one_hot", "soft"])
    @pytest.mark.parametrize("k", [2, 3, 10])
    @pytest.mark.parametrize("eps", [0.0, 0.05, 0.1, 0.3])
    def test_matches_keras(self, rng, eps, k, targets, from_logits):
        n = 24
        labels = rng.integers(0, k, n)
        y = np.eye(k)[labels] if targets == "one_hot" else rng.dirichlet(np.ones(k), size=n)
        logits = 3.0 * rng.normal(size=(n, k)).astype("float32")
        y_pred = logits if from_logits else _np(ops.softmax(logits))
        keras_loss = keras.losses.CategoricalCrossentropy(label_smoothing=eps, from_logits=from_logits, reduction=None)
        ours = ILSLoss(method="ls", epsilon=eps, from_logits=from_logits, reduction=None)
        np.testing.assert_allclose(_np(ours(y, y_pred)), _np(keras_loss(y, y_pred)), rtol=1e-5, atol=1e-6)

    def test_smoothed_targets_in_numpy(self, rng):
        soft = rng.dirichlet(np.ones(4), size=8)
        logits = rng.normal(size=(8, 4))
        want = reference.cross_entropy(soft * 0.8 + 0.2 / 4, logits)
        np.testing.assert_allclose(
            _np(ILSLoss(method="ls", epsilon=0.2, reduction=None)(soft, logits)), want, rtol=1e-5
        )

    def test_sparse_and_one_hot_labels_give_the_same_loss(self, batch):
        labels, _, student = batch
        loss = ILSLoss(method="ls", epsilon=0.15)
        np.testing.assert_allclose(_np(loss(labels, student)), _np(loss(np.eye(5)[labels], student)), rtol=1e-6)

    def test_weighted_and_in_fit(self, rng):
        x = rng.normal(size=(32, 4)).astype("float32")
        y = np.eye(3)[rng.integers(0, 3, 32)].astype("float32")
        w = rng.random(32)
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        keras_loss = keras.losses.CategoricalCrossentropy(label_smoothing=0.1, from_logits=True)
        logits = model.predict(x, verbose=0)
        np.testing.assert_allclose(
            _np(ILSLoss(method="ls")(y, logits, sample_weight=w)),
            _np(keras_loss(y, logits, sample_weight=w)),
            rtol=1e-6,
        )
        model.compile(loss=ILSLoss(method="ls"))
        np.testing.assert_allclose(model.evaluate(x, y, verbose=0), _np(keras_loss(y, logits)), rtol=1e-5)


def test_probabilities_input(batch):
    labels, teacher, student = batch
    y = teacher_targets(labels, teacher)
    from_logits = _np(ILSLoss(method="ils", **HP)(y, student))
    probs = _np(ops.softmax(student))
    np.testing.assert_allclose(_np(ILSLoss(method="ils", **HP, from_logits=False)(y, probs)), from_logits, rtol=1e-5)


class TestReductionAndWeights:
    def test_weighted(self, batch, rng):
        labels, teacher, student = batch
        y = teacher_targets(labels, teacher)
        w = rng.random(len(labels))
        per_example = reference.cross_entropy(reference.ils_targets(labels, teacher, "ils", **HP), student)
        got = _np(ILSLoss(method="ils", **HP)(y, student, sample_weight=w))
        np.testing.assert_allclose(got, (per_example * w).sum() / len(w), rtol=1e-5)

    def test_zero_weights(self, batch):
        labels, teacher, student = batch
        got = _np(ILSLoss(method="ils")(teacher_targets(labels, teacher), student, sample_weight=np.zeros(len(labels))))
        assert got == 0.0

    def test_sum(self, batch):
        labels, teacher, student = batch
        y = teacher_targets(labels, teacher)
        per_example = _np(ILSLoss(method="ils2", reduction=None)(y, student))
        assert per_example.shape == (len(labels),)
        np.testing.assert_allclose(
            _np(ILSLoss(method="ils2", reduction="sum")(y, student)), per_example.sum(), rtol=1e-6
        )


class TestPrecision:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    def test_half_precision_loss_is_close_and_finite(self, batch, dtype):
        labels, teacher, student = batch
        y = teacher_targets(labels, teacher)
        full = _np(ILSLoss(method="ils", **HP)(y, student))
        half = ILSLoss(method="ils", **HP, dtype=dtype)(y, student)
        assert keras.backend.standardize_dtype(half.dtype) == dtype
        np.testing.assert_allclose(float(_np(ops.cast(half, "float32"))), full, rtol=2e-2)

    @pytest.mark.tensorflow_only
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("method", METHODS)
    def test_half_precision_gradients_finite(self, method, dtype):
        labels = np.array([0, 1, 2])
        teacher = ops.cast([[1e4, 0, 0], [0, 1e4, -1e4], [3.0, 1.0, 0.0]], dtype)
        student = tf.Variable(ops.cast([[1e4, -1e4, 0], [0, 0, 6e4], [1.0, 2.0, 3.0]], dtype))
        with tf.GradientTape() as tape:
            value = ILSLoss(method=method, p1=0.8, p2=2.0, dtype=dtype)(teacher_targets(labels, teacher), student)
        grad = tape.gradient(value, student)
        assert np.isfinite(_np(ops.cast(value, "float32")))
        assert np.isfinite(_np(ops.cast(grad, "float32"))).all()

    @pytest.mark.tensorflow_only
    @pytest.mark.parametrize("method", METHODS)
    def test_gradients_finite_with_huge_logits(self, method):
        labels = np.array([0, 1, 2, 2])
        teacher = np.array([[1e4, 0, 0], [0, 1e4, -1e4], [-1e4, 1e4, 0], [0.0, 0.0, 0.0]])
        student = tf.Variable([[1e4, -1e4, 0], [0, 0, 1e4], [-1e4, 1e4, 0], [0.0, 1.0, 2.0]])
        with tf.GradientTape() as tape:
            value = ILSLoss(method=method, p1=0.8, p2=2.0)(teacher_targets(labels, teacher), student)
        grad = tape.gradient(value, student)
        assert np.isfinite(_np(value)) and np.isfinite(_np(grad)).all()


class TestInTraining:
    def _data(self, rng, n=64):
        x = rng.normal(size=(n, 4)).astype("float32")
        labels = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")
        teacher = 2.0 * rng.normal(size=(n, 3)).astype("float32")
        return x, labels, teacher_targets(labels, teacher)

    def _model(self):
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])

    @pytest.mark.parametrize("jit_compile", [False, True])
    def test_fit_and_validate_on_hard_labels(self, rng, jit_compile):
        x, labels, y = self._data(rng)
        model = self._model()
        model.compile(optimizer="adam", loss=ILSLoss(method="ils", p1=0.8, p2=2.0), jit_compile=jit_compile)
        history = model.fit(x, y, validation_data=(x, labels), epochs=2, batch_size=16, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        want = _np(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, model.predict(x, verbose=0)))
        np.testing.assert_allclose(history.history["val_loss"][-1], want, rtol=1e-4)

    @pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
    def test_mixed_precision_gives_the_same_loss(self, rng, policy):
        x, labels, y = self._data(rng)
        model = self._model()
        model.compile(loss=ILSLoss(method="ils", p1=0.8, p2=2.0))
        full = model.evaluate(x, y, verbose=0)
        keras.mixed_precision.set_global_policy(policy)
        try:
            mixed = keras.Sequential(
                [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
            )
            mixed.set_weights(model.get_weights())
            mixed.compile(loss=ILSLoss(method="ils", p1=0.8, p2=2.0), jit_compile=True)
            got = mixed.evaluate(x, y, verbose=0)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        np.testing.assert_allclose(got, full, rtol=2e-2)

    def test_out_of_range_sparse_labels_fail_in_the_compiled_step(self, rng):
        """The loss is NaN; with a metric to carry the count, the epoch ends with the `ValueError`."""
        x, labels, _ = self._data(rng)
        model = self._model()
        model.compile(loss=ILSLoss(method="ls"))
        assert np.isnan(model.fit(x, labels + 3, epochs=1, verbose=0).history["loss"][0])
        model.compile(loss=ILSLoss(method="ls"), metrics=[keras_ils.metrics.InputCheck()])
        with pytest.raises(ValueError, match=r"Expected class indices in \[0, 3\)"):
            model.fit(x, labels + 3, epochs=1, verbose=0)

    def test_teacher_class_count_mismatch(self, rng):
        x, labels, _ = self._data(rng)
        wrong = teacher_targets(labels, rng.normal(size=(len(labels), 4)))
        model = self._model()
        model.compile(loss=ILSLoss())
        with pytest.raises(ValueError, match="Cannot read `y_true`"):
            model.fit(x, wrong, epochs=1, verbose=0)


class TestSerialization:
    def test_config_round_trip(self):
        loss = ILSLoss(method="ils2", epsilon=0.05, temperature=4.0, family="sinusoidal", from_logits=False, name="x")
        config = loss.get_config()
        assert ILSLoss.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
        assert isinstance(restored, ILSLoss) and restored.get_config() == config

    def test_keras_file_round_trip(self, tmp_path, rng):
        x = rng.normal(size=(16, 4)).astype("float32")
        labels = rng.integers(0, 3, 16)
        y = teacher_targets(labels, rng.normal(size=(16, 3)))
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss=ILSLoss(method="ils", p1=0.8, p2=2.0))
        model.fit(x, y, epochs=1, verbose=0)
        path = tmp_path / "m.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert isinstance(loaded.loss, ILSLoss) and loaded.loss.get_config() == model.loss.get_config()
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
        np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0), rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(p1=0.0), "p1"),
        (dict(p2=-1), "p2"),
        (dict(epsilon=1.0), "epsilon"),
        (dict(temperature=0), "temperature"),
        (dict(method="bogus"), "method"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        ILSLoss(**kwargs)


def test_exported_at_top_level():
    assert keras_ils.ILSLoss is ILSLoss


class TestBadLabels:
    def test_fractional_float_labels_are_an_error_not_truncation(self):
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            ILSLoss()(np.array([0.0, 1.7]), np.zeros((2, 3)))

    def test_fractional_float_labels_fail_in_fit(self):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss=ILSLoss(), metrics=[keras_ils.metrics.InputCheck()])
        with pytest.raises(ValueError, match="whole numbers"):
            model.fit(np.zeros((4, 2)), np.array([0.0, 1.0, 2.5, 1.0]), verbose=0)

    def test_whole_number_float_labels_equal_integer_labels(self, rng):
        logits = rng.normal(size=(6, 3)).astype("float32")
        labels = rng.integers(0, 3, 6)
        np.testing.assert_allclose(
            float(ILSLoss()(labels.astype("float32"), logits)), float(ILSLoss()(labels, logits)), rtol=1e-7
        )


class TestFunctionalForm:
    """`ils_crossentropy(y_true, y_pred, ...)`: the per-example function behind `ILSLoss`, as Keras pairs them."""

    @pytest.mark.parametrize("method", METHODS)
    def test_equals_the_reference_on_teacher_targets(self, batch, method):
        labels, teacher, student = batch
        got = _np(keras_ils.ils_crossentropy(teacher_targets(labels, teacher), student, method=method, **HP))
        want = reference.cross_entropy(reference.ils_targets(labels, teacher, method, **HP), student)
        np.testing.assert_allclose(got, want, rtol=1e-5)

    def test_sparse_labels_with_ls_match_keras_label_smoothing(self, batch):
        labels, _, student = batch
        keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None)
        got = _np(keras_ils.ils_crossentropy(labels, student, method="ls", epsilon=0.1))
        np.testing.assert_allclose(got, _np(keras_loss(np.eye(5)[labels], student)), rtol=1e-6)

    def test_probabilities_with_from_logits_false(self, batch):
        labels, _, student = batch
        probabilities = reference.softmax(student)
        got = _np(keras_ils.ils_crossentropy(labels, probabilities, method="none", from_logits=False))
        want = reference.cross_entropy(np.eye(5)[labels], student)
        np.testing.assert_allclose(got, want, rtol=1e-5)

    def test_bad_hyperparameter_is_refused(self, batch):
        labels, _, student = batch
        with pytest.raises(ValueError, match="Invalid value for argument `p1`"):
            keras_ils.ils_crossentropy(labels, student, p1=1.5)
