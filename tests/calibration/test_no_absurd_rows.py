"""The README's bound, for every calibrator: no calibrated test NLL above 2x the network's own, plus 0.1.

The logits are a trained network's as far as their statistics go: each example has a latent class, the labels are
drawn from the softmax of the latent scores (so the Bayes NLL is not 0), and the network outputs 1.5 times those
scores (over-confident, as trained networks are: Guo et al. 2017). Validation sets are the sizes users hold (60
examples of 2 classes, 30 a class of 10, 18 a class of 32: the 32-class table where Venn-Abers one-vs-rest gave test
NLL 0.45-0.52 against its network's 0.06); the networks are middling (85-94 % accurate) or confident (99 % and more),
where a one-vs-rest map's floors and coarse bins cost the most.
"""

import functools
import warnings

import keras
import numpy as np
import pytest
from scipy.special import log_softmax, softmax

from keras_ils.calibration import METHODS, fit_calibrator

# (classes, validation examples, the latent class's margin): middling and confident networks at each K
TASKS = [(2, 60, 3.0), (2, 60, 9.0), (10, 300, 6.0), (10, 300, 9.0), (32, 576, 6.0), (32, 576, 9.0)]


@functools.cache
def _logits(num_classes, num_validation, margin):
    """`(validation logits, labels, test logits, labels)` of the network described in the module docstring."""
    rng = np.random.default_rng(num_classes * 1000 + int(margin))

    def draw(n):
        latent = rng.integers(0, num_classes, n)
        scores = margin * np.eye(num_classes)[latent] + rng.normal(size=(n, num_classes))
        labels = (rng.random((n, 1)) < softmax(scores, axis=1).cumsum(axis=1)).argmax(axis=1)
        return (1.5 * scores).astype(np.float32), labels

    return (*draw(num_validation), *draw(5000))


def _nll(logits, labels):
    return float(-np.mean(log_softmax(np.asarray(logits, np.float64), axis=1)[np.arange(len(labels)), labels]))


@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"K{t[0]}-n{t[1]}-margin{t[2]:g}")
@pytest.mark.parametrize("method", METHODS)
def test_no_calibrated_row_is_worse_than_twice_its_network_plus_a_tenth(method, task):
    validation, labels, test, test_labels = _logits(*task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small sets warn; their own tests check the warnings
        layer = fit_calibrator(method, validation, labels)
    network = _nll(test, test_labels)
    calibrated = _nll(keras.ops.convert_to_numpy(layer(test)), test_labels)
    assert calibrated <= 2 * network + 0.1, (method, network, calibrated)
