import keras
import numpy as np
import pytest

from keras_ils import teacher_targets
from keras_ils.distillation import (
    DistillationCrossEntropy,
    FitTemperatureOnTrainEnd,
    SoftTargetDistillation,
    distiller,
    soft_cross_entropy,
)

import reference


def _by_hand(labels, teacher, student, weight, t_teacher, t_student):
    """The paper's distillation loss, per example, written out in numpy."""
    soft = reference.softmax(np.asarray(teacher) / t_teacher)
    log_student_t = np.log(reference.softmax(np.asarray(student) / t_student))
    log_student = np.log(reference.softmax(student))
    soft_term = -(soft * log_student_t).sum(1)
    hard_term = -log_student[np.arange(len(labels)), labels]
    return weight * soft_term + (1 - weight) * hard_term


@pytest.fixture
def batch(rng):
    return rng.integers(0, 4, 16), 3 * rng.normal(size=(16, 4)), rng.normal(size=(16, 4))


@pytest.mark.parametrize("weight, t_teacher, t_student", [(0.9, 20.0, 1.0), (0.5, 4.0, 4.0), (0.0, 1.0, 1.0)])
def test_cached_loss_against_hand_computation(batch, weight, t_teacher, t_student):
    labels, teacher, student = batch
    loss = DistillationCrossEntropy(weight, t_teacher, t_student, reduction=None)
    got = keras.ops.convert_to_numpy(loss(teacher_targets(labels, teacher), student))
    np.testing.assert_allclose(got, _by_hand(labels, teacher, student, weight, t_teacher, t_student), rtol=1e-5)


def test_cached_loss_on_hard_labels_is_plain_cross_entropy(batch):
    labels, _, student = batch
    want = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, student)
    np.testing.assert_allclose(float(DistillationCrossEntropy()(labels, student)), float(want), rtol=1e-6)


def test_online_distiller_loss_against_hand_computation(batch):
    labels, _, _ = batch
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    teacher = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    student = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    model = distiller(teacher, student, weight=0.9, teacher_temperature=20.0)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    got = model.compute_loss(x=x, y=labels, y_pred=student(x), training=True)
    want = _by_hand(labels, teacher.predict(x, verbose=0), student.predict(x, verbose=0), 0.9, 20.0, 1.0).mean()
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


@pytest.mark.tensorflow_only
def test_soft_cross_entropy_blocks_teacher_gradient():
    import tensorflow as tf

    teacher = tf.Variable([[1.0, 2.0]])
    with tf.GradientTape() as tape:
        value = soft_cross_entropy(teacher, tf.constant([[0.5, 0.1]]))
    assert tape.gradient(value, teacher) is None


def test_callback_fits_temperature_at_train_end(rng):
    from keras_ils import fit_calibrator

    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = FitTemperatureOnTrainEnd((x, y))
    model.fit(x, y, epochs=2, verbose=0, callbacks=[callback])
    _, fit = fit_calibrator("temperature", model.predict(x, verbose=0), y, return_fit=True)
    assert callback.temperature == pytest.approx(fit.temperature, rel=1e-6)
    np.testing.assert_allclose(
        callback.calibrated_model.predict(x, verbose=0), model.predict(x, verbose=0) / callback.temperature, rtol=1e-5
    )


class TestSerialization:
    def test_loss_config_and_keras_file(self, tmp_path, batch):
        labels, teacher, _ = batch
        loss = DistillationCrossEntropy(0.7, 8.0, 2.0)
        config = loss.get_config()
        assert DistillationCrossEntropy.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
        assert restored.get_config() == config
        x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss=loss)
        y = teacher_targets(labels, teacher)
        model.fit(x, y, epochs=1, verbose=0)
        model.save(tmp_path / "m.keras")
        loaded = keras.saving.load_model(tmp_path / "m.keras")
        assert loaded.loss.get_config() == config
        np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0), rtol=1e-6)

    def test_distillation_term_config(self):
        term = SoftTargetDistillation(10.0, 2.0)
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(term))
        assert isinstance(restored, SoftTargetDistillation) and restored.get_config() == term.get_config()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(weight=1.5), "weight"),
        (dict(weight=-0.1), "weight"),
        (dict(teacher_temperature=0), "teacher_temperature"),
        (dict(student_temperature=-1.0), "student_temperature"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        DistillationCrossEntropy(**kwargs)
    teacher = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        distiller(teacher, teacher, **kwargs)


def test_class_count_mismatch():
    teacher = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    student = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    with pytest.raises(ValueError, match="same number of classes"):
        distiller(teacher, student)
