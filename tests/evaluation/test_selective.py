"""Selective classification scores, each against its formula written here in numpy."""

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

from keras_ils.evaluation._selective import augrc, aurc, risk_at_coverage, risk_coverage_curve


def _task(rng, n=400, k=4, ties=False):
    logits = 2.0 * rng.normal(size=(n, k))
    if ties:  # a tenth of the logits' precision: many rows share their top probability
        logits = np.round(logits, 1)
    labels = (rng.random((n, 1)) < softmax(logits / 2.0, axis=1).cumsum(axis=1)).argmax(axis=1)
    return logits, labels


def _confidence_and_errors(logits, labels):
    p = softmax(logits, axis=1)
    return p.max(axis=1), (p.argmax(axis=1) != labels).astype(float)


def _points(confidence, errors):
    """Every distinct threshold, brute force: `(coverage, selective risk, generalized risk)` by increasing coverage."""
    rows = []
    for t in np.unique(confidence)[::-1]:
        accepted = confidence >= t
        rows.append((accepted.mean(), errors[accepted].mean(), errors[accepted].sum() / len(errors)))
    return np.array(rows).T


class TestCurve:
    @pytest.mark.parametrize("ties", [False, True])
    def test_points_by_brute_force(self, rng, ties):
        logits, labels = _task(rng, ties=ties)
        curve = risk_coverage_curve(logits, labels)
        coverages, risks, generalized = _points(*_confidence_and_errors(logits, labels))
        np.testing.assert_allclose(curve.coverages, coverages)
        np.testing.assert_allclose(curve.risks, risks)
        np.testing.assert_allclose(curve.generalized_risks, generalized)
        assert np.all(np.diff(curve.thresholds) < 0)
        assert (len(curve.coverages) < 400) == ties

    def test_probabilities_and_custom_confidence(self, rng):
        logits, labels = _task(rng)
        p = softmax(logits, axis=1)
        a = risk_coverage_curve(logits, labels)
        b = risk_coverage_curve(p, labels, from_logits=False)
        np.testing.assert_allclose(a.risks, b.risks)
        margin = np.sort(p, axis=1)[:, -1] - np.sort(p, axis=1)[:, -2]
        custom = risk_coverage_curve(logits, labels, confidence=margin)
        np.testing.assert_allclose(custom.risks, _points(margin, _confidence_and_errors(logits, labels)[1])[1])


class TestAreas:
    def test_aurc_without_ties(self, rng):
        logits, labels = _task(rng)
        confidence, errors = _confidence_and_errors(logits, labels)
        order = np.argsort(-confidence)
        n = len(errors)
        r = np.cumsum(errors[order]) / np.arange(1, n + 1)  # R_k, the error rate of the k most confident
        r0 = np.concatenate([[r[0]], r])
        expected = np.sum((r0[:-1] + r0[1:]) / 2) / n
        assert aurc(logits, labels) == pytest.approx(expected, rel=1e-12)

    def test_augrc_without_ties(self, rng):
        logits, labels = _task(rng)
        confidence, errors = _confidence_and_errors(logits, labels)
        n = len(errors)
        g = np.concatenate([[0.0], np.cumsum(errors[np.argsort(-confidence)]) / n])  # G_k, errors accepted / n
        assert augrc(logits, labels) == pytest.approx(np.sum((g[:-1] + g[1:]) / 2) / n, rel=1e-12)

    @pytest.mark.parametrize("ties", [False, True])
    def test_augrc_by_the_failure_auroc(self, rng, ties):
        """Traub et al. (2024), for 0/1 errors: AUGRC = (1 - AUROC_f) acc (1 - acc) + (1 - acc)^2 / 2.

        AUROC_f is the probability that a correct prediction is more confident
        than a wrong one, ties counting half (scikit-learn's AUROC): the
        trapezoid over tie groups is that expectation.
        """
        logits, labels = _task(rng, ties=ties)
        confidence, errors = _confidence_and_errors(logits, labels)
        accuracy = 1 - errors.mean()
        auroc = roc_auc_score(1 - errors, confidence)
        expected = (1 - auroc) * accuracy * (1 - accuracy) + 0.5 * (1 - accuracy) ** 2
        assert augrc(logits, labels) == pytest.approx(expected, rel=1e-10)

    def test_aurc_with_ties_is_the_trapezoid_of_the_points(self, rng):
        logits, labels = _task(rng, ties=True)
        coverages, risks, _ = _points(*_confidence_and_errors(logits, labels))
        x, y = np.concatenate([[0.0], coverages]), np.concatenate([[risks[0]], risks])
        assert aurc(logits, labels) == pytest.approx(np.trapezoid(y, x), rel=1e-12)

    def test_a_perfect_ranking_and_a_reversed_one(self):
        p = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])
        right_first, wrong_first = np.array([0, 0, 1, 1]), np.array([1, 1, 0, 0])
        assert augrc(p, right_first, from_logits=False) < augrc(p, wrong_first, from_logits=False)
        assert aurc(p, right_first, from_logits=False) < aurc(p, wrong_first, from_logits=False)
        assert risk_at_coverage(p, right_first, 0.5, from_logits=False) == 0.0

    @pytest.mark.parametrize("score", [aurc, augrc])
    def test_order_of_the_examples_never_matters(self, rng, score):
        logits, labels = _task(rng, ties=True)
        values = [score(logits[o], labels[o]) for o in [np.arange(400), rng.permutation(400), np.arange(400)[::-1]]]
        np.testing.assert_allclose(values, values[0], rtol=1e-13)


class TestRiskAtCoverage:
    @pytest.mark.parametrize("ties", [False, True])
    @pytest.mark.parametrize("coverage", [0.1, 0.25, 0.5, 0.8, 1.0])
    def test_the_first_whole_group_reaching_the_coverage(self, rng, ties, coverage):
        logits, labels = _task(rng, ties=ties)
        confidence, errors = _confidence_and_errors(logits, labels)
        for t in np.unique(confidence)[::-1]:  # the most confident threshold whose acceptance reaches it
            accepted = confidence >= t
            if accepted.mean() >= coverage - 1e-12:
                break
        assert risk_at_coverage(logits, labels, coverage) == pytest.approx(errors[accepted].mean())

    def test_order_of_tied_examples_never_matters(self):
        p = np.array([[0.9, 0.1], [0.7, 0.3], [0.7, 0.3], [0.6, 0.4]])
        labels = np.array([0, 0, 1, 1])
        a = risk_at_coverage(p, labels, 0.5, from_logits=False)
        b = risk_at_coverage(p[[0, 2, 1, 3]], labels[[0, 2, 1, 3]], 0.5, from_logits=False)
        assert a == b == pytest.approx(1 / 3)  # both 0.7s enter: coverage 3/4, one of three wrong


class TestErrors:
    @pytest.mark.parametrize("coverage", [0.0, 1.5, -0.2, float("nan")])
    def test_bad_coverage(self, rng, coverage):
        logits, labels = _task(rng, n=20)
        with pytest.raises(ValueError, match="Invalid value for argument `coverage`"):
            risk_at_coverage(logits, labels, coverage)

    @pytest.mark.parametrize("confidence", [np.zeros(19), np.full(20, np.nan), np.zeros((20, 2))])
    def test_bad_confidence(self, rng, confidence):
        logits, labels = _task(rng, n=20)
        with pytest.raises(ValueError, match="Invalid value for argument `confidence`"):
            aurc(logits, labels, confidence=confidence)

    def test_bad_outputs(self, rng):
        logits, labels = _task(rng, n=20)
        with pytest.raises(ValueError, match=r"`outputs`. Expected at least one example"):
            augrc(logits[:0], labels[:0])
        with pytest.raises(ValueError, match="one prediction per label"):
            augrc(logits, labels[:-1])
        with pytest.raises(ValueError, match="declared as logits"):
            aurc(softmax(logits, axis=1), labels)
        with pytest.raises(ValueError, match="declared as probabilities"):
            aurc(logits, labels, from_logits=False)
