"""Selective classification: a classifier that abstains below a confidence threshold, scored over every threshold.

Re-exported by `keras_ils.evaluation`, the address to use.

A model that predicts only when its confidence reaches a threshold `t`
trades coverage (the fraction of examples it predicts on) against risk (its
error rate among them). Every distinct confidence is a threshold, so the
risk-coverage curve has one point per distinct confidence; examples of tied
confidence are accepted or refused together, which makes every score here
independent of the examples' order. The loss is the 0/1 error of the top
prediction, and the confidence the top probability `max_j p_j` unless another
is given (a larger value meaning more confident).

| score               | what it is                                                        |
|---------------------|-------------------------------------------------------------------|
| `risk_coverage_curve` | the curve's points, `(coverage, selective risk, threshold)`     |
| `aurc`              | area under the selective risk (Geifman et al. 2019)               |
| `augrc`             | area under the generalized risk, errors accepted / n (Traub et al. 2024) |
| `risk_at_coverage`  | the selective risk of the most confident fraction                 |

The areas integrate the curve's points by the trapezoid rule, from coverage
0 (where the selective risk is that of the most confident threshold and the
generalized risk is 0) to 1, as Traub et al.'s reference code does; within a
tie group the generalized risk then grows linearly, which is its expectation
when ties are broken at random. Without ties, AUGRC is
`sum_k (G_{k-1} + G_k) / (2 n)` over the `n` examples in order of confidence.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils._checks import number_in
from keras_ils.evaluation import _inputs

__all__ = ["RiskCoverageCurve", "augrc", "aurc", "risk_at_coverage", "risk_coverage_curve"]


class RiskCoverageCurve(NamedTuple):
    """The points of a risk-coverage curve, one per distinct confidence, by increasing coverage.

    Attributes:
        coverages: `[m]` the fraction of examples whose confidence is at
            least the threshold.
        risks: `[m]` the error rate among them (the selective risk).
        generalized_risks: `[m]` the errors among them over all examples
            (Traub et al.'s generalized risk, `coverage * risk`).
        thresholds: `[m]` the confidences, decreasing.
    """

    coverages: np.ndarray
    risks: np.ndarray
    generalized_risks: np.ndarray
    thresholds: np.ndarray


def _confidence_and_errors(outputs, labels, from_logits, confidence) -> tuple:
    """`(confidence [n] float64, errors [n] float64)`, checked: the top probability (or `confidence`) and 0/1 errors."""
    outputs = _inputs.checked_outputs(outputs, from_logits)
    labels = _inputs.checked_label_rows(labels, outputs.shape)
    errors = (outputs.argmax(axis=1) != labels).astype(np.float64)
    if confidence is None:
        top = outputs.max(axis=1)
        if from_logits:
            top = 1.0 / np.exp(outputs - top[:, None]).sum(axis=1, dtype=np.float64)
        return top.astype(np.float64), errors
    confidence = np.asarray(confidence, dtype=np.float64)
    if confidence.shape != (len(labels),) or not np.all(np.isfinite(confidence)):
        raise ValueError(
            f"Invalid value for argument `confidence`. Expected {len(labels)} finite values, one per example. "
            f"Received: an array of shape {confidence.shape}"
            + ("" if confidence.shape != (len(labels),) else " with NaN or infinite values")
        )
    return confidence, errors


def curve_of(confidence, errors) -> RiskCoverageCurve:
    """The curve of checked `confidence [n]` and 0/1 `errors [n]` (what `evaluate`'s AURC and AUGRC columns read)."""
    order = np.argsort(-confidence, kind="stable")
    confidence, errors = confidence[order], errors[order]
    n = len(errors)
    last = np.flatnonzero(np.append(confidence[1:] != confidence[:-1], True))  # the last example of each tie group
    accepted = last + 1.0
    wrong = np.cumsum(errors)[last]
    return RiskCoverageCurve(accepted / n, wrong / accepted, wrong / n, confidence[last])


def area_under_risk(curve: RiskCoverageCurve) -> float:
    """AURC of a curve: the trapezoid rule from coverage 0, where the risk is the first point's."""
    return _trapezoid(curve.coverages, curve.risks, curve.risks[0])


def area_under_generalized_risk(curve: RiskCoverageCurve) -> float:
    """AUGRC of a curve: the trapezoid rule from `(0, 0)`."""
    return _trapezoid(curve.coverages, curve.generalized_risks, 0.0)


def risk_coverage_curve(outputs, labels, *, from_logits: bool = True, confidence=None) -> RiskCoverageCurve:
    """The risk-coverage curve of a classifier that abstains below each confidence threshold.

    Formula:

    ```
    coverage(t) = #{i : c_i >= t} / n
    risk(t) = #{i : c_i >= t, wrong_i} / #{i : c_i >= t}
    generalized_risk(t) = #{i : c_i >= t, wrong_i} / n
    ```

    at every distinct confidence `t`, so tied confidences enter together.

    Args:
        outputs: `[n, K]` logits (probabilities with `from_logits=False`).
        labels: the true classes, any `y_true` form.
        from_logits: whether `outputs` are logits. Defaults to `True`.
        confidence: `[n]` confidences to rank the examples by (larger: more
            confident), or `None` for the top probability. Defaults to `None`.

    Returns:
        A `RiskCoverageCurve` of numpy arrays.

    Example:

    >>> p = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> curve = risk_coverage_curve(p, [0, 1, 1, 1], from_logits=False)   # wrong at 0.8 and 0.6
    >>> curve.coverages.tolist(), curve.risks.round(4).tolist()
    ([0.25, 0.5, 0.75, 1.0], [0.0, 0.5, 0.3333, 0.5])
    """
    return curve_of(*_confidence_and_errors(outputs, labels, from_logits, confidence))


def _trapezoid(coverages, risks, at_zero) -> float:
    x = np.concatenate([[0.0], coverages])
    y = np.concatenate([[at_zero], risks])
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))


def aurc(outputs, labels, *, from_logits: bool = True, confidence=None) -> float:
    """Area under the risk-coverage curve: the selective risk averaged over coverage (lower is better).

    The trapezoid rule over `risk_coverage_curve`'s points, from coverage 0
    (where the risk is the first point's) to 1. Without ties it is
    `sum_k (R_{k-1} + R_k) / (2 n)`, `R_k` the error rate of the `k` most
    confident examples and `R_0 = R_1`. Arguments as `risk_coverage_curve`.

    Example:

    >>> p = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(aurc(p, [0, 1, 1, 1], from_logits=False), 4)   # risks 0, 1/2, 1/3, 1/2 at coverage 1/4 ... 1
    0.2708

    References:
        Geifman, Uziel & El-Yaniv (2019), "Bias-Reduced Uncertainty
        Estimation for Deep Neural Classifiers", ICLR.
    """
    return area_under_risk(risk_coverage_curve(outputs, labels, from_logits=from_logits, confidence=confidence))


def augrc(outputs, labels, *, from_logits: bool = True, confidence=None) -> float:
    """Area under the generalized risk-coverage curve (lower is better).

    The generalized risk of a threshold is the fraction of all examples that
    are accepted and wrong; its area is the risk of an undetected failure,
    averaged over the thresholds, and unlike AURC it does not reward a model
    for being wrong more often where it abstains anyway. The trapezoid rule
    over `risk_coverage_curve`'s points, from `(0, 0)` to coverage 1.
    Arguments as `risk_coverage_curve`.

    Example:

    >>> p = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(augrc(p, [0, 1, 1, 1], from_logits=False), 4)   # generalized risks 0, 1/4, 1/4, 1/2
    0.1875

    References:
        Traub et al. (2024), "Overcoming Common Flaws in the Evaluation of
        Selective Classification Systems", NeurIPS.
    """
    return area_under_generalized_risk(
        risk_coverage_curve(outputs, labels, from_logits=from_logits, confidence=confidence)
    )


def risk_at_coverage(outputs, labels, coverage: float, *, from_logits: bool = True, confidence=None) -> float:
    """The error rate of the model on the most confident fraction `coverage` of the examples.

    The first point of `risk_coverage_curve` whose coverage reaches
    `coverage`: whole tie groups are accepted, so the coverage used may
    exceed the one asked for.

    Args:
        outputs: `[n, K]` logits (probabilities with `from_logits=False`).
        labels: the true classes, any `y_true` form.
        coverage: the fraction of examples to predict on, in `(0, 1]`.
        from_logits: whether `outputs` are logits. Defaults to `True`.
        confidence: `[n]` confidences, or `None` for the top probability.
            Defaults to `None`.

    Returns:
        The selective risk, a float.

    Example:

    >>> p = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> risk_at_coverage(p, [0, 1, 1, 1], 0.5, from_logits=False)   # the two most confident: one wrong
    0.5
    """
    coverage = number_in("coverage", coverage, 0.0, 1.0, low_open=True, expected="a float in (0, 1]")
    curve = risk_coverage_curve(outputs, labels, from_logits=from_logits, confidence=confidence)
    index = np.searchsorted(curve.coverages, coverage - 1e-12, side="left")
    return float(curve.risks[min(index, len(curve.risks) - 1)])
