"""Tied confidences (issue 29 item 4): adaptive ECE, debiased L2 and KS errors give one value under any row order.

The rule: the equal-mass bins never split a block of tied confidences (it goes whole to the bin where it begins,
as uncertainty-calibration's `get_equal_bins` has it), and the KS error reads its cumulative curves only where
the confidence changes. The reimplementations below follow the rule row by row, in loops.
"""

import calibration
import numpy as np
import pytest

from keras_ils import evaluation


def _tied(seed, n=400, k=3):
    """An over-confident float32 model's look: most confidences exactly 1.0, the rest from five values."""
    rng = np.random.default_rng(seed)
    top = rng.choice([1.0, 1.0, 1.0, 0.9, 0.75, 0.6, 0.55, 0.5], size=n)
    probs = np.zeros((n, k))
    prediction = rng.integers(0, k, n)
    probs[np.arange(n), prediction] = top
    probs[np.arange(n), (prediction + 1) % k] += 1 - top
    labels = np.where(rng.uniform(size=n) < top - 0.1, prediction, (prediction + 1) % k)
    return probs, labels


def _top_label(probs, labels):
    return probs.max(1), (probs.argmax(1) == labels).astype(float)


def _adaptive_ece_loop(probs, labels, num_bins):
    """Groups by rank (np.array_split of the sorted confidences); each distinct value joins its first row's group."""
    confidence, correct = _top_label(probs, labels)
    groups = np.array_split(np.sort(confidence), min(num_bins, len(confidence)))
    first_group = {}
    for g, members in enumerate(groups):
        for value in members:
            first_group.setdefault(value, g)
    total = 0.0
    for g in set(first_group.values()):
        members = [i for i in range(len(confidence)) if first_group[confidence[i]] == g]
        total += abs(correct[members].sum() - confidence[members].sum())
    return total / len(confidence)


def _ks_loop(probs, labels):
    """The largest |sum over confidence <= t of (correct - confidence)| / n, t over the distinct confidences."""
    confidence, correct = _top_label(probs, labels)
    return max(
        abs(sum(correct[i] - confidence[i] for i in range(len(confidence)) if confidence[i] <= t)) / len(confidence)
        for t in np.unique(confidence)
    )


def test_the_issues_example():
    probs = [[0.6, 0.4], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]]
    # the block of 0.9 is not split: one bin, accuracy 2/4 against mean confidence 0.825 (it gave 0.575 and 0.325)
    for labels in ([0, 0, 1, 1], [0, 1, 1, 0]):
        np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels, num_bins=2), 0.325, rtol=1e-12)
    # KS: the running gap after 0.6 is 0.4, after the whole 0.9 block 2 - 3.3 = -1.3; over 4 rows, 0.325 (read
    # after every row, the second order's -1.4 inside the block gave 0.35)
    for labels in ([0, 0, 1, 1], [0, 1, 1, 0]):
        np.testing.assert_allclose(evaluation.ks_calibration_error(probs, labels), 0.325, rtol=1e-12)


@pytest.mark.parametrize("num_bins", [1, 2, 7, 15])
@pytest.mark.parametrize("seed", [0, 1])
def test_values_against_loops_and_uncertainty_calibration(seed, num_bins):
    probs, labels = _tied(seed)
    got = evaluation.adaptive_ece(probs, labels, num_bins)
    np.testing.assert_allclose(got, _adaptive_ece_loop(probs, labels, num_bins), rtol=1e-12)
    np.testing.assert_allclose(got, calibration.get_ece_em(probs, labels, num_bins=num_bins), rtol=1e-12)
    want = calibration.lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=num_bins, mode="top-label")
    np.testing.assert_allclose(evaluation.debiased_calibration_error(probs, labels, num_bins), want, atol=1e-12)
    np.testing.assert_allclose(evaluation.ks_calibration_error(probs, labels), _ks_loop(probs, labels), rtol=1e-12)


def test_the_loops_see_the_ties():
    """The data do make a row-order rule differ: a stable sort's rank bins and every-row KS depend on the order."""
    probs, labels = _tied(0)
    confidence, correct = _top_label(probs, labels)
    assert (confidence == 1.0).mean() > 0.3
    by_rank = set()
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(len(labels))
        ranked = np.argsort(confidence[order], kind="stable")
        bins = np.array_split(ranked, 15)
        by_rank.add(round(sum(abs(correct[order][b].sum() - confidence[order][b].sum()) for b in bins), 12))
    assert len(by_rank) > 1


SCORES = {
    "adaptive_ece": lambda p, y: evaluation.adaptive_ece(p, y, num_bins=15),
    "adaptive_ece, 4 bins": lambda p, y: evaluation.adaptive_ece(p, y, num_bins=4),
    "debiased_calibration_error": evaluation.debiased_calibration_error,
    "ks_calibration_error": evaluation.ks_calibration_error,
}


@pytest.mark.parametrize("name", list(SCORES))
def test_one_value_under_any_row_order(name):
    probs, labels = _tied(2, n=600)
    want = SCORES[name](probs, labels)
    rng = np.random.default_rng(3)
    for _ in range(100):
        order = rng.permutation(len(labels))
        assert SCORES[name](probs[order], labels[order]) == want  # exactly: sorted values and integer counts


def test_the_columns_of_scores_too():
    probs, labels = _tied(4, n=300)
    want = evaluation.scores(probs, labels, from_logits=False)
    rng = np.random.default_rng(5)
    for _ in range(10):
        order = rng.permutation(len(labels))
        got = evaluation.scores(probs[order], labels[order], from_logits=False)
        for name in ("adaptive_ece", "debiased_calibration_error", "ks_calibration_error"):
            assert got[name] == want[name], name
