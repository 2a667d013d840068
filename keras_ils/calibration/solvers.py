"""Fitting the affine calibration maps of `keras_ils.calibration.maps` on validation outputs: `fit_affine`.

The objectives are convex; the fit is an L-BFGS in float64 numpy from the
identity map, to a gradient of `tolerance`. A fit that did not converge, whose
map separates the validation set, or whose map is extreme (a parameter beyond
`EXTREME_PARAMETER` in size) reports it (see `CalibratorFit.status`), and
`fit_calibrator` warns: none returns a map that overfits in silence.

By default the fit is the rule of `keras_ils.calibration.small_data`: the
maximum a posteriori map under a Gaussian prior centred on temperature
scaling's map, for each candidate precision by Newton's method (strictly
convex, a few iterations on these small problems), the precision chosen by
stratified 5-fold cross-validation on the validation set with the
one-standard-error rule, and temperature scaling's map where the chosen map
separates the validation set.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, number_in, odir_refused
from keras_ils.calibration import small_data
from keras_ils.calibration.maps import AFFINE_LAYERS, DEFAULT_ODIR
from keras_ils.calibration.reports import CalibratorFit, message
from keras_ils.calibration.temperature import DEFAULT_PRIOR_SCALE, _estimate

__all__ = ["EXTREME_PARAMETER", "METHODS", "Penalty", "fit_affine", "minimise", "newton"]

METHODS = tuple(AFFINE_LAYERS)
EXTREME_PARAMETER = 100.0  # a scale of 100 is a temperature of 0.01, the end of temperature scaling's search


def _split(parameters, k, full):
    """`(kernel [K, K] or scale [K], bias [K])` of a flat parameter vector."""
    weights, bias = parameters[: k * k if full else k], parameters[k * k if full else k :]
    return (weights.reshape(k, k) if full else weights), bias


def _calibrated_logits(parameters, features, full):
    weights, bias = _split(parameters, features.shape[1], full)
    return (features @ weights if full else features * weights) + bias


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


def _features(method, outputs, from_logits):
    """What the map reads: `log p` of probabilities, `log_softmax(z)` for Dirichlet calibration, else the logits."""
    if not from_logits:
        _labels.check_probabilities(outputs)
        return np.log(np.clip(outputs, keras.config.epsilon(), 1.0))
    if method == "dirichlet":
        shifted = outputs - outputs.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return outputs


def fit_affine(
    method: str,
    outputs,
    labels,
    *,
    from_logits: bool = True,
    off_diagonal_l2: float | None = None,
    intercept_l2: float | None = None,
    prior_precision: float | None = None,
    max_iterations: int = 1000,
    tolerance: float = 1e-8,
):
    """Fits `"vector"`, `"matrix"` or `"dirichlet"`: `(layer, CalibratorFit)`, without warning.

    By default (`prior_precision=None`, no ODIR weights given) the map is
    the maximum a posteriori one under a prior centred on temperature
    scaling's map, its precision cross-validated
    (`keras_ils.calibration.small_data`). With ODIR's weights or
    `prior_precision=0` it is the plain fit: the validation mean NLL (plus
    ODIR for `"matrix"` and `"dirichlet"`; see `keras_ils.calibration.maps`)
    minimised by L-BFGS in float64 from the identity map, to a largest
    gradient entry of `tolerance` within `max_iterations`. Any other
    `prior_precision` fixes the prior's precision (`math.inf`: temperature
    scaling's map). `fit_calibrator` documents the arguments and warns.
    """
    if method not in METHODS:
        raise invalid("method", f"one of {METHODS}", method)
    full = method != "vector"
    odir_given = off_diagonal_l2 is not None or intercept_l2 is not None
    if not full and odir_given:
        raise odir_refused(method)
    integer_at_least("max_iterations", max_iterations, 1)
    tolerance = number_in("tolerance", tolerance, 0.0, low_open=True, expected="a float > 0")
    prior_precision = small_data.check_prior_precision(prior_precision)
    if odir_given and prior_precision is not None:
        raise ValueError(
            f"Calibrator fit ({method}): give ODIR's weights (`off_diagonal_l2`, `intercept_l2`: the plain fit) or "
            f"`prior_precision` (the prior centred on temperature scaling's map), not both; got "
            f"prior_precision={prior_precision!r}."
        )
    off_diagonal_l2 = (DEFAULT_ODIR if off_diagonal_l2 is None else off_diagonal_l2) if full else 0.0
    intercept_l2 = (DEFAULT_ODIR if intercept_l2 is None else intercept_l2) if full else 0.0
    odir = dict(off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2) if full else {}
    layer = AFFINE_LAYERS[method](**odir, from_logits=from_logits, trainable=False)  # checks the ODIR weights

    outputs, labels = _labels.outputs_and_labels(outputs, labels, name="outputs")
    features = _features(method, outputs, from_logits)
    k = features.shape[1]
    settings = (max_iterations, tolerance)
    if odir_given or prior_precision == 0:
        parameters, report = _plain_fit(method, features, labels, (off_diagonal_l2, intercept_l2), settings)
    elif prior_precision is not None:
        parameters, report = _fixed_prior_fit(method, features, labels, prior_precision, settings)
    else:
        parameters, report = _validated_fit(method, features, labels, (off_diagonal_l2, intercept_l2), settings)
    layer.build((None, k))
    layer.set_weights([parameters[: k * k].reshape(k, k) if full else parameters[:k], parameters[-k:]])
    return layer, report


def _plain_fit(method, features, labels, odir, settings):
    """`(parameters, CalibratorFit)` of the plain fit: L-BFGS on the mean NLL plus ODIR, diagnosed."""
    full, (n, k) = method != "vector", features.shape
    penalty = Penalty(odir[0] / (k * (k - 1)), 0.0, odir[1] / k) if full else Penalty()
    start = np.concatenate([np.eye(k).ravel() if full else np.ones(k), np.zeros(k)])
    parameters, value, nll, iterations, converged = minimise(features, labels, full, penalty, start, *settings)
    status, text = _diagnosis(method, parameters, features, labels, converged, iterations)
    too_few = small_data.too_few_clause(method, n, k)
    if too_few:
        status = "few_examples" if status == "fitted" else status
        text = message(method, [f"{too_few}; the plain fit was asked for", _clause(method, text)])
    return parameters, CalibratorFit(method, status, n, nll, value, iterations, text)


def _clause(method, text):
    """A diagnosis' text without its `Calibrator fit (method): ` prefix and final stop, to join with others."""
    return text[len(f"Calibrator fit ({method}): ") :].rstrip(".") if text else None


def _temperature_map(features, labels, full):
    """`(parameters of temperature scaling's maximum a posteriori map beta * I, beta)` on these features."""
    k = features.shape[1]
    beta = 1.0 / _estimate(features, labels, "map", DEFAULT_PRIOR_SCALE, None).temperature
    return np.concatenate([beta * np.eye(k).ravel() if full else np.full(k, beta), np.zeros(k)]), beta


def _prior(precision, num_examples, beta):
    """The penalty of the prior `N(beta * I, 1 / precision)` on every parameter, per example (the mean NLL's scale)."""
    weight = 0.0 if math.isinf(precision) else precision / (2.0 * num_examples)
    return Penalty(weight, weight, weight, beta)


def _prior_path(features, labels, full, settings, precisions=small_data.PRIOR_PRECISIONS):
    """`(parameters, beta, iterations, converged)` for each of `precisions`, most regularised first.

    Temperature scaling's map (an infinite precision) first; each finite
    precision's fit is Newton's method from the previous one's map.
    """
    parameters, beta = _temperature_map(features, labels, full)
    for precision in precisions:
        iterations, converged = 0, True
        if not math.isinf(precision):
            penalty = _prior(precision, len(labels), beta)
            parameters, iterations, converged = newton(features, labels, full, penalty, parameters, *settings)
        yield parameters, beta, iterations, converged


def _nll_each(parameters, features, labels, full):
    """Each example's NLL under the map, `[n]`."""
    logits = _calibrated_logits(parameters, features, full)
    top = logits.max(axis=1)
    log_normaliser = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
    return log_normaliser - logits[np.arange(len(labels)), labels]


def _not_cross_validated(method, n, k) -> str | None:
    """Why the prior's precision is not cross-validated on `n` examples of `k` classes, or `None`."""
    parameters = small_data.parameter_count(method, k)
    work = n * parameters**2
    if n < 2:
        return "one example leaves none to hold out"
    if work > small_data.MAX_CROSS_VALIDATION_WORK:
        return (
            f"a prior for {parameters} parameters is not cross-validated on {n} examples (n P^2 = {work:.3g}, beyond "
            f"the {small_data.MAX_CROSS_VALIDATION_WORK:.0e} that Newton's method is given)"
        )
    return None


def _cross_validated_choice(method, features, labels, settings) -> int:
    """The index in `PRIOR_PRECISIONS` that stratified cross-validation chooses (one-standard-error rule)."""
    full, n = method != "vector", len(labels)
    folds = small_data.stratified_folds(labels)
    losses = np.zeros((len(small_data.PRIOR_PRECISIONS), n))
    for fold in range(folds.max() + 1):
        train, test = folds != fold, folds == fold
        for c, (parameters, *_) in enumerate(_prior_path(features[train], labels[train], full, settings)):
            losses[c, test] = _nll_each(parameters, features[test], labels[test], full)
    return small_data.one_standard_error_choice(losses)


def _separates(parameters, features, labels, full) -> bool:
    return bool(np.all(_calibrated_logits(parameters, features, full).argmax(axis=1) == labels))


def _validated_fit(method, features, labels, odir, settings):
    """`(parameters, CalibratorFit)` of the default rule: the prior's precision chosen by cross-validation."""
    full, (n, k) = method != "vector", features.shape
    too_few = small_data.too_few_clause(method, n, k)
    not_cross_validated = _not_cross_validated(method, n, k)
    if not_cross_validated and not too_few:
        return _plain_fit(method, features, labels, odir, settings)
    chosen = 0 if not_cross_validated else _cross_validated_choice(method, features, labels, settings)
    path = _prior_path(features, labels, full, settings, small_data.PRIOR_PRECISIONS[: chosen + 1])
    *_, (parameters, beta, iterations, converged) = path
    replaced = not math.isinf(small_data.PRIOR_PRECISIONS[chosen]) and _separates(parameters, features, labels, full)
    if replaced:
        parameters, beta = _temperature_map(features, labels, full)
    cross_validation = f"{min(small_data.NUM_FOLDS, n)}-fold cross-validation on them (one-standard-error rule)"
    temperature = f"temperature scaling's map (T = {1.0 / beta:.4g}, its maximum a posteriori fit)"
    if not_cross_validated:
        choice = f"the map is {temperature}: {not_cross_validated}"
    elif replaced:
        choice = (
            f"{cross_validation} chose the prior's precision {small_data.PRIOR_PRECISIONS[chosen]:g}, whose map "
            f"classifies all {n} validation examples correctly, so no held-out example bounds its sharpness; the map "
            f"is {temperature}, which keeps the model's decisions"
        )
    elif chosen == 0:
        choice = f"{cross_validation} chose {temperature} over every less regularised map, so that is the map"
    else:
        choice = (
            "the map is the maximum a posteriori one under a Gaussian prior centred on temperature scaling's map "
            f"(T = {1.0 / beta:.4g}) with precision {small_data.PRIOR_PRECISIONS[chosen]:g}, chosen by "
            f"{cross_validation}"
        )
    precision = math.inf if replaced else small_data.PRIOR_PRECISIONS[chosen]
    clauses = [too_few, choice] if too_few or replaced else []
    return parameters, _prior_report(method, features, labels, (parameters, beta, precision), (iterations, converged),
                                     clauses)  # fmt: skip


def _fixed_prior_fit(method, features, labels, precision, settings):
    """`(parameters, CalibratorFit)` of the maximum a posteriori map under a prior of the given precision."""
    full = method != "vector"
    path = _prior_path(features, labels, full, settings, (math.inf, precision))
    *_, (parameters, beta, iterations, converged) = path
    return parameters, _prior_report(method, features, labels, (parameters, beta, precision), (iterations, converged),
                                     [])  # fmt: skip


def _prior_report(method, features, labels, fitted, solver, clauses):
    """The `CalibratorFit` of a map fitted under the prior: status `"temperature"` or `"regularised"`."""
    (parameters, beta, precision), (iterations, converged) = fitted, solver
    full, n = method != "vector", len(labels)
    status = "temperature" if math.isinf(precision) else "regularised"
    if not converged:
        status = "not_converged"
        clauses = [*clauses, f"Newton's method did not converge in {iterations} iterations"]
    value = _objective(parameters, features, labels, full, _prior(precision, n, beta))[0]
    nll = float(np.mean(_nll_each(parameters, features, labels, full)))
    return CalibratorFit(method, status, n, nll, float(value), iterations, message(method, clauses), precision)
