"""Fitting the calibration maps of `keras_ils.calibration.maps` on validation outputs: `fit_calibrator`.

The objectives are convex; the fit is an L-BFGS in float64 numpy from the
identity map, to a gradient of `tolerance`. A fit that did not converge, whose
map separates the validation set, or whose map is extreme (a parameter beyond
`EXTREME_PARAMETER` in size) issues a `CalibratorFitWarning` (see
`CalibratorFit.status`): none returns a map that overfits in silence.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import keras
import numpy as np

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, number_in, odir_refused
from keras_ils.calibration.maps import DEFAULT_ODIR, LAYERS

__all__ = ["EXTREME_PARAMETER", "METHODS", "CalibratorFit", "CalibratorFitWarning", "fit_calibrator"]

METHODS = tuple(LAYERS)
EXTREME_PARAMETER = 100.0  # a scale of 100 is a temperature of 0.01, the end of temperature scaling's search


class CalibratorFitWarning(UserWarning):
    """A calibrator fit that did not converge or whose map is extreme (see `CalibratorFit.status`)."""


class CalibratorFit(NamedTuple):
    """What `fit_calibrator` found, for reports.

    Attributes:
        method: `"vector"`, `"matrix"` or `"dirichlet"`.
        status: `"fitted"`, `"separated"` (the map classifies every
            validation example correctly: their NLL has no optimum they pin
            down), `"extreme"` (a parameter beyond `EXTREME_PARAMETER` in size:
            the map overfits a validation set it nearly separates) or
            `"not_converged"`.
        num_examples: validation examples the fit saw.
        nll: the calibrated validation mean NLL.
        objective: `nll` plus the ODIR terms, what the fit minimised.
        iterations: L-BFGS iterations.
        warning: the warning issued, or `None`.
    """

    method: str
    status: str
    num_examples: int
    nll: float
    objective: float
    iterations: int
    warning: str | None


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


def fit_calibrator(
    method: str,
    outputs,
    labels,
    *,
    from_logits: bool = True,
    off_diagonal_l2: float | None = None,
    intercept_l2: float | None = None,
    max_iterations: int = 1000,
    tolerance: float = 1e-8,
    return_fit: bool = False,
):
    """Fits a calibration map on validation outputs and returns it as a fixed layer.

    Minimises the validation mean NLL (plus ODIR for `"matrix"` and
    `"dirichlet"`; see the module docstring) by L-BFGS in float64, from the
    identity map. Issues a `CalibratorFitWarning` when the fit did not
    converge or the map is extreme.

    Args:
        method: `"vector"`, `"matrix"` or `"dirichlet"`.
        outputs: `[n, K]` validation logits (probabilities with
            `from_logits=False`).
        labels: sparse labels `[n]`, one-hot/soft `[n, K]` or teacher targets.
        from_logits: whether `outputs` are logits; the layer takes and
            returns the same kind. Defaults to `True`.
        off_diagonal_l2: ODIR's off-diagonal weight (`"matrix"`,
            `"dirichlet"` only), `>= 0`. Defaults to `0.01`.
        intercept_l2: ODIR's intercept weight (`"matrix"`, `"dirichlet"`
            only), `>= 0`. Defaults to `0.01`.
        max_iterations: L-BFGS iterations at most, `>= 1`. Defaults to `1000`.
        tolerance: the largest gradient entry at convergence, `> 0`.
            Defaults to `1e-8`.
        return_fit: also return the `CalibratorFit`. Defaults to `False`.

    Returns:
        The fitted `VectorScaling`, `MatrixScaling` or `DirichletCalibration`,
        built and with `trainable=False`; `(layer, CalibratorFit)` with
        `return_fit=True`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(size=(20000, 3)) * 2.0   # calibrated: labels are drawn from their softmax
    >>> p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    >>> labels = (rng.random((20000, 1)) < p.cumsum(axis=1)).argmax(axis=1)
    >>> layer = fit_calibrator("vector", logits * np.array([3.0, 1.0, 0.5]), labels)   # each class miscalibrated
    >>> np.round(keras.ops.convert_to_numpy(layer.scale), 1)
    array([0.3, 1. , 2. ], dtype=float32)
    >>> calibrated_logits = layer(logits)   # apply it to test logits

    References:
        Guo et al. (2017); Kull et al. (2019).
    """
    layer, report = _fit(
        method,
        outputs,
        labels,
        from_logits=from_logits,
        off_diagonal_l2=off_diagonal_l2,
        intercept_l2=intercept_l2,
        max_iterations=max_iterations,
        tolerance=tolerance,
    )
    if report.warning:
        warnings.warn(report.warning, CalibratorFitWarning, stacklevel=2)
    return (layer, report) if return_fit else layer


def _fit(
    method,
    outputs,
    labels,
    *,
    from_logits=True,
    off_diagonal_l2=None,
    intercept_l2=None,
    max_iterations=1000,
    tolerance=1e-8,
):
    """`fit_calibrator` without the warning: `(layer, CalibratorFit)`, for callers that warn in their own name."""
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
    layer = LAYERS[method](**odir, from_logits=from_logits, trainable=False)  # checks the ODIR weights

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
