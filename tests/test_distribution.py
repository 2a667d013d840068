"""Every trainable piece runs under MirroredStrategy over 2 logical CPU devices (set in conftest.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import log_softmax

import keras_ils
from keras_ils.baselines import BetaSmoothingLoss, BootstrapSoftLoss
from keras_ils.distillation import DistillationCrossEntropy, distiller


def _net():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])


def _setups(teacher):
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return {
        "ils": lambda: (_net(), keras_ils.ILSLoss(method="ils"), True),
        "dis_cached": lambda: (_net(), DistillationCrossEntropy(), True),
        "beta": lambda: (_net(), BetaSmoothingLoss(a=3.0, seed=1), False),
        "bs_soft": lambda: (_net(), BootstrapSoftLoss(), False),
        "online_teacher": lambda: (keras_ils.OnlineTeacher(_net(), teacher), keras_ils.ILSLoss(), False),
        "distiller": lambda: (distiller(teacher, _net()), sparse, False),
    }


@pytest.mark.parametrize("name", ["ils", "dis_cached", "beta", "bs_soft", "online_teacher", "distiller"])
def test_fit_under_mirrored_strategy(name, mirrored_strategy):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype("float32"), rng.integers(0, 3, 64).astype("int32")
    strategy = mirrored_strategy
    with strategy.scope():
        teacher = _net()
        model, loss, needs_teacher_targets = _setups(teacher)[name]()
        model.compile(optimizer="sgd", loss=loss, metrics=[keras_ils.metrics.NegativeLogLikelihood(from_logits=True)])
    labels = keras_ils.teacher_targets(y, teacher.predict(x, verbose=0)) if needs_teacher_targets else y
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, labels)).batch(16), epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and history.history["loss"][1] != history.history["loss"][0]
    # the hard-label NLL metric equals numpy on the trained model's outputs, across replicas
    evaluated = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), verbose=0, return_dict=True)
    log_p = log_softmax(model.predict(x, verbose=0), axis=1)
    np.testing.assert_allclose(evaluated["nll"], -log_p[np.arange(64), y].mean(), rtol=1e-5)
