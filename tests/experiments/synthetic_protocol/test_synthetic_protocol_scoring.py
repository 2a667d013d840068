import numpy as np
import pytest

from keras_ils_experiments.synthetic_protocol import scoring

import reference


@pytest.mark.parametrize("seed", [0, 1])
def test_scores_against_reference_and_the_dense_and_sparse_accuracies(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, 3000)
    logits = (rng.normal(size=(3000, 3)) * (1 + seed) + 2 * np.eye(3)[labels]).astype(np.float32)
    dense = rng.random(3000) < 0.8
    result = scoring.scores(logits, labels, dense)
    assert tuple(result) == scoring.METRICS
    probs = reference.softmax(logits)
    correct = probs.argmax(1) == labels
    assert result["accuracy"] == correct.mean()
    assert result["accuracy_dense"] == correct[dense].mean() and result["accuracy_sparse"] == correct[~dense].mean()
    np.testing.assert_allclose(result["nll"], reference.nll(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, labels), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, labels), rtol=1e-4, atol=1e-7)
    expected = reference.class_conditional_ece(probs, labels)
    np.testing.assert_allclose(result["class_conditional_ece"], expected, rtol=1e-4)


def test_empty_curves_hold_one_set_of_sums_per_teacher_and_instances():
    curves = scoring.empty_curves(num_students=3)
    assert sorted(curves) == ["bayes/test", "bayes/train", "no_ls_temps/test", "no_ls_temps/train"]
    assert curves["bayes/train"]["student_sum"].shape == (3, scoring.CURVE_BINS)
    assert not any(np.any(v) for curve in curves.values() for v in curve.values())
