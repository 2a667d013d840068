"""Fitting the affine calibration maps of `keras_ils.calibration.maps` on validation outputs: `fit_affine`.

The objectives are convex; the fit is an L-BFGS in float64 numpy from the
identity map, to a gradient of `tolerance`. A fit that did not converge, whose
map separates the validation set, or whose map is extreme (a parameter beyond
`EXTREME_PARAMETER` in size) reports it (see `CalibratorFit.status`), and
`fit_calibrator` warns: none returns a map that overfits in silence.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, number_in, odir_refused
from keras_ils.calibration.maps import AFFINE_LAYERS, DEFAULT_ODIR
from keras_ils.calibration.reports import CalibratorFit

__all__ = ["EXTREME_PARAMETER", "METHODS", "fit_affine"]

METHODS = tuple(AFFINE_LAYERS)
EXTREME_PARAMETER = 100.0  # a scale of 100 is a temperature of 0.01, the end of temperature scaling's search


def _split(parameters, k, full):
    """`(kernel [K, K] or scale [K], bias [K])` of a flat parameter vector."""
    weights, bias = parameters[: k * k if full else k], parameters[k * k if full else k :]
    return (weights.reshape(k, k) if full else weights), bias


def _calibrated_logits(parameters, features, full):
    weights, bias = _split(parameters, features.shape[1], full)
    return (features @ weights if full else features * weights) + bias


def _objective(parameters, features, labels, full, off_diagonal_l2, intercept_l2):
    """`(objective, gradient, mean NLL)` of the affine map `parameters` on float64 `features [n, K]`."""
    n, k = features.shape
    weights, bias = _split(parameters, k, full)
    logits = _calibrated_logits(parameters, features, full)
    top = logits.max(axis=1, keepdims=True)
    exponentials = np.exp(logits - top)
    normaliser = exponentials.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    nll = float(np.mean(np.log(normaliser[:, 0]) + top[:, 0] - logits[rows, labels]))
    residual = exponentials / normaliser
    residual[rows, labels] -= 1.0
    residual /= n
    grad_bias = residual.sum(axis=0)
    if not full:
        return nll, np.concatenate([(features * residual).sum(axis=0), grad_bias]), nll
    off_diagonal = weights * (1.0 - np.eye(k))
    kernel_factor, bias_factor = off_diagonal_l2 / (k * (k - 1)), intercept_l2 / k
    objective = nll + kernel_factor * np.sum(off_diagonal**2) + bias_factor * np.sum(bias**2)
    grad_weights = features.T @ residual + 2.0 * kernel_factor * off_diagonal
    return objective, np.concatenate([grad_weights.ravel(), grad_bias + 2.0 * bias_factor * bias]), nll


def _standardised(function, features, full):
    """The fit in the coordinates of standardised features: `(function there, to parameters, from parameters)`.

    Two changes of coordinates that leave the optimum alone and make L-BFGS
    (not invariant to them) fast:

    - `(x - mean) / std` decorrelates the bias from the weights and equalises
      the features' scales (log-probabilities have means far from 0);
    - the gradient is projected onto the maps whose off-diagonal rows and
      bias sum to 0. Adding `u_i` to row `i` of the kernel and `c` to every
      bias adds the same number to every calibrated logit, which the softmax
      ignores: only ODIR's small terms curve the objective along those
      directions, and at the optimum their sums are 0 (for a zero ODIR weight
      any value is optimal, 0 included). The identity map starts there.
    """
    mean, std = features.mean(axis=0), features.std(axis=0)
    std = np.where(std > 1e-8 * (1.0 + np.abs(mean)), std, 1.0)  # a constant feature (up to rounding) stays
    k = len(mean)
    split = k * k if full else k
    # The constraints, in these coordinates: rows of disjoint support, so the projection is one at a time.
    # bias sum: sum_j b'_j - sum_i (mean_i / std_i) * (diagonal or scale)_i = 0
    bias_row = np.concatenate([(-mean / std * np.eye(k)).ravel() if full else -mean / std, np.ones(k)])
    off_diagonal = np.concatenate([(1.0 - np.eye(k)).ravel(), np.zeros(k)]) if full else None

    def project(gradient):
        gradient = gradient - bias_row * (bias_row @ gradient) / (bias_row @ bias_row)
        if full:  # kernel rows: sum_{j != i} W'_ij = 0
            rows = gradient[:split].reshape(k, k)
            sums = (rows * off_diagonal[:split].reshape(k, k)).sum(axis=1, keepdims=True)
            rows = rows - off_diagonal[:split].reshape(k, k) * sums / (k - 1)
            gradient = np.concatenate([rows.ravel(), gradient[split:]])
        return gradient

    def to_parameters(standard):
        weights, bias = standard[:split], standard[split:]
        if full:
            weights = weights.reshape(k, k) / std[:, None]
            return np.concatenate([weights.ravel(), bias - mean @ weights])
        weights = weights / std
        return np.concatenate([weights, bias - mean * weights])

    def from_parameters(parameters):
        weights, bias = parameters[:split], parameters[split:]
        if full:
            weights = weights.reshape(k, k)
            return np.concatenate([(weights * std[:, None]).ravel(), bias + mean @ weights])
        return np.concatenate([weights * std, bias + mean * weights])

    def standardised(standard):
        value, gradient = function(to_parameters(standard))[:2]
        grad_weights, grad_bias = gradient[:split], gradient[split:]
        if full:
            grad_weights = ((grad_weights.reshape(k, k) - np.outer(mean, grad_bias)) / std[:, None]).ravel()
        else:
            grad_weights = (grad_weights - mean * grad_bias) / std
        return value, project(np.concatenate([grad_weights, grad_bias]))

    return standardised, to_parameters, from_parameters


def _lbfgs(function, x, max_iterations, tolerance, memory=20):
    """Minimises a smooth convex `function(x) -> (value, gradient, ...)`: `(x, value, iterations, converged)`.

    L-BFGS (Nocedal & Wright 2006, Alg. 7.4) with a backtracking Armijo line
    search; a step that does not decrease the value ends the search, as
    converged when the gradient is within `sqrt(tolerance)` (rounding then
    limits the value, not the method).
    """
    value, gradient = function(x)[:2]
    steps, changes = [], []
    for iteration in range(max_iterations):
        if np.max(np.abs(gradient)) <= tolerance:
            return x, value, iteration, True
        direction = -gradient
        coefficients = []
        for s, y in reversed(list(zip(steps, changes, strict=True))):
            coefficient = (s @ direction) / (y @ s)
            direction = direction - coefficient * y
            coefficients.append(coefficient)
        if steps:
            direction *= (steps[-1] @ changes[-1]) / (changes[-1] @ changes[-1])
        for (s, y), coefficient in zip(zip(steps, changes, strict=True), reversed(coefficients), strict=True):
            direction = direction + s * (coefficient - (y @ direction) / (y @ s))
        slope = gradient @ direction
        if slope >= 0:  # not a descent direction: restart from the gradient
            steps, changes, direction, slope = [], [], -gradient, -(gradient @ gradient)
        step = 1.0 if steps else min(1.0, 1.0 / np.max(np.abs(gradient)))
        while True:
            candidate = x + step * direction
            new_value, new_gradient = function(candidate)[:2]
            if np.isfinite(new_value) and new_value <= value + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-20:
                return x, value, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        s, y = candidate - x, new_gradient - gradient
        if s @ y > 1e-12 * np.sqrt((s @ s) * (y @ y)):
            steps, changes = (steps + [s])[-memory:], (changes + [y])[-memory:]
        x, value, gradient = candidate, new_value, new_gradient
    return x, value, max_iterations, bool(np.max(np.abs(gradient)) <= tolerance)


def _diagnosis(method, parameters, features, labels, converged, iterations):
    """`(status, warning or None)` of a calibrator fit."""
    n = len(labels)
    largest = float(np.max(np.abs(parameters)))
    if not converged:
        return "not_converged", (
            f"Calibrator fit ({method}): L-BFGS did not converge in {iterations} iterations on {n} validation "
            f"examples (largest parameter {largest:.4g}); the map is the last iterate."
        )
    if np.all(_calibrated_logits(parameters, features, method != "vector").argmax(axis=1) == labels):
        return "separated", (
            f"Calibrator fit ({method}): the map classifies all {n} validation examples correctly, so their NLL "
            "keeps falling as the map sharpens and has no optimum that they pin down (ODIR alone, if any, bounds "
            "it); its probabilities will be over-confident. Use more validation data, stronger ODIR or "
            "temperature scaling, whose MAP fit is regularised."
        )
    if largest > EXTREME_PARAMETER:
        return "extreme", (
            f"Calibrator fit ({method}): a parameter of size {largest:.4g} (beyond {EXTREME_PARAMETER:g}): the "
            f"validation NLL of these {n} examples keeps falling as the map sharpens (they are nearly separable), "
            "so the map overfits them; use more validation data, stronger ODIR or temperature scaling."
        )
    return "fitted", None


def fit_affine(
    method: str,
    outputs,
    labels,
    *,
    from_logits: bool = True,
    off_diagonal_l2: float | None = None,
    intercept_l2: float | None = None,
    max_iterations: int = 1000,
    tolerance: float = 1e-8,
):
    """Fits `"vector"`, `"matrix"` or `"dirichlet"`: `(layer, CalibratorFit)`, without warning.

    Minimises the validation mean NLL (plus ODIR for `"matrix"` and
    `"dirichlet"`; see `keras_ils.calibration.maps`) by L-BFGS in float64,
    from the identity map, to a largest gradient entry of `tolerance` within
    `max_iterations`; `fit_calibrator` documents the arguments and warns.
    """
    if method not in METHODS:
        raise invalid("method", f"one of {METHODS}", method)
    full = method != "vector"
    if not full and (off_diagonal_l2 is not None or intercept_l2 is not None):
        raise odir_refused(method)
    integer_at_least("max_iterations", max_iterations, 1)
    tolerance = number_in("tolerance", tolerance, 0.0, low_open=True, expected="a float > 0")
    off_diagonal_l2 = (DEFAULT_ODIR if off_diagonal_l2 is None else off_diagonal_l2) if full else 0.0
    intercept_l2 = (DEFAULT_ODIR if intercept_l2 is None else intercept_l2) if full else 0.0
    odir = dict(off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2) if full else {}
    layer = AFFINE_LAYERS[method](**odir, from_logits=from_logits, trainable=False)  # checks the ODIR weights

    outputs, labels = _labels.outputs_and_labels(outputs, labels, name="outputs")
    if not from_logits:
        _labels.check_probabilities(outputs)
        features = np.log(np.clip(outputs, keras.config.epsilon(), 1.0))
    elif method == "dirichlet":
        shifted = outputs - outputs.max(axis=1, keepdims=True)
        features = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    else:
        features = outputs
    k = features.shape[1]
    objective = lambda p: _objective(p, features, labels, full, off_diagonal_l2, intercept_l2)  # noqa: E731
    standardised, to_parameters, from_parameters = _standardised(objective, features, full)
    start = from_parameters(np.concatenate([np.eye(k).ravel() if full else np.ones(k), np.zeros(k)]))
    found, _, iterations, converged = _lbfgs(standardised, start, max_iterations, tolerance)
    parameters = to_parameters(found)

    layer.build((None, k))
    weights = parameters[: k * k].reshape(k, k) if full else parameters[:k]
    layer.set_weights([weights, parameters[-k:]])
    status, message = _diagnosis(method, parameters, features, labels, converged, iterations)
    value, _, nll = objective(parameters)
    return layer, CalibratorFit(method, status, len(labels), float(nll), float(value), iterations, message)
