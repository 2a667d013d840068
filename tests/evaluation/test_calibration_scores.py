"""smooth_ece, debiased_calibration_error, ks_calibration_error and brier_decomposition against their references."""

import calibration
import numpy as np
import pytest
import relplot

from keras_ils import evaluation

import reference


def _predictions(seed, n=2000, k=4, scale=1.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * scale + 2.0 * np.eye(k)[labels]
    return reference.softmax(logits), labels


def _top_label(probs, labels):
    return probs.max(1), (probs.argmax(1) == labels).astype(float)


CASES = [(0, 2000, 4, 1.0), (1, 500, 3, 3.0), (2, 5000, 10, 0.5), (3, 60, 2, 2.0), (4, 9, 3, 1.0)]


@pytest.mark.parametrize("seed, n, k, scale", CASES)
def test_smooth_ece_equals_relplot(seed, n, k, scale):
    probs, labels = _predictions(seed, n, k, scale)
    want = relplot.smECE(*_top_label(probs, labels))
    np.testing.assert_allclose(evaluation.smooth_ece(probs, labels), want, atol=1e-4)


def test_smooth_ece_of_a_calibrated_and_of_an_overconfident_model():
    rng = np.random.default_rng(7)
    confidence = rng.uniform(0.5, 1.0, 5000)
    probs = np.stack([confidence, 1 - confidence], 1)
    calibrated = (rng.uniform(size=5000) > confidence).astype(int)  # label 0 with probability `confidence`
    overconfident = (rng.uniform(size=5000) > confidence - 0.2).astype(int)  # 20 points less often right
    assert evaluation.smooth_ece(probs, calibrated) < 0.02
    np.testing.assert_allclose(evaluation.smooth_ece(probs, overconfident), 0.2, atol=0.02)


@pytest.mark.parametrize("seed, n, k, scale", CASES)
def test_debiased_calibration_error_equals_uncertainty_calibration(seed, n, k, scale):
    probs, labels = _predictions(seed, n, k, scale)
    want = calibration.get_calibration_error(probs, labels, p=2, debias=True, mode="top-label")
    np.testing.assert_allclose(evaluation.debiased_calibration_error(probs, labels), want, atol=1e-6)


@pytest.mark.parametrize("num_bins", [1, 2, 7, 15, 40])
def test_debiased_calibration_error_num_bins(num_bins):
    probs, labels = _predictions(5, n=300)
    want = calibration.lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=num_bins, mode="top-label")
    got = evaluation.debiased_calibration_error(probs, labels, num_bins=num_bins)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_debiased_calibration_error_with_tied_confidences():
    rng = np.random.default_rng(2)
    confidence = rng.choice([0.55, 0.7, 0.85, 0.95], size=400)  # few values: ties straddle the equal-mass splits
    probs = np.stack([confidence, 1 - confidence], 1)
    labels = (rng.uniform(size=400) > confidence - 0.1).astype(int)
    want = calibration.lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=15, mode="top-label")
    np.testing.assert_allclose(evaluation.debiased_calibration_error(probs, labels), want, atol=1e-6)


def test_debiased_calibration_error_closed_form():
    """One bin: (conf - acc)^2 minus the accuracy's variance acc (1 - acc) / (m - 1), then the root (clipped at 0)."""
    probs = np.tile([0.9, 0.1], (10, 1))
    labels = np.array([0] * 5 + [1] * 5)  # accuracy 0.5 at confidence 0.9
    want = np.sqrt(0.4**2 - 0.5 * 0.5 / 9)
    np.testing.assert_allclose(evaluation.debiased_calibration_error(probs, labels, num_bins=1), want, rtol=1e-12)
    # accuracy 0.6 at confidence 0.8 over 5 rows: 0.04 - 0.24 / 4 < 0, clipped
    assert evaluation.debiased_calibration_error(np.tile([0.8, 0.2], (5, 1)), [0, 0, 0, 1, 1], num_bins=1) == 0.0


def _ks_loop(probs, labels):
    confidence, correct = _top_label(probs, labels)
    order = np.argsort(confidence, kind="stable")
    running, worst = 0.0, 0.0
    for i in order:
        running += (correct[i] - confidence[i]) / len(order)
        worst = max(worst, abs(running))
    return worst


@pytest.mark.parametrize("seed, n, k, scale", CASES)
def test_ks_calibration_error_against_a_loop(seed, n, k, scale):
    probs, labels = _predictions(seed, n, k, scale)
    np.testing.assert_allclose(evaluation.ks_calibration_error(probs, labels), _ks_loop(probs, labels), rtol=1e-12)


def test_ks_calibration_error_closed_form():
    # always right at confidence c: the running sum is (1 - c) * k / n, largest at the end
    probs = np.tile([0.7, 0.2, 0.1], (50, 1))
    np.testing.assert_allclose(evaluation.ks_calibration_error(probs, np.zeros(50, int)), 0.3, rtol=1e-12)
    # always wrong: the sums fall to -c
    np.testing.assert_allclose(evaluation.ks_calibration_error(probs, np.ones(50, int)), 0.7, rtol=1e-12)


class TestBrierDecomposition:
    @pytest.mark.parametrize("seed, n, k, scale", CASES)
    @pytest.mark.parametrize("num_bins", [1, 15, 50])
    def test_the_terms_sum_to_the_brier_score(self, seed, n, k, scale, num_bins):
        probs, labels = _predictions(seed, n, k, scale)
        terms = evaluation.brier_decomposition(probs, labels, num_bins=num_bins)
        np.testing.assert_allclose(terms.brier, reference.brier(probs, labels), rtol=1e-10)
        scores = evaluation.scores(probs, labels, from_logits=False)
        np.testing.assert_allclose(terms.brier, scores["brier"], rtol=1e-5)

    def test_closed_form(self):
        """Two forecasts, each constant in its bins: Murphy's three terms by hand, the within-bin terms 0.

        Rows: 10 x [0.9, 0.1] of which 8 are class 0, and 10 x [0.2, 0.8] of which 3 are class 0.
        Class 0: bins (f, o) = (0.9, 0.8) and (0.2, 0.3), overall frequency 0.55.
        Class 1: bins (0.1, 0.2) and (0.8, 0.7), overall 0.45.
        """
        probs = np.array([[0.9, 0.1]] * 10 + [[0.2, 0.8]] * 10)
        labels = np.array([0] * 8 + [1] * 2 + [0] * 3 + [1] * 7)
        terms = evaluation.brier_decomposition(probs, labels)
        reliability = 2 * (10 * 0.1**2 + 10 * 0.1**2) / 20
        resolution = 2 * (10 * 0.25**2 + 10 * 0.25**2) / 20
        uncertainty = 2 * 0.55 * 0.45
        np.testing.assert_allclose(
            terms, [reliability, resolution, uncertainty, 0.0, 0.0], atol=1e-12, err_msg=str(terms)
        )
        np.testing.assert_allclose(terms.brier, reference.brier(probs, labels), rtol=1e-12)

    def test_a_perfect_forecast_resolves_all_uncertainty(self):
        labels = np.array([0, 1, 2, 2, 1, 0, 0])
        terms = evaluation.brier_decomposition(np.eye(3)[labels], labels)
        np.testing.assert_allclose(terms.reliability, 0.0, atol=1e-12)
        np.testing.assert_allclose(terms.resolution, terms.uncertainty, rtol=1e-12)
        np.testing.assert_allclose(terms.brier, 0.0, atol=1e-12)


@pytest.mark.parametrize(
    "fn", [evaluation.smooth_ece, evaluation.debiased_calibration_error, evaluation.ks_calibration_error]
)
def test_shapes_are_checked(fn):
    with pytest.raises(ValueError, match="must have shapes"):
        fn(np.full((4, 2), 0.5), np.zeros(3, int))


@pytest.mark.parametrize("fn", [evaluation.debiased_calibration_error, evaluation.brier_decomposition])
def test_num_bins_checked(fn):
    with pytest.raises(ValueError, match="Invalid value for argument `num_bins`"):
        fn(np.full((4, 2), 0.5), np.zeros(4, int), num_bins=0)


class TestColumnsOfScores:
    """The three errors as columns of `scores`, `evaluate_outputs` (groups, bootstrap intervals) and the CSV."""

    @staticmethod
    def _logits(seed, n, k, scale):
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, k, n)
        return (rng.normal(size=(n, k)) * scale + 2.0 * np.eye(k)[labels]).astype(np.float32), labels

    @pytest.mark.parametrize("seed, n, k, scale", CASES[:4])
    def test_scores_equal_relplot_uncertainty_calibration_and_a_loop(self, seed, n, k, scale):
        logits, labels = self._logits(seed, n, k, scale)
        probs = reference.softmax(logits)
        result = evaluation.scores(logits, labels)
        assert tuple(result)[-5:-2] == ("smooth_ece", "debiased_calibration_error", "ks_calibration_error")
        assert tuple(result)[-2:] == ("aurc", "augrc")
        errors = (probs.argmax(axis=1) != labels)[np.argsort(-probs.max(axis=1), kind="stable")]
        risks = np.cumsum(errors) / np.arange(1, n + 1)  # no ties in continuous logits: one point per example
        generalized = np.cumsum(errors) / n
        np.testing.assert_allclose(result["aurc"], np.sum(risks + np.append(risks[0], risks[:-1])) / (2 * n), atol=1e-6)
        np.testing.assert_allclose(
            result["augrc"], np.sum(generalized + np.append(0, generalized[:-1])) / (2 * n), atol=1e-6
        )
        np.testing.assert_allclose(result["smooth_ece"], relplot.smECE(*_top_label(probs, labels)), atol=1e-4)
        want = calibration.get_calibration_error(probs, labels, p=2, debias=True, mode="top-label")
        np.testing.assert_allclose(result["debiased_calibration_error"], want, atol=1e-5)
        np.testing.assert_allclose(result["ks_calibration_error"], _ks_loop(probs, labels), atol=1e-6)

    def test_groups_and_intervals_against_relplot_on_the_same_resamples(self):
        logits, labels = self._logits(6, 400, 3, 2.0)
        mask = np.arange(400) % 3 == 0
        result = evaluation.evaluate_outputs(logits, labels, groups={"g": mask}, confidence=0.8, bootstrap=20, seed=4)
        probs = reference.softmax(logits)
        smece = lambda p, y: relplot.smECE(*_top_label(p, y))  # noqa: E731
        np.testing.assert_allclose(result["g"]["smooth_ece"], smece(probs[mask], labels[mask]), atol=1e-4)
        rng, draws = np.random.default_rng(4), []  # resample b: the b-th integers(0, n, n) of default_rng(seed)
        for _ in range(20):
            index = rng.integers(0, 400, 400)
            draws.append(smece(probs[index], labels[index]))
        interval = result["all"]["intervals"]["smooth_ece"]
        assert interval.value == result["all"]["smooth_ece"]
        np.testing.assert_allclose(interval[1:], np.percentile(draws, [10, 90]), atol=1e-4)

    def test_paired_difference_has_them(self):
        logits, labels = self._logits(7, 300, 3, 1.0)
        difference = evaluation.paired_difference(logits, 3.0 * logits, labels, bootstrap=10)
        want = relplot.smECE(*_top_label(reference.softmax(logits), labels))
        want -= relplot.smECE(*_top_label(reference.softmax(3.0 * logits), labels))
        np.testing.assert_allclose(difference["smooth_ece"].value, want, atol=2e-4)
