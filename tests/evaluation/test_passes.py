"""The scores read `[n, K]` outputs a chunk of rows at a time (issue 29 item 1): values against direct references.

The chunked passes keep only per-row top labels and per-class bin sums, the first bin's by difference; the
references below compute each score from the whole `[n, K]` array, one-hot labels and all, in numpy.
"""

import calibration
import keras
import numpy as np
import pytest

from keras_ils import evaluation, metrics
from keras_ils.evaluation import _passes

import reference


def _logits(seed, n, k, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * scale
    logits[np.arange(n), labels] += 2.0 * scale
    return logits.astype(np.float32), labels


def _brier_terms(probs, labels, num_bins):
    """The decomposition from the whole arrays: one-hot labels, every class's bins, float64."""
    n, k = probs.shape
    one_hot = np.eye(k)[labels]
    bins = np.clip(np.ceil(probs.astype(np.float32) * np.float32(num_bins)) - 1, 0, num_bins - 1).astype(int)
    terms = np.zeros(5)
    for j in range(k):
        overall = one_hot[:, j].mean()
        terms[2] += overall * (1 - overall)
        for b in np.unique(bins[:, j]):
            m = bins[:, j] == b
            f, o = probs[m, j].mean(), one_hot[m, j].mean()
            terms[0] += m.sum() * (f - o) ** 2 / n
            terms[1] += m.sum() * (o - overall) ** 2 / n
            terms[3] += np.sum((probs[m, j] - f) ** 2) / n
            terms[4] += 2 * np.sum((probs[m, j] - f) * (one_hot[m, j] - o)) / n
    return terms


@pytest.mark.parametrize("chunk_values", [1, 7, 64])
def test_chunk_boundaries_change_nothing(monkeypatch, chunk_values):
    """Chunks of one, two and 21 rows (K = 3): every score against its reference on the whole set."""
    monkeypatch.setattr(_passes, "CHUNK_VALUES", chunk_values)
    logits, labels = _logits(0, 200, 3)
    probs = reference.softmax(logits)
    result = evaluation.scores(logits, labels)
    np.testing.assert_allclose(result["nll"], reference.nll(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["brier"], reference.brier(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, labels), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, labels), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(evaluation.probabilities(logits)[0], probs, rtol=1e-5, atol=1e-7)
    terms = evaluation.brier_decomposition(probs, labels)
    np.testing.assert_allclose(terms, _brier_terms(probs, labels, 15), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("num_bins", [2, 15])
def test_a_thousand_classes(num_bins):
    """K = 1,000: nearly every probability is in the first bin, whose sums are the column totals less the rest."""
    logits, labels = _logits(1, 300, 1000, scale=2.0)
    probs = reference.softmax(logits)
    result = evaluation.scores(logits, labels, num_bins=num_bins)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, labels, num_bins), rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(result["brier"], reference.brier(probs, labels), rtol=1e-5)
    terms = evaluation.brier_decomposition(probs, labels, num_bins=num_bins)
    np.testing.assert_allclose(terms, _brier_terms(probs, labels, num_bins), rtol=1e-9, atol=1e-12)


def test_bin_index_in_numpy_and_as_a_tensor():
    values = np.array([0.0, 1e-9, 1 / 15, 0.0667, 2 / 15, 0.5, 14 / 15, 0.99999, 1.0, 1.004], dtype=np.float32)
    values = np.concatenate([values, np.random.default_rng(0).uniform(size=1000).astype(np.float32)])
    for num_bins in (1, 3, 15, 40):
        in_numpy = metrics.bin_index(values, num_bins)
        assert isinstance(in_numpy, np.ndarray) and in_numpy.dtype == np.int32
        np.testing.assert_array_equal(in_numpy, keras.ops.convert_to_numpy(metrics.bin_index(list(values), num_bins)))
        np.testing.assert_array_equal(in_numpy, np.clip(np.ceil(values * np.float32(num_bins)) - 1, 0, num_bins - 1))


def test_groups_of_sequence_outputs_are_examples():
    """A group mask is over examples; a sequence's predictions are rows of its example."""
    logits, labels = _logits(2, 120, 3)
    outputs, targets = logits.reshape(20, 6, 3), labels.reshape(20, 6)
    mask = np.arange(20) % 3 == 0
    result = evaluation.evaluate_outputs(outputs, targets, groups={"g": mask})
    probs = reference.softmax(outputs[mask].reshape(-1, 3))
    assert result["g"]["count"] == mask.sum() and result["all"]["count"] == 20
    np.testing.assert_allclose(result["g"]["nll"], reference.nll(probs, targets[mask].ravel()), rtol=1e-5)
    np.testing.assert_allclose(result["g"]["ece"], reference.ece(probs, targets[mask].ravel()), rtol=1e-4, atol=1e-7)


@pytest.mark.slow  # 50,000 x 1,000 float32 (200 MB) and its float64 references: about 30 s on 2 shared cores
def test_every_score_at_fifty_thousand_by_a_thousand():
    logits, labels = _logits(3, 50_000, 1000, scale=2.0)
    probs = reference.softmax(logits)
    result = evaluation.scores(logits, labels)
    np.testing.assert_allclose(result["nll"], reference.nll(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["brier"], reference.brier(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, labels), rtol=1e-4, atol=1e-7)
    want = calibration.get_ece_em(probs, labels, num_bins=15)  # float32 confidences tie: its bins pool ties as ours
    np.testing.assert_allclose(result["adaptive_ece"], want, rtol=1e-4, atol=1e-7)
    terms = evaluation.brier_decomposition(probs.astype(np.float32), labels)
    np.testing.assert_allclose(terms.brier, reference.brier(probs, labels), rtol=1e-5)
