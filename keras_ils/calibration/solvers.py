"""The optimisers of the affine calibration maps (`keras_ils.calibration.maps`): `minimise`, `newton`, `solve`.

The objectives are convex: the validation mean NLL of the map (its passes
over the data are `keras_ils.calibration._affine_passes.Passes`: `keras.ops`
on the backend's device beyond small sizes) plus a `Penalty` (ODIR, or the small-data prior centred
on temperature scaling's map), which is O(P) NumPy. `minimise` is L-BFGS;
`newton` is Newton's method for the strictly convex prior objective, used
by `solve` on problems whose Hessian is cheap (`n P^2 <= NEWTON_MAX_WORK`).

L-BFGS's control (the two-loop recursion, the line search) is float64 NumPy
on the parameter vector: with 20 pairs in memory an iteration costs about
100 P operations on it, against about 2 n P multiply-adds for the pass over
the data that it waits for (n, the examples, is in the thousands), so it
stays where the parameters are; on a GPU at K = 1,000 (P = 10^6) it would be
worth moving to the device too. `_diagnosis` says whether a fitted map did
not converge, separates the validation set or is extreme (a parameter beyond
`EXTREME_PARAMETER` in size). `keras_ils.calibration.affine_fit` chooses
what to fit.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from keras_ils.calibration._affine_passes import split
from keras_ils.calibration.maps import AFFINE_LAYERS

__all__ = ["EXTREME_PARAMETER", "METHODS", "NEWTON_MAX_WORK", "Penalty", "minimise", "newton", "solve", "uses_newton"]

METHODS = tuple(AFFINE_LAYERS)
EXTREME_PARAMETER = 100.0  # a scale of 100 is a temperature of 0.01, the end of temperature scaling's search
NEWTON_MAX_WORK = 2e7  # n * P^2 (the work of one Hessian) at most: `solve` uses Newton's method, else L-BFGS
CURVATURE_ROWS = 4096  # rows that estimate L-BFGS's initial (diagonal) Hessian


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

    def value_and_gradient(self, parameters, k: int, full: bool):
        """`(value, gradient [P])` at the flat `parameters` (O(P) NumPy)."""
        weights, bias = split(parameters, k, full)
        diagonal = (np.diag(weights) if full else weights) - self.centre
        value = self.diagonal * (diagonal @ diagonal) + self.intercept * (bias @ bias)
        if not full:
            return value, np.concatenate([2.0 * self.diagonal * diagonal, 2.0 * self.intercept * bias])
        grad_weights = 2.0 * self.off_diagonal * weights
        grad_weights[np.diag_indices(k)] = 2.0 * self.diagonal * diagonal
        value += self.off_diagonal * (np.sum(weights**2) - np.sum(np.diag(weights) ** 2))
        return value, np.concatenate([grad_weights.ravel(), 2.0 * self.intercept * bias])

    def weights(self, k: int, full: bool):
        """`(each kernel entry's weight [K, K] or the scale's [K], the bias's weight)`."""
        if not full:
            return np.full(k, self.diagonal), self.intercept
        entries = np.full((k, k), self.off_diagonal)
        entries[np.diag_indices(k)] = self.diagonal
        return entries, self.intercept


def objective(passes, penalty):
    """The fit's `function(parameters) -> (objective, gradient, mean NLL)`: the data's pass plus the penalty."""
    k = passes.features.shape[1]

    def function(parameters):
        nll, gradient = passes(parameters)
        value, penalty_gradient = penalty.value_and_gradient(parameters, k, passes.full)
        return nll + value, gradient + penalty_gradient, nll

    return function


def gauge(parameters, penalty, passes):
    """`parameters` moved to the penalty's optimum along the directions the softmax ignores.

    Adding `u_i` to row `i` of the kernel (over the classes in the fit) and
    `c` to every bias in it adds the same number to every logit of an
    example: the NLL ignores it, and the penalty alone sets it. Its optimum
    there is in closed form: `u_i` makes the weighted sum of row `i`'s
    deviations from the penalty's centre 0, `c` the bias's sum. A fit from
    such a point stays on that set (`_standardised`) and its optimum lies on it.
    """
    k, full = passes.features.shape[1], passes.full
    present = ~passes.absent
    weights, bias = (w.copy() for w in split(np.asarray(parameters, np.float64), k, full))
    entries, bias_weight = penalty.weights(k, full)
    if full:
        row_weights = entries * present
        totals = row_weights.sum(axis=1)
        deviation = weights - penalty.centre * np.eye(k)
        shift = -np.divide((row_weights * deviation).sum(axis=1), totals, out=np.zeros(k), where=totals > 0)
        weights += shift[:, None] * present
    if bias_weight > 0:
        bias[present] -= bias[present].mean()
    return np.concatenate([weights.ravel(), bias])


def _standardised(function, passes, penalty):
    """The fit in the coordinates of standardised features: `(function there, to parameters, from parameters,
    projection, its inverse curvature at a map)`.

    Changes that leave the optimum alone and make L-BFGS (not invariant to
    them) fast:

    - `(x - mean) / std` decorrelates the bias from the weights and equalises
      the features' scales (log-probabilities have means far from 0);
    - the gradient is projected onto the set where the penalty is at its
      optimum along the directions the softmax ignores (`gauge`): only the
      penalty curves the objective along them, often weakly, and the fit
      starts on that set;
    - L-BFGS's initial inverse Hessian is diagonal: the NLL's curvature in
      a class's parameters, `mean p_j (1 - p_j)` (standardised features have
      unit second moments), on at most `CURVATURE_ROWS` rows, plus the
      penalty's (`2 w / std_i^2` on the kernel, `2 w` on the bias), whose
      weights may be 1,000 times the data's on a strong prior.
    """
    features, full = passes.features, passes.full
    mean, std = features.mean(axis=0), features.std(axis=0)
    std = np.where(std > 1e-8 * (1.0 + np.abs(mean)), std, 1.0)  # a constant feature (up to rounding) stays
    k = len(mean)
    split_at = k * k if full else k

    def to_parameters(standard):
        weights, bias = standard[:split_at], standard[split_at:]
        weights = weights.reshape(k, k) / std[:, None] if full else weights / std
        return np.concatenate([weights.ravel(), bias - (mean @ weights if full else mean * weights)])

    def from_parameters(parameters):
        weights, bias = split(parameters, k, full)
        return np.concatenate([(weights * (std[:, None] if full else std)).ravel(),
                               bias + (mean @ weights if full else mean * weights)])  # fmt: skip

    project = _projection(penalty, passes, mean, std)

    def standardised(standard):
        value, gradient = function(to_parameters(standard))[:2]
        grad_weights, grad_bias = gradient[:split_at], gradient[split_at:]
        if full:
            grad_weights = ((grad_weights.reshape(k, k) - np.outer(mean, grad_bias)) / std[:, None]).ravel()
        else:
            grad_weights = (grad_weights - mean * grad_bias) / std
        return value, project(np.concatenate([grad_weights, grad_bias]))

    def inverse_curvature(parameters):
        p = passes.probabilities(parameters, rows=slice(0, CURVATURE_ROWS))
        data = np.mean(p * (1.0 - p), axis=0)
        entries, bias_weight = penalty.weights(k, full)
        weights = (data if not full else data[None, :]) + 2.0 * entries / (std[:, None] if full else std) ** 2
        curvature = np.concatenate([weights.ravel(), data + 2.0 * bias_weight])
        return np.divide(1.0, curvature, out=np.ones_like(curvature), where=curvature > 0)

    return standardised, to_parameters, from_parameters, project, inverse_curvature


def _projection(penalty, passes, mean, std):
    """The projection of a gradient in standardised coordinates onto the set `gauge` leaves a map on.

    Row `i`'s constraint is the weighted sum of its deviations over the
    classes in the fit: its normal is those weights over `std_i`, on the
    row (the rows' normals are orthogonal). The bias's is its sum over
    them, which in these coordinates also reads the kernel (`b = b' - mean @
    W`), so its normal is orthogonalised against the rows'. O(P) NumPy.
    """
    k, full = len(mean), passes.full
    present = ~passes.absent
    entries, bias_weight = penalty.weights(k, full)
    rows = entries * present / std[:, None] if full else np.zeros((0, k))
    norms = np.sum(rows**2, axis=1)

    def project_rows(vector):
        if not full:
            return vector
        kernel = vector[: k * k].reshape(k, k)
        coefficients = np.divide(np.sum(rows * kernel, axis=1), norms, out=np.zeros(k), where=norms > 0)
        return np.concatenate([(kernel - coefficients[:, None] * rows).ravel(), vector[k * k :]])

    if bias_weight > 0:
        on_weights = np.outer(-mean / std, present) if full else -mean / std * present
        bias_normal = project_rows(np.concatenate([on_weights.ravel(), present.astype(np.float64)]))
        bias_norm = bias_normal @ bias_normal

    def project(gradient):
        gradient = project_rows(gradient)
        if bias_weight > 0:
            gradient = gradient - bias_normal * ((bias_normal @ gradient) / bias_norm)
        return gradient

    return project


def _lbfgs(function, x, settings, inverse_curvature, project, resolution, deadline=math.inf, memory=20):
    """Minimises a smooth convex `function(x) -> (value, gradient)` on a linear set: `(x, value, iterations,
    converged)`.

    L-BFGS (Nocedal & Wright 2006, Alg. 7.4) from the diagonal initial
    inverse Hessian `inverse_curvature` (scaled by the last pair, as their
    `gamma`), its directions projected onto the set by `project` (the
    gradients already are), with a backtracking Armijo line search. It stops
    at a largest gradient entry of `tolerance` (`settings = (max_iterations,
    tolerance)`), or when an iteration lowers the value by no more than
    `resolution` times it (rounding then limits the value, not the method),
    as converged when the gradient is within `sqrt(tolerance)`; at the
    `time.monotonic()` `deadline` it stops unconverged.
    """
    max_iterations, tolerance = settings
    value, gradient = function(x)
    steps, changes = [], []
    for iteration in range(max_iterations):
        if np.max(np.abs(gradient)) <= tolerance:
            return x, value, iteration, True
        if time.monotonic() >= deadline:
            return x, value, iteration, False
        direction = -gradient
        coefficients = []
        for s, y in reversed(list(zip(steps, changes, strict=True))):
            coefficient = (s @ direction) / (y @ s)
            direction = direction - coefficient * y
            coefficients.append(coefficient)
        direction = inverse_curvature * direction
        if steps:
            direction *= (steps[-1] @ changes[-1]) / (changes[-1] @ (inverse_curvature * changes[-1]))
        for (s, y), coefficient in zip(zip(steps, changes, strict=True), reversed(coefficients), strict=True):
            direction = direction + s * (coefficient - (y @ direction) / (y @ s))
        direction = project(direction)
        slope = gradient @ direction
        if slope >= 0:  # not a descent direction: restart from the scaled gradient
            steps, changes = [], []
            direction = project(-inverse_curvature * gradient)
            slope = gradient @ direction
        step = 1.0
        while True:
            candidate = x + step * direction
            new_value, new_gradient = function(candidate)
            if np.isfinite(new_value) and new_value <= value + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-20:
                return x, value, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        s, y = candidate - x, new_gradient - gradient
        if s @ y > 1e-12 * np.sqrt((s @ s) * (y @ y)):
            steps, changes = (steps + [s])[-memory:], (changes + [y])[-memory:]
        stalled = value - new_value <= resolution * max(1.0, abs(value))
        x, value, gradient = candidate, new_value, new_gradient
        if stalled:
            return x, value, iteration + 1, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
    return x, value, max_iterations, bool(np.max(np.abs(gradient)) <= tolerance)


def minimise(passes, penalty, start, max_iterations, tolerance, deadline=math.inf):
    """`(parameters, objective, mean NLL, iterations, converged)` of the penalised fit from `start` (L-BFGS, until
    the `time.monotonic()` `deadline`)."""
    function = objective(passes, penalty)
    standardised, to_parameters, from_parameters, project, inverse_curvature = _standardised(function, passes, penalty)
    start = gauge(start, penalty, passes)
    settings, scaling = (max_iterations, tolerance), inverse_curvature(start)
    found, _, iterations, converged = _lbfgs(standardised, from_parameters(start), settings, scaling, project,
                                             passes.resolution, deadline)  # fmt: skip
    parameters = to_parameters(found)
    value, _, nll = function(parameters)
    return parameters, float(value), float(nll), iterations, converged


def _hessian(parameters, passes, penalty):
    """The objective's Hessian in `parameters` (kernel or scale first, then bias), `[P, P]`.

    Per example the NLL's Hessian in the logits is `diag(p) - p p^T`; with the
    logits linear in the parameters this is `sum_i J_i^T (diag(p_i) - p_i p_i^T) J_i / n`,
    formed as a diagonal part and one Gram matrix (an absent class's `p` is 0:
    only the penalty curves its parameters).
    """
    features, full = passes.features, passes.full
    n, k = features.shape
    p = passes.probabilities(parameters)
    if full:  # logits = [x, 1] @ [[W], [b]]: J_i v = [x_i, 1] @ V
        augmented = np.concatenate([features, np.ones((n, 1))], axis=1)
        outer = (augmented[:, :, None] * p[:, None, :]).reshape(n, (k + 1) * k)
        hessian = -(outer.T @ outer).reshape(k + 1, k, k + 1, k)
        diagonal = np.einsum("ia,ic,ij->jac", augmented, augmented, p, optimize=True)
        hessian[:, np.arange(k), :, np.arange(k)] += diagonal
    else:  # logits_ij = x_ij s_j + b_j
        outer = np.concatenate([features * p, p], axis=1)
        hessian = -(outer.T @ outer).reshape(2, k, 2, k)
        for u, v, values in ((0, 0, features * features * p), (0, 1, features * p), (1, 0, features * p), (1, 1, p)):
            hessian[u, np.arange(k), v, np.arange(k)] += values.sum(axis=0)
    entries, bias_weight = penalty.weights(k, full)
    curvature = 2.0 * np.concatenate([entries.ravel(), np.full(k, bias_weight)])
    size = k * k + k if full else 2 * k
    return hessian.reshape(size, size) / n + np.diag(curvature)


def newton(passes, penalty, start, max_iterations, tolerance, deadline=math.inf):
    """`(parameters, iterations, converged)`: damped Newton's method on an objective every penalty term curves.

    With every weight of `penalty` positive the objective is strictly convex,
    and Newton's method (a backtracking Armijo search on each full step)
    converges in a few iterations on the small problems it is used for; a
    step that cannot lower the value ends it, as converged when the gradient
    is within `sqrt(tolerance)` (rounding then limits the value); at the
    `time.monotonic()` `deadline` it stops unconverged.
    """
    function = objective(passes, penalty)
    x = np.asarray(start, np.float64)
    value, gradient, _ = function(x)
    for iteration in range(max_iterations):
        if np.max(np.abs(gradient)) <= tolerance:
            return x, iteration, True
        if time.monotonic() >= deadline:
            return x, iteration, False
        direction = np.linalg.solve(_hessian(x, passes, penalty), -gradient)
        slope, step = gradient @ direction, 1.0
        while True:
            candidate = x + step * direction
            new_value, new_gradient, _ = function(candidate)
            if np.isfinite(new_value) and new_value <= value + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-10:
                return x, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        if new_value >= value:  # accepted only by rounding: the value cannot fall any further
            return x, iteration, bool(np.max(np.abs(gradient)) <= np.sqrt(tolerance))
        x, value, gradient = candidate, new_value, new_gradient
    return x, max_iterations, bool(np.max(np.abs(gradient)) <= tolerance)


def uses_newton(passes) -> bool:
    """Whether `solve` uses Newton's method on these passes: one Hessian costs `n P^2 <= NEWTON_MAX_WORK`."""
    n, k = passes.features.shape
    size = k * k + k if passes.full else 2 * k
    return n * size * size <= NEWTON_MAX_WORK


def solve(passes, penalty, start, max_iterations, tolerance, deadline=math.inf):
    """`(parameters, iterations, converged)` of a strictly convex fit: Newton's method where its Hessian is cheap
    (`uses_newton`), L-BFGS beyond; either stops unconverged at the `time.monotonic()` `deadline`."""
    if uses_newton(passes):
        return newton(passes, penalty, start, max_iterations, tolerance, deadline)
    parameters, _, _, iterations, converged = minimise(passes, penalty, start, max_iterations, tolerance, deadline)
    return parameters, iterations, converged


def _diagnosis(method, parameters, passes, converged, iterations):
    """`(status, warning or None)` of a calibrator fit."""
    n = len(passes.labels)
    largest = float(np.max(np.abs(parameters)))
    if not converged:
        return "not_converged", (
            f"Calibrator fit ({method}): L-BFGS did not converge in {iterations} iterations on {n} validation "
            f"examples (largest parameter {largest:.4g}); the map is the last iterate."
        )
    if passes.separates(parameters):
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
