"""MMCELoss and MDCALoss beyond the shared contract: the batch terms, the authors' values, the weighting rule."""

import numpy as np
import pytest
from keras import ops
from test_calibration_losses import _ce, _log_softmax, ref_mmce_value

from keras_ils.losses import MDCALoss, MMCELoss
from keras_ils.losses.mdca import mdca
from keras_ils.losses.mmce import mmce

# Five examples, three classes: the batch on which the authors' MMCE code was run (TestMMCE).
LOGITS = np.array([[2.0, 0.5, -1.0], [0.1, 0.3, 0.2], [-0.5, 1.5, 0.0], [1.0, 1.2, 3.0], [0.0, -2.0, 0.4]], np.float32)
LABELS = np.array([0, 2, 1, 0, 2])


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


class TestMMCE:
    def test_the_authors_unweighted_estimate_is_the_square(self):
        """The authors' `calibration_unbiased_loss` (aviralkumar2907/MMCE, 20ng_mmce.py) returns MMCE^2, no root.

        0.007031402550637722 is its value on LOGITS / LABELS, run once under TensorFlow 2.21 with
        `tf.to_float` replaced by `tf.cast(..., tf.float32)` and nothing else changed. This package
        follows the paper's objective, the root of it.
        """
        probs = np.exp(_log_softmax(LOGITS))
        confidences, correct = probs.max(-1), (probs.argmax(-1) == LABELS).astype("float32")
        got = float(_np(mmce(confidences, correct)))
        np.testing.assert_allclose(got**2, 0.007031402550637722, rtol=1e-5)
        np.testing.assert_allclose(got, ref_mmce_value(probs, LABELS), rtol=1e-5)

    def test_zero_when_calibrated_in_the_kernel_sense(self):
        # two equal confidences of 0.5, one right and one wrong: c - r = +-0.5 cancel under any kernel
        assert float(_np(mmce([0.5, 0.5], [1.0, 0.0]))) == 0.0

    def test_every_example_carries_the_whole_batch_term(self):
        per_example = _np(MMCELoss(weight=2.0, reduction=None)(LABELS, LOGITS))
        term = ref_mmce_value(np.exp(_log_softmax(LOGITS)), LABELS)
        np.testing.assert_allclose(per_example, _ce(np.eye(3)[LABELS], LOGITS) + 2.0 * term, rtol=1e-5)

    def test_sample_weight_scales_each_share_and_not_the_term(self, rng):
        w = rng.random(5)
        term = ref_mmce_value(np.exp(_log_softmax(LOGITS)), LABELS)
        want = (w * _ce(np.eye(3)[LABELS], LOGITS)).mean() + 2.0 * term * w.mean()
        np.testing.assert_allclose(_np(MMCELoss(weight=2.0)(LABELS, LOGITS, sample_weight=w)), want, rtol=1e-5)

    def test_gradient_is_zero_not_nan_where_the_term_is_zero(self):
        from test_calibration_losses import _gradient

        logits = np.array([[0.0, 0.0], [0.0, 0.0]], np.float32)  # r = 0.5 twice, one right (argmax 0), one wrong
        grad = _gradient(lambda z: MMCELoss(weight=1.0)([0, 1], z), logits)
        assert np.isfinite(grad).all()


class TestMDCA:
    def test_closed_form(self):
        probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]])
        # class means of p: 0.4, 0.4, 0.2; shares of labels [0, 0]: 1, 0, 0 -> (0.6 + 0.4 + 0.2) / 3
        np.testing.assert_allclose(float(_np(mdca(probs, np.eye(3)[[0, 0]]))), 0.4, rtol=1e-6)

    @pytest.mark.parametrize("beta", [0.0, 1.0, 20.0])
    def test_the_authors_class_loop(self, beta):
        """The authors' MDCA loops over classes: |mean(output[:, c]) - mean(target == c)|, divided by K."""
        probs = np.exp(_log_softmax(LOGITS))
        loop = sum(abs(probs[:, c].mean() - (LABELS == c).mean()) for c in range(3)) / 3
        want = _ce(np.eye(3)[LABELS], LOGITS).mean() + beta * loop
        np.testing.assert_allclose(_np(MDCALoss(beta=beta)(LABELS, LOGITS)), want, rtol=1e-5)

    def test_sample_weight_scales_each_share_and_not_the_term(self, rng):
        w = rng.random(5)
        probs = np.exp(_log_softmax(LOGITS))
        term = np.abs(probs.mean(0) - np.eye(3)[LABELS].mean(0)).mean()
        want = (w * _ce(np.eye(3)[LABELS], LOGITS)).mean() + 5.0 * term * w.mean()
        np.testing.assert_allclose(_np(MDCALoss(beta=5.0)(LABELS, LOGITS, sample_weight=w)), want, rtol=1e-5)
