"""Fitting vector scaling, matrix scaling and Dirichlet calibration on validation outputs: `fit_affine`.

By default the fit is the rule of `keras_ils.calibration.small_data`: the
maximum a posteriori map under a Gaussian prior centred on temperature
scaling's map, for each candidate precision by Newton's method (strictly
convex, a few iterations on these small problems), the precision chosen by
stratified 5-fold cross-validation on the validation set with the
one-standard-error rule, and temperature scaling's map where the chosen map
separates the validation set. ODIR's weights or `prior_precision=0` give the
plain fit (L-BFGS, `keras_ils.calibration.solvers`). A fit that did not
converge, whose map separates the validation set or is extreme reports it
(see `CalibratorFit.status`), and `fit_calibrator` warns: none returns a map
that overfits in silence.
"""

from __future__ import annotations

import math

import keras
import numpy as np

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, number_in, odir_refused
from keras_ils.calibration import small_data
from keras_ils.calibration.maps import AFFINE_LAYERS, DEFAULT_ODIR
from keras_ils.calibration.reports import CalibratorFit, message
from keras_ils.calibration.solvers import (
    METHODS,
    Penalty,
    _calibrated_logits,
    _diagnosis,
    _objective,
    _separates,
    minimise,
    newton,
)
from keras_ils.calibration.temperature import DEFAULT_PRIOR_SCALE, _estimate

__all__ = ["fit_affine"]


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


def _validated_fit(method, features, labels, odir, settings):
    """`(parameters, CalibratorFit)` of the default rule: the prior's precision chosen by cross-validation.

    Where cross-validation would cost too much and the examples are enough
    for the plain fit, the plain fit; either way, a map that separates the
    validation set is replaced by temperature scaling's map.
    """
    full, (n, k) = method != "vector", features.shape
    too_few = small_data.too_few_clause(method, n, k)
    not_cross_validated = _not_cross_validated(method, n, k)
    if not_cross_validated and not too_few:
        parameters, report = _plain_fit(method, features, labels, odir, settings)
        if not _separates(parameters, features, labels, full):
            return parameters, report
        precision, replaced = 0.0, True  # the plain fit, separating
    else:
        chosen = 0 if not_cross_validated else _cross_validated_choice(method, features, labels, settings)
        path = _prior_path(features, labels, full, settings, small_data.PRIOR_PRECISIONS[: chosen + 1])
        *_, (parameters, beta, *solver) = path
        precision = small_data.PRIOR_PRECISIONS[chosen]
        replaced = not math.isinf(precision) and _separates(parameters, features, labels, full)
    if replaced:  # the report is temperature scaling's map's: no iterations of the discarded fit
        parameters, beta = _temperature_map(features, labels, full)
        solver = (0, True)
    choice = _choice_clause(n, precision, beta, not_cross_validated, replaced)
    clauses = [too_few, choice] if too_few or replaced else []
    fitted = (parameters, beta, math.inf if replaced else precision)
    return parameters, _prior_report(method, features, labels, fitted, solver, clauses)


def _choice_clause(n, precision, beta, not_cross_validated, replaced) -> str:
    """What the default rule chose, and why, as a warning's clause."""
    cross_validation = f"{min(small_data.NUM_FOLDS, n)}-fold cross-validation on them (one-standard-error rule)"
    temperature = f"temperature scaling's map (T = {1.0 / beta:.4g}, its maximum a posteriori fit)"
    if not_cross_validated and replaced:
        return (
            f"{not_cross_validated}, and the plain fit classifies all {n} validation examples correctly, so nothing "
            f"bounds its sharpness; the map is {temperature}, which keeps the model's decisions"
        )
    if not_cross_validated:
        return f"the map is {temperature}: {not_cross_validated}"
    if replaced:
        return (
            f"{cross_validation} chose the prior's precision {precision:g}, whose map classifies all {n} validation "
            f"examples correctly, so no held-out example bounds its sharpness; the map is {temperature}, which keeps "
            "the model's decisions"
        )
    if math.isinf(precision):
        return f"{cross_validation} chose {temperature} over every less regularised map, so that is the map"
    return (
        "the map is the maximum a posteriori one under a Gaussian prior centred on temperature scaling's map "
        f"(T = {1.0 / beta:.4g}) with precision {precision:g}, chosen by {cross_validation}"
    )


def _fixed_prior_fit(method, features, labels, precision, settings):
    """`(parameters, CalibratorFit)` of the maximum a posteriori map under a prior of the given precision.

    Nothing is replaced (the precision was asked for), but a fit on too few
    examples, or a map that separates the validation set, warns.
    """
    full, (n, k) = method != "vector", features.shape
    path = _prior_path(features, labels, full, settings, (math.inf, precision))
    *_, (parameters, beta, iterations, converged) = path
    clauses = []
    too_few = small_data.too_few_clause(method, n, k)
    if too_few:
        clauses.append(f"{too_few}; the prior's precision {precision:g} is the one given (`prior_precision`)")
    if not math.isinf(precision) and _separates(parameters, features, labels, full):
        clauses.append(
            f"the map classifies all {n} validation examples correctly, so only the prior's precision {precision:g} "
            "bounds its sharpness and its probabilities may be over-confident (`prior_precision=None` "
            "cross-validates the precision and replaces such a map by temperature scaling's)"
        )
    return parameters, _prior_report(method, features, labels, (parameters, beta, precision), (iterations, converged),
                                     clauses)  # fmt: skip


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
