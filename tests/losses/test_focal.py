"""FocalLoss beyond the shared contract: Keras' own focal loss, the FLSD-53 schedule and its stopped gradient."""

import keras
import numpy as np
import pytest
from keras import ops
from test_calibration_losses import _gradient, ref_focal

from keras_ils.losses import FocalLoss, focal_crossentropy


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


@pytest.mark.parametrize("from_logits", [True, False])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 2.0, 3.0])
def test_equals_keras_categorical_focal_crossentropy_with_alpha_one(rng, gamma, from_logits):
    labels = rng.integers(0, 5, 40)
    one_hot = np.eye(5)[labels].astype("float32")
    logits = (2.0 * rng.normal(size=(40, 5))).astype("float32")
    y_pred = logits if from_logits else _np(ops.softmax(logits)).astype("float32")
    keras_loss = keras.losses.CategoricalFocalCrossentropy(alpha=1.0, gamma=gamma, from_logits=from_logits)
    ours = FocalLoss(gamma=gamma, from_logits=from_logits)
    np.testing.assert_allclose(_np(ours(one_hot, y_pred)), _np(keras_loss(one_hot, y_pred)), rtol=1e-5)
    np.testing.assert_allclose(_np(ours(labels, y_pred)), _np(keras_loss(one_hot, y_pred)), rtol=1e-5)


def test_soft_targets_weight_each_class_as_keras_does(rng):
    soft = rng.dirichlet(np.ones(4), size=16).astype("float32")
    logits = rng.normal(size=(16, 4)).astype("float32")
    keras_loss = keras.losses.CategoricalFocalCrossentropy(alpha=1.0, gamma=2.0, from_logits=True, reduction=None)
    np.testing.assert_allclose(
        _np(FocalLoss(gamma=2.0, reduction=None)(soft, logits)), _np(keras_loss(soft, logits)), rtol=1e-5
    )


def test_gamma_zero_is_cross_entropy(rng):
    labels = rng.integers(0, 3, 10)
    logits = rng.normal(size=(10, 3)).astype("float32")
    want = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    np.testing.assert_allclose(_np(FocalLoss(gamma=0.0)(labels, logits)), _np(want), rtol=1e-6)


class TestFLSD53:
    def test_gamma_switches_at_p_t_0_2(self):
        # p_t = 0.199 (gamma 5), 0.201 and 0.7 (gamma 3; the authors' test is `pt < 0.2`)
        probs = np.array([[0.199, 0.801, 0.0], [0.201, 0.799, 0.0], [0.7, 0.2, 0.1]])
        want = [0.801**5 * -np.log(0.199), 0.799**3 * -np.log(0.201), 0.3**3 * -np.log(0.7)]
        logits = np.log(np.maximum(probs, 1e-30)).astype("float32")
        got = _np(focal_crossentropy([0, 0, 0], logits, gamma="flsd53"))
        np.testing.assert_allclose(got, want, rtol=1e-4)
        np.testing.assert_allclose(got, ref_focal(np.eye(3)[[0, 0, 0]], logits, "flsd53"), rtol=1e-4)

    def test_no_gradient_through_gamma(self, rng):
        """Where every p_t < 0.2 the gradient is that of gamma = 5 held fixed; where all are >= 0.2, gamma = 3."""
        labels = np.zeros(6, int)
        others = np.abs(rng.normal(size=(6, 2)))
        low = np.concatenate([np.full((6, 1), -5.0), others], 1).astype("float32")
        high = np.concatenate([np.full((6, 1), 4.0), -others], 1).astype("float32")
        for logits, fixed in ((low, 5.0), (high, 3.0)):
            p_t = _np(ops.softmax(logits))[:, 0]
            assert (p_t < 0.2).all() if fixed == 5.0 else (p_t >= 0.2).all()
            schedule = _gradient(lambda z: FocalLoss(gamma="flsd53")(labels, z), logits)
            constant = _gradient(lambda z, fixed=fixed: FocalLoss(gamma=fixed)(labels, z), logits)
            np.testing.assert_allclose(schedule, constant, rtol=1e-6, atol=1e-8)


def test_a_hopeless_example_keeps_its_gradient_on_logits():
    """Keras' focal loss clips the softmax at 1e-7, so p_t = e^-30 gets no gradient; the log-softmax form keeps it."""
    logits = np.array([[-30.0, 0.0, 0.0]], np.float32)
    ours = _gradient(lambda z: FocalLoss(gamma=2.0)([0], z), logits)
    np.testing.assert_allclose(ours[0, 0], -1.0, rtol=1e-4)  # d/dz_t of -(1 - p_t)^2 log p_t -> -1 as p_t -> 0
    keras_loss = keras.losses.CategoricalFocalCrossentropy(alpha=1.0, gamma=2.0, from_logits=True)
    theirs = _gradient(lambda z: keras_loss(np.eye(3)[[0]], z), logits)
    assert abs(theirs[0, 0]) < 1e-6
