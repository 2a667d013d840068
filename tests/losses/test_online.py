"""OnlineLabelSmoothing and its callback: the soft-label matrix, the epoch update, validation, saving, replicas."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops
from test_calibration_losses import _ce

from keras_ils.losses import (
    OnlineLabelSmoothing,
    OnlineLabelSmoothingCallback,
    OnlineLabelSmoothingWarning,
    online_label_smoothing_crossentropy,
)
from keras_ils.losses.online import soft_labels_from_statistics

K = 4
jax_only = pytest.mark.skipif(keras.backend.backend() != "jax", reason="the JAX refusal")


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


def _expected_matrix(probs, labels, previous):
    """The package's update, a loop: row y = normalised mean of the correct predictions of class y; else kept."""
    matrix = np.array(previous, dtype=np.float64)
    for y in range(len(matrix)):
        members = probs[(labels == y) & (probs.argmax(1) == y)]
        if len(members):
            mean = members.mean(0)
            matrix[y] = mean / mean.sum()
    return matrix


def test_soft_labels_from_statistics_against_the_loop(rng):
    probs = rng.dirichlet(np.ones(K), size=200)
    labels = np.minimum(rng.integers(0, K, 200), K - 2)  # class K-1 never the label: its row stays
    correct = probs.argmax(1) == labels
    sums = np.stack([probs[correct & (labels == y)].sum(0) for y in range(K)])
    counts = np.array([(correct & (labels == y)).sum() for y in range(K)])
    previous = rng.dirichlet(np.ones(K), size=K)
    got = soft_labels_from_statistics(sums, counts, previous)
    np.testing.assert_allclose(got, _expected_matrix(probs, labels, previous), rtol=1e-6)
    np.testing.assert_allclose(got[K - 1], previous[K - 1], rtol=1e-6)


def _authors_update(probs, labels, num_classes):
    """The epoch-end update of Zhang et al.'s code (zhangchbin/OnlineLabelSmoothing, `train_cifar_all_methods.py`),
    in numpy: per example, a correct top-1 prediction adds its distribution to its class's sum; then each row is the
    mean of its sums, or uniform (1/K) for a class with none."""
    sums, counts = np.zeros((num_classes, num_classes)), np.zeros(num_classes)
    for p, y in zip(probs, labels, strict=True):
        if np.argsort(-p)[0] == y:
            sums[y] += p
            counts[y] += 1
    matrix = np.full((num_classes, num_classes), 1.0 / num_classes)
    for y in range(num_classes):
        if counts[y] >= 0.5:
            matrix[y] = sums[y] / counts[y]
    return matrix


def test_the_update_is_the_authors_except_for_a_class_never_right(rng):
    """Rows of classes classified right are the authors' mean; a class with none keeps its row (theirs: uniform)."""
    probs = rng.dirichlet(np.ones(K), size=300)
    labels = rng.integers(0, K, 300)
    labels[(labels == 3) & (probs.argmax(1) == 3)] = 0  # class 3 is never classified right
    correct = probs.argmax(1) == labels
    sums = np.stack([probs[correct & (labels == y)].sum(0) for y in range(K)])
    counts = np.array([(correct & (labels == y)).sum() for y in range(K)])
    previous = rng.dirichlet(np.ones(K), size=K)
    got = soft_labels_from_statistics(sums, counts, previous)
    authors = _authors_update(probs, labels, K)
    np.testing.assert_allclose(got[:3], authors[:3], rtol=1e-6)
    np.testing.assert_allclose(got[3], previous[3], rtol=1e-6)  # kept, where the authors reset it to uniform
    np.testing.assert_allclose(authors[3], 1 / K)


def test_functional_form_against_numpy(rng):
    labels = rng.integers(0, K, 30)
    logits = rng.normal(size=(30, K)).astype("float32")
    matrix = rng.dirichlet(np.ones(K), size=K)
    want = 0.3 * _ce(np.eye(K)[labels], logits) + 0.7 * _ce(matrix[labels], logits)
    got = _np(online_label_smoothing_crossentropy(labels, logits, matrix, alpha=0.3))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_num_classes_checked_against_y_pred():
    with pytest.raises(ValueError, match="Invalid value for argument `num_classes`.*Received: num_classes=3"):
        OnlineLabelSmoothing(3)([0, 1], np.zeros((2, 5), "float32"))


def test_warns_once_at_its_first_call_without_a_callback(rng):
    loss = OnlineLabelSmoothing(K, alpha=0.25)
    with pytest.warns(OnlineLabelSmoothingWarning, match="epsilon = 1 - alpha = 0.75.*OnlineLabelSmoothingCallback"):
        loss([0], np.zeros((1, K), "float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnlineLabelSmoothingWarning)
        loss([0], np.zeros((1, K), "float32"))  # once
        with_callback = OnlineLabelSmoothing(K)
        OnlineLabelSmoothingCallback(with_callback)
        with_callback([0], np.zeros((1, K), "float32"))


def test_a_fit_without_its_callback_warns(rng):
    """A real, compiled `model.fit` of two epochs without the callback: one warning (TensorFlow and JAX)."""
    x, labels = _data(rng)
    model, optimizer = _frozen_model()
    model.compile(optimizer=optimizer, loss=OnlineLabelSmoothing(K))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, labels, epochs=2, batch_size=32, verbose=0)
    assert [w.category for w in caught].count(OnlineLabelSmoothingWarning) == 1


def test_callback_needs_the_loss():
    with pytest.raises(TypeError, match="must be an `OnlineLabelSmoothing`"):
        OnlineLabelSmoothingCallback(keras.losses.CategoricalCrossentropy())


def _data(rng, n=64):
    x = rng.normal(size=(n, 3)).astype("float32")
    labels = np.minimum((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0), K - 2)  # class K-1 never a label
    return x, labels.astype("int32")


def _frozen_model(seed=0):
    """A model whose weights the training does not move (learning rate 0): every batch sees the same predictions."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(K)])
    return model, keras.optimizers.SGD(learning_rate=0.0)


@pytest.mark.tensorflow_only
class TestTraining:
    def _fit(self, rng, loss, model, optimizer, epochs=1, validation=True):
        x, labels = _data(rng)
        model.compile(optimizer=optimizer, loss=loss)
        x_val = 3.0 + rng.normal(size=(40, 3)).astype("float32")  # other predictions: they must not count
        fit = dict(epochs=epochs, batch_size=16, verbose=0, callbacks=[OnlineLabelSmoothingCallback(loss)])
        if validation:
            fit["validation_data"] = (x_val, rng.integers(0, K, 40))
        with warnings.catch_warnings():
            warnings.simplefilter("error", OnlineLabelSmoothingWarning)  # trained as it should be: no warning
            model.fit(x, labels, **fit)
        return x, labels

    @pytest.mark.parametrize("validation", [False, True])
    def test_one_epoch_sets_each_row_from_the_correct_training_predictions(self, rng, validation):
        model, optimizer = _frozen_model()
        loss = OnlineLabelSmoothing(K, alpha=0.5)
        x, labels = self._fit(rng, loss, model, optimizer, validation=validation)
        probs = _np(ops.softmax(model.predict(x, verbose=0)))
        want = _expected_matrix(probs, labels, np.full((K, K), 1 / K))
        assert not np.allclose(want[:2], 1 / K)  # the update did something
        np.testing.assert_allclose(_np(loss.soft_labels), want, rtol=1e-5)

    def test_the_next_epoch_trains_against_the_new_matrix(self, rng):
        model, optimizer = _frozen_model()
        loss = OnlineLabelSmoothing(K, alpha=0.25)
        x, labels = self._fit(rng, loss, model, optimizer, epochs=1)
        matrix = _np(loss.soft_labels)
        history = model.fit(x, labels, epochs=1, batch_size=64, verbose=0)
        logits = model.predict(x, verbose=0)
        want = 0.25 * _ce(np.eye(K)[labels], logits) + 0.75 * _ce(matrix[labels], logits)
        np.testing.assert_allclose(history.history["loss"][0], want.mean(), rtol=1e-4)

    def test_keras_file_round_trip_restores_the_matrix(self, rng, tmp_path):
        model, _ = _frozen_model()
        loss = OnlineLabelSmoothing(K)
        x, labels = self._fit(rng, loss, model, "adam", epochs=2)
        matrix = _np(loss.soft_labels)
        assert not np.allclose(matrix, 1 / K)
        model.save(tmp_path / "ols.keras")
        loaded = keras.saving.load_model(tmp_path / "ols.keras")
        np.testing.assert_allclose(_np(loaded.loss.soft_labels), matrix)
        with warnings.catch_warnings():
            warnings.simplefilter("error", OnlineLabelSmoothingWarning)  # its S was learned: evaluating is fine
            np.testing.assert_allclose(
                loaded.evaluate(x, labels, verbose=0), model.evaluate(x, labels, verbose=0), rtol=1e-6
            )
        with pytest.raises(ValueError, match="not compiled with this callback's"):
            loaded.fit(x, labels, epochs=1, verbose=0, callbacks=[OnlineLabelSmoothingCallback(loss)])
        loaded.fit(x, labels, epochs=1, verbose=0, callbacks=[OnlineLabelSmoothingCallback(loaded.loss)])

    def test_statistics_are_summed_over_replicas(self, rng, mirrored_strategy):
        single_model, optimizer = _frozen_model()
        single = OnlineLabelSmoothing(K)
        self._fit(np.random.default_rng(5), single, single_model, optimizer)
        with mirrored_strategy.scope():
            model, optimizer = _frozen_model()
            loss = OnlineLabelSmoothing(K)
        self._fit(np.random.default_rng(5), loss, model, optimizer)
        np.testing.assert_allclose(_np(loss.soft_labels), _np(single.soft_labels), rtol=1e-5)
        assert not np.allclose(_np(loss.soft_labels)[:2], 1 / K)


@jax_only
def test_the_callback_refuses_jax(rng):
    x, labels = _data(rng)
    model, optimizer = _frozen_model()
    loss = OnlineLabelSmoothing(K)
    model.compile(optimizer=optimizer, loss=loss)
    with pytest.raises(RuntimeError, match="needs the TensorFlow backend"):
        model.fit(x, labels, epochs=1, verbose=0, callbacks=[OnlineLabelSmoothingCallback(loss)])
