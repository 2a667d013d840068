"""Every public numpy score refuses bad inputs at the door, with a ValueError naming the argument (issue 29 item 2)."""

import numpy as np
import pytest

from keras_ils import evaluation

GOOD = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.4, 0.1]])
LABELS = np.array([0, 1, 2, 1])
NEGATIVE = np.array([[-0.1, 0.9, 0.2], *GOOD[1:]])  # rows sum to 1, one value below 0

# the functions of `probabilities [n, K]` and `labels [n]`
PROBABILITY_SCORES = {
    "adaptive_ece": evaluation.adaptive_ece,
    "smooth_ece": evaluation.smooth_ece,
    "debiased_calibration_error": evaluation.debiased_calibration_error,
    "ks_calibration_error": evaluation.ks_calibration_error,
    "brier_decomposition": evaluation.brier_decomposition,
    "top_label_bins": evaluation.top_label_bins,
}
# the functions of `outputs [..., K]` (logits, or probabilities with from_logits=False), with the argument they name
OUTPUT_SCORES = {
    "scores": (evaluation.scores, "outputs"),
    "evaluate_outputs": (evaluation.evaluate_outputs, "outputs"),
    "paired_difference": (lambda o, y, **kw: evaluation.paired_difference(o, o, y, bootstrap=1, **kw), "outputs_a"),
    "probabilities": (lambda o, y, **kw: evaluation.probabilities(o, **kw), "outputs"),
    "risk_coverage_curve": (evaluation.risk_coverage_curve, "outputs"),
    "aurc": (evaluation.aurc, "outputs"),
    "augrc": (evaluation.augrc, "outputs"),
    "risk_at_coverage": (lambda o, y, **kw: evaluation.risk_at_coverage(o, y, 0.5, **kw), "outputs"),
}
# evaluate: tests/test_evaluation.py
NOT_SCORES = {"BrierDecomposition", "COLUMNS", "Interval", "RiskCoverageCurve", "evaluate"}


def test_every_public_score_is_in_the_matrix():
    assert set(evaluation.__all__) == NOT_SCORES | set(PROBABILITY_SCORES) | set(OUTPUT_SCORES)


BAD_PROBABILITIES = {  # name: (probabilities, labels, argument named, words of the message)
    "rows summing to 2": (2 * GOOD, LABELS, "probabilities", "rows sum to 1"),
    "logits": (np.log(GOOD), LABELS, "probabilities", "Expected probabilities"),
    "a negative probability": (NEGATIVE, LABELS, "probabilities", r"values in \[-0.1, 0.9\]"),
    "NaN": (np.where(GOOD == 0.8, np.nan, GOOD), LABELS, "probabilities", "finite"),
    "infinity": (np.where(GOOD == 0.8, np.inf, GOOD), LABELS, "probabilities", "finite"),
    "no examples": (np.zeros((0, 3)), np.zeros(0, int), "probabilities", "at least one example"),
    "one class": (np.ones((4, 1)), np.zeros(4, int), "probabilities", "K >= 2"),
    "a vector": (GOOD[:, 0], LABELS, "probabilities", r"shape \[n, K\]"),
    "label 13 of 3": (GOOD, [0, 1, 13, 1], "labels", r"in \[0, 3\)"),
    "label -1": (GOOD, [0, -1, 2, 1], "labels", r"in \[0, 3\)"),
    "label 5 of 3": (GOOD, [0, 5, 2, 1], "labels", r"in \[0, 3\)"),
    "label 1.5": (GOOD, [0, 1.5, 2, 1], "labels", "whole numbers"),
    "too few labels": (GOOD, LABELS[:3], "labels", "one label per row"),
    "one-hot labels": (GOOD, np.eye(3)[LABELS], "labels", "one label per row"),
}


@pytest.mark.parametrize("case", list(BAD_PROBABILITIES))
@pytest.mark.parametrize("name", list(PROBABILITY_SCORES))
def test_probability_scores_refuse(name, case):
    probabilities, labels, argument, words = BAD_PROBABILITIES[case]
    with pytest.raises(ValueError, match=f"`{argument}`.*{words}"):
        PROBABILITY_SCORES[name](probabilities, labels)


LOGITS = np.log(GOOD) + 0.5
BAD_OUTPUTS = {  # name: (outputs, labels, from_logits, argument named or None for the outputs', words)
    "one NaN logit": (np.where(GOOD == 0.8, np.nan, LOGITS), LABELS, True, None, "finite"),
    "an infinite logit": (np.where(GOOD == 0.8, -np.inf, LOGITS), LABELS, True, None, "finite"),
    "no examples": (np.zeros((0, 3)), np.zeros(0, int), True, None, "at least one example"),
    "probabilities declared logits": (GOOD, LABELS, True, None, "Pass `from_logits=False`"),
    "logits declared probabilities": (LOGITS, LABELS, False, None, "Pass `from_logits=True`"),
    "rows summing to 2 declared probabilities": (2 * GOOD, LABELS, False, None, "Pass `from_logits=True`"),
    "label 3 of 3": (LOGITS, [0, 1, 3, 1], True, "labels", r"in \[0, 3\)"),
    "label -1": (LOGITS, [0, -1, 2, 1], True, "labels", r"in \[0, 3\)"),
    "too few labels": (LOGITS, LABELS[:3], True, "labels", "one prediction per label"),
}


@pytest.mark.parametrize("case", list(BAD_OUTPUTS))
@pytest.mark.parametrize("name", list(OUTPUT_SCORES))
def test_output_scores_refuse(name, case):
    outputs, labels, from_logits, argument, words = BAD_OUTPUTS[case]
    fn, outputs_argument = OUTPUT_SCORES[name]
    if name == "probabilities" and argument == "labels":
        pytest.skip("probabilities reads no labels")
    with pytest.raises(ValueError, match=f"`{argument or outputs_argument}`.*{words}"):
        fn(outputs, labels, from_logits=from_logits)


@pytest.mark.parametrize("name", list(OUTPUT_SCORES))
def test_from_logits_must_be_a_bool(name):
    with pytest.raises(TypeError, match="`from_logits` must be True or False"):
        OUTPUT_SCORES[name][0](LOGITS, LABELS, from_logits=None)


def test_the_issues_examples():
    """The inputs issue 29 found accepted: each is now a ValueError naming the argument."""
    cases = [
        (lambda: evaluation.smooth_ece(2 * GOOD, LABELS), "probabilities"),
        (lambda: evaluation.smooth_ece(np.log(GOOD), LABELS), "probabilities"),
        (lambda: evaluation.smooth_ece(np.zeros((0, 3)), np.zeros(0, int)), "probabilities"),  # was 0.0
        (lambda: evaluation.ks_calibration_error([[-0.2, 1.2], [0.5, 0.5]], [0, 1]), "probabilities"),
        (lambda: evaluation.debiased_calibration_error([[np.nan, 1.0], [0.5, 0.5]], [0, 1]), "probabilities"),
        (lambda: evaluation.adaptive_ece(GOOD, [0, 1, 13, 1]), "labels"),
        (lambda: evaluation.brier_decomposition(GOOD, [0, -1, 2, 1]), "labels"),
        (lambda: evaluation.brier_decomposition(GOOD, [0, 5, 2, 1]), "labels"),  # was a bare IndexError
        (lambda: evaluation.scores(np.zeros((0, 3)), np.zeros(0, int)), "outputs"),  # was NaN beside ECE 0.0
        (lambda: evaluation.scores(np.where(GOOD == 0.8, np.nan, LOGITS), LABELS), "outputs"),  # was finite
    ]
    for fn, argument in cases:
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
            fn()


def test_good_inputs_of_other_forms_pass():
    """Float labels holding whole numbers, booleans, float32 and integer probabilities, tensors: accepted."""
    import keras

    want = evaluation.adaptive_ece(GOOD, LABELS)
    assert evaluation.adaptive_ece(GOOD, LABELS.astype(np.float32)) == want
    tensors = keras.ops.convert_to_tensor(GOOD), keras.ops.convert_to_tensor(LABELS)
    np.testing.assert_allclose(evaluation.adaptive_ece(*tensors), want, rtol=1e-6)
    np.testing.assert_allclose(evaluation.adaptive_ece(GOOD.astype(np.float32), LABELS), want, rtol=1e-6)
    assert evaluation.ks_calibration_error(np.eye(2, dtype=int), [True, False]) == 1.0  # always wrong at 1.0
    # probabilities within the tolerance (bfloat16 rounding): accepted
    assert evaluation.smooth_ece(GOOD * 1.004, LABELS) >= 0
