"""The optimisers of the affine calibration maps (`keras_ils.calibration.maps`): `minimise` and `newton`.

The objectives are convex: the validation mean NLL of the map plus a
`Penalty` (ODIR, or the small-data prior centred on temperature scaling's
map). `minimise` is an L-BFGS in float64 numpy from the identity map, to a
gradient of `tolerance`; `newton` is Newton's method for the strictly convex
prior objective. `_diagnosis` says whether a fitted map did not converge,
separates the validation set or is extreme (a parameter beyond
`EXTREME_PARAMETER` in size). `keras_ils.calibration.affine_fit` chooses
what to fit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils.calibration.maps import AFFINE_LAYERS

__all__ = ["EXTREME_PARAMETER", "METHODS", "Penalty", "minimise", "newton"]

METHODS = tuple(AFFINE_LAYERS)
EXTREME_PARAMETER = 100.0  # a scale of 100 is a temperature of 0.01, the end of temperature scaling's search


def _split(parameters, k, full):
    """`(kernel [K, K] or scale [K], bias [K])` of a flat parameter vector."""
    weights, bias = parameters[: k * k if full else k], parameters[k * k if full else k :]
    return (weights.reshape(k, k) if full else weights), bias


def _calibrated_logits(parameters, features, full):
    weights, bias = _split(parameters, features.shape[1], full)
    return (features @ weights if full else features * weights) + bias


def _separates(parameters, features, labels, full) -> bool:
    """Whether the map classifies every example correctly (then the NLL keeps falling as the map sharpens)."""
    return bool(np.all(_calibrated_logits(parameters, features, full).argmax(axis=1) == labels))


class Penalty(NamedTuple):
    """The fit's penalty: `off_diagonal * sum_{i != j} W_ij^2 + diagonal * sum_i (W_ii - centre)^2 + intercept * |b|^2`.

    `W` is the kernel (vector scaling: its scale is the diagonal, and it has
    no off-diagonal). ODIR is `Penalty(off_diagonal_l2 / (K (K - 1)), 0,
    intercept_l2 / K)`; the small-data prior centred on temperature scaling's
    map `beta * I` is `Penalty(p, p, p, beta)`, `p = precision / (2 n)`.
    """

    off_diagonal: float = 0.0
    diagonal: float = 0.0
    intercept: float = 0.0
    centre: float = 0.0


def _objective(parameters, features, labels, full, penalty):
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
    grad_bias = residual.sum(axis=0) + 2.0 * penalty.intercept * bias
    diagonal = (np.diag(weights) if full else weights) - penalty.centre
    objective = nll + penalty.diagonal * np.sum(diagonal**2) + penalty.intercept * np.sum(bias**2)
    if not full:
        grad_scale = (features * residual).sum(axis=0) + 2.0 * penalty.diagonal * diagonal
        return objective, np.concatenate([grad_scale, grad_bias]), nll
    off_diagonal = weights * (1.0 - np.eye(k))
    objective += penalty.off_diagonal * np.sum(off_diagonal**2)
    grad_weights = features.T @ residual + 2.0 * penalty.off_diagonal * off_diagonal
    grad_weights += 2.0 * penalty.diagonal * np.diag(diagonal)
    return objective, np.concatenate([grad_weights.ravel(), grad_bias]), nll


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
    if _separates(parameters, features, labels, method != "vector"):
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


def minimise(features, labels, full, penalty, start, max_iterations, tolerance):
    """`(parameters, objective, mean NLL, iterations, converged)` of the ODIR-penalised fit from `start` (L-BFGS)."""
    objective = lambda p: _objective(p, features, labels, full, penalty)  # noqa: E731
    standardised, to_parameters, from_parameters = _standardised(objective, features, full)
    found, _, iterations, converged = _lbfgs(standardised, from_parameters(start), max_iterations, tolerance)
    parameters = to_parameters(found)
    value, _, nll = objective(parameters)
    return parameters, float(value), float(nll), iterations, converged


def _hessian(parameters, features, full, penalty):
    """The objective's Hessian in `parameters` (kernel or scale first, then bias), `[P, P]`.

    Per example the NLL's Hessian in the logits is `diag(p) - p p^T`; with the
    logits linear in the parameters this is `sum_i J_i^T (diag(p_i) - p_i p_i^T) J_i / n`,
    formed as a diagonal part and one Gram matrix.
    """
    n, k = features.shape
    logits = _calibrated_logits(parameters, features, full)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    if full:  # logits = [x, 1] @ [[W], [b]]: J_i v = [x_i, 1] @ V
        augmented = np.concatenate([features, np.ones((n, 1))], axis=1)
        outer = (augmented[:, :, None] * p[:, None, :]).reshape(n, (k + 1) * k)
        hessian = -(outer.T @ outer).reshape(k + 1, k, k + 1, k)
        diagonal = np.einsum("ia,ic,ij->jac", augmented, augmented, p, optimize=True)
        hessian[:, np.arange(k), :, np.arange(k)] += diagonal
        curvature = np.full((k + 1, k), 2.0 * penalty.off_diagonal)
        curvature[np.arange(k), np.arange(k)] = 2.0 * penalty.diagonal
        curvature[k] = 2.0 * penalty.intercept
    else:  # logits_ij = x_ij s_j + b_j
        outer = np.concatenate([features * p, p], axis=1)
        hessian = -(outer.T @ outer).reshape(2, k, 2, k)
        for u, v, values in ((0, 0, features * features * p), (0, 1, features * p), (1, 0, features * p), (1, 1, p)):
            hessian[u, np.arange(k), v, np.arange(k)] += values.sum(axis=0)
        curvature = np.concatenate([np.full(k, 2.0 * penalty.diagonal), np.full(k, 2.0 * penalty.intercept)])
    size = k * k + k if full else 2 * k
    return hessian.reshape(size, size) / n + np.diag(curvature.ravel())


def newton(features, labels, full, penalty, start, max_iterations, tolerance):
    """`(parameters, iterations, converged)`: damped Newton's method on an objective every penalty term curves.

    With every weight of `penalty` positive the objective is strictly convex,
    and Newton's method (a backtracking Armijo search on each full step)
    converges in a few iterations on the small problems it is used for; a
    step that cannot lower the value ends it, as converged when the gradient
    is within `sqrt(tolerance)` (rounding then limits the value).
    """
    x = np.asarray(start, np.float64)
    value, gradient, _ = _objective(x, features, labels, full, penalty)
    for iteration in range(max_iterations):
        if np.max(np.abs(gradient)) <= tolerance:
            return x, iteration, True
        direction = np.linalg.solve(_hessian(x, features, full, penalty), -gradient)
        slope, step = gradient @ direction, 1.0
        while True:
            candidate = x + step * direction
            new_value, new_gradient, _ = _objective(candidate, features, labels, full, penalty)
            if np.isfinite(new_value) and new_value <= value + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-10:
                return x, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        if new_value >= value:  # accepted only by rounding: the value cannot fall any further
            return x, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        x, value, gradient = candidate, new_value, new_gradient
    return x, max_iterations, bool(np.max(np.abs(gradient)) <= tolerance)
