"""Fitting vector scaling, matrix scaling and Dirichlet calibration on validation outputs: `fit_affine`.

By default the fit is the rule of `keras_ils.calibration.small_data`, at
every size: the maximum a posteriori map under a Gaussian prior centred on
temperature scaling's map, its precisions chosen on validation folds with
the one-standard-error rule, and temperature scaling's map where the chosen
map separates the validation set. For matrix scaling and Dirichlet
calibration the choice has two stages, as ODIR (Kull et al. 2019) has two
weights: the diagonal and the bias first (vector scaling's rule on the same
features), then the off-diagonal's own precision. ODIR's weights or
`prior_precision=0` give the plain fit. Newton's method solves the problems
whose Hessian is cheap, L-BFGS the others (`keras_ils.calibration.solvers`);
the passes over the data are `keras.ops` beyond small sizes, on the Keras
backend's device, the GPU when it has one (`keras_ils.calibration._affine_passes`).

A class with no validation example keeps temperature scaling's map: its
column of the kernel (its scale) is `beta e_j` and its bias 0, and it takes no
part in the fit's softmax, whose likelihood is then that of the classes the
validation set holds. Without that, the likelihood alone drives the class's
logit down without bound (a vector scaling took a class's mean probability
from 0.30 to 0.005).

A fit that did not converge, whose map separates the validation set or is
extreme reports it (see `CalibratorFit.status`), and `fit_calibrator` warns:
none returns a map that overfits in silence.
"""

from __future__ import annotations

import math

import numpy as np

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, number_in, odir_refused
from keras_ils._outputs import log_probabilities
from keras_ils.calibration import _affine_folds as folds
from keras_ils.calibration import small_data, solvers
from keras_ils.calibration._affine_folds import absent_classes, embedded, held, identity, prior, temperature_map
from keras_ils.calibration._affine_passes import Passes, split
from keras_ils.calibration.maps import AFFINE_LAYERS, DEFAULT_ODIR
from keras_ils.calibration.reports import CalibratorFit, message
from keras_ils.calibration.solvers import METHODS, Penalty

__all__ = ["fit_affine"]


def _features(method, outputs, from_logits):
    """What the map reads: `log p` of probabilities, `log_softmax(z)` for Dirichlet calibration, else the logits."""
    if not from_logits:
        _labels.check_probabilities(outputs)
        return log_probabilities(outputs)
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
    scaling's map, its precisions chosen on validation folds
    (`keras_ils.calibration.small_data`, which states the folds' time
    budget). With ODIR's weights or `prior_precision=0` it is the plain
    fit: the validation mean NLL (plus ODIR for `"matrix"` and
    `"dirichlet"`; see `keras_ils.calibration.maps`) minimised by L-BFGS
    from the identity map, to a largest gradient entry of `tolerance` within
    `max_iterations`. Any other `prior_precision` fixes the prior's
    precision, the same for every parameter (`math.inf`: temperature
    scaling's map). A class absent from `labels` keeps temperature scaling's
    map (the module docstring); the report's `objective` is then that of the
    other classes' softmax, its `nll` the whole map's. The passes over the
    data run in `keras.ops` beyond small sizes, on the Keras backend's
    device (the GPU when it has one). `fit_calibrator` documents the
    arguments and warns.
    """
    full, odir_given = method != "vector", off_diagonal_l2 is not None or intercept_l2 is not None
    tolerance, prior_precision = _checked(method, odir_given, max_iterations, tolerance, prior_precision)
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
        parameters, report = _validated_fit(method, features, labels, settings)
    layer.build((None, k))
    layer.set_weights(list(split(parameters, k, full)))
    return layer, report


def _checked(method, odir_given, max_iterations, tolerance, prior_precision):
    """`(tolerance, prior_precision)` checked, or the package's `ValueError` naming the argument."""
    if method not in METHODS:
        raise invalid("method", f"one of {METHODS}", method)
    if method == "vector" and odir_given:
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
    return tolerance, prior_precision


def _plain_fit(method, features, labels, odir, settings):
    """`(parameters, CalibratorFit)` of the plain fit: L-BFGS on the mean NLL plus ODIR, diagnosed."""
    full, (n, k) = method != "vector", features.shape
    penalty = Penalty(odir[0] / (k * (k - 1)), 0.0, odir[1] / k) if full else Penalty()
    absent = absent_classes(labels, k)
    start = identity(k, full)
    if absent.any():
        start = held(start, absent, temperature_map(features, labels, full)[1], full)
    passes = Passes(features, labels, full, absent)
    parameters, value, _, iterations, converged = solvers.minimise(passes, penalty, start, *settings)
    status, text = solvers._diagnosis(method, parameters, passes, converged, iterations)
    too_few = small_data.too_few_clause(method, n, k)
    if too_few:
        status = "few_examples" if status == "fitted" else status
        text = message(method, [f"{too_few}; the plain fit was asked for", _clause(method, text)])
    nll = float(np.mean(passes.nll_each(parameters)))
    return parameters, CalibratorFit(method, status, n, nll, value, iterations, text)


def _clause(method, text):
    """A diagnosis' text without its `Calibrator fit (method): ` prefix and final stop, to join with others."""
    return text[len(f"Calibrator fit ({method}): ") :].rstrip(".") if text else None


def _fixed_prior_fit(method, features, labels, precision, settings):
    """`(parameters, CalibratorFit)` of the maximum a posteriori map under a prior of the given precision.

    Nothing is replaced (the precision was asked for), but a fit on too few
    examples, or a map that separates the validation set, warns.
    """
    full, (n, k) = method != "vector", features.shape
    passes = Passes(features, labels, full, absent_classes(labels, k))
    parameters, beta = temperature_map(features, labels, full)
    iterations, converged = 0, True
    if not math.isinf(precision):
        parameters, iterations, converged = solvers.solve(passes, prior(precision, n, beta), parameters, *settings)
    clauses = []
    too_few = small_data.too_few_clause(method, n, k)
    if too_few:
        clauses.append(f"{too_few}; the prior's precision {precision:g} is the one given (`prior_precision`)")
    if not math.isinf(precision) and passes.separates(parameters):
        clauses.append(
            f"the map classifies all {n} validation examples correctly, so only the prior's precision {precision:g} "
            "bounds its sharpness and its probabilities may be over-confident (`prior_precision=None` "
            "cross-validates the precision and replaces such a map by temperature scaling's)"
        )
    fitted = (parameters, prior(precision, n, beta), precision)
    return parameters, _prior_report(method, passes, fitted, (iterations, converged), clauses)


def _prior_report(method, passes, fitted, solver, clauses):
    """The `CalibratorFit` of a map fitted under the prior: status `"temperature"` or `"regularised"`."""
    (parameters, penalty, precision), (iterations, converged) = fitted, solver
    status = "temperature" if math.isinf(precision) else "regularised"
    if not converged:
        status = "not_converged"
        clauses = [*clauses, f"the solver did not converge in {iterations} iterations"]
    value = solvers.objective(passes, penalty)(parameters)[0]
    nll = float(np.mean(passes.nll_each(parameters)))
    n = len(passes.labels)
    return CalibratorFit(method, status, n, nll, float(value), iterations, message(method, clauses), precision)


def _validated_fit(method, features, labels, settings):
    """`(parameters, CalibratorFit)` of the default rule: the prior's precisions chosen on validation folds.

    A chosen map that separates the validation set is replaced by
    temperature scaling's map; so is every map fitted on one example.
    """
    full, (n, k) = method != "vector", features.shape
    absent = absent_classes(labels, k)
    passes = Passes(features, labels, full, absent)
    if n < 2:
        parameters, beta = temperature_map(features, labels, full)
        penalty, choice, solver = prior(math.inf, n, beta), (math.inf, None, None), (0, True)
    else:
        parameters, penalty, choice, solver = _chosen_map(passes, settings)
    replaced = not math.isinf(choice[0]) and passes.separates(parameters)
    if replaced:  # the report is temperature scaling's map's: no iterations of the discarded fit
        parameters, beta = temperature_map(features, labels, full)
        penalty, solver = prior(math.inf, n, beta), (0, True)
    too_few = small_data.too_few_clause(method, n, k)
    clause = _choice_clause(n, choice, penalty.centre, replaced)
    clauses = [too_few, clause] if too_few or replaced or choice[2] == "budget" else []
    fitted = (parameters, penalty, math.inf if replaced else choice[0])
    return parameters, _prior_report(method, passes, fitted, solver, clauses)


def _chosen_map(passes, settings):
    """The default rule's map on all of `passes`: `(parameters, penalty, choice, (iterations, converged))`.

    `choice` is `(diagonal precision, off-diagonal precision or None,
    why a stage's walk stopped early or None)`; each stage's choice is the
    folds' (`_affine_folds`), and its map is refitted on every example from
    the first fold's.
    """
    features, labels, absent, full = passes.features, passes.labels, passes.absent, passes.full
    n, k = features.shape
    budget = folds.Budget(small_data.CROSS_VALIDATION_SECONDS)
    chosen, fold_maps, stopped = folds.choose_diagonal(features, labels, settings, budget)
    precision = small_data.PRIOR_PRECISIONS[chosen]
    diagonal = Passes(features, labels, False, absent) if full else passes
    parameters, beta = temperature_map(features, labels, False)
    penalty, iterations, converged = prior(precision, n, beta), 0, True
    if not math.isinf(precision):
        start = held(fold_maps[0][0], absent, beta, False)
        parameters, iterations, converged = solvers.solve(diagonal, penalty, start, *settings)
    if not full or math.isinf(precision):
        parameters = embedded(parameters, k) if full else parameters
        return parameters, penalty, (precision, None, stopped), (iterations, converged)
    chosen, fold_maps, stopped = folds.choose_off_diagonal(features, labels, (precision, fold_maps), settings, budget)
    off_diagonal = small_data.PRIOR_PRECISIONS[chosen]
    penalty, parameters = prior(precision, n, beta, off_diagonal), embedded(parameters, k)
    if not math.isinf(off_diagonal):
        start = held(fold_maps[0][0], absent, beta, True)
        parameters, more, done = solvers.solve(passes, penalty, start, *settings)
        iterations, converged = iterations + more, converged and done
    return parameters, penalty, (precision, off_diagonal, stopped), (iterations, converged)


def _cross_validation(n) -> str:
    """How the folds held examples out, as a clause's words."""
    if n >= small_data.ONE_FOLD_EXAMPLES:
        return f"one held-out fold of {small_data.NUM_FOLDS} (its {n} examples' fifth; one-standard-error rule)"
    return f"{min(small_data.NUM_FOLDS, n)}-fold cross-validation on them (one-standard-error rule)"


def _choice_clause(n, choice, beta, replaced) -> str:
    """What the default rule chose, and why, as a warning's clause."""
    precision, off_diagonal, stopped = choice
    temperature = f"temperature scaling's map (T = {1.0 / beta:.4g}, its maximum a posteriori fit)"
    if n < 2:
        return f"the map is {temperature}: one example leaves none to hold out"
    budget = (
        f"; the folds' time budget ({small_data.CROSS_VALIDATION_SECONDS:g} s, "
        "`small_data.CROSS_VALIDATION_SECONDS`) ended the search there, so less regularised maps were not tried"
        if stopped == "budget"
        else ""
    )
    if replaced:
        return (
            f"{_cross_validation(n)} chose the prior's precision {precision:g}, whose map classifies all {n} "
            f"validation examples correctly, so no held-out example bounds its sharpness; the map is {temperature}, "
            f"which keeps the model's decisions{budget}"
        )
    if math.isinf(precision):
        return f"{_cross_validation(n)} chose {temperature} over every less regularised map, so that is the map{budget}"
    off = "" if off_diagonal is None else f" (off-diagonal entries: precision {off_diagonal:g}, centred on 0)"
    return (
        "the map is the maximum a posteriori one under a Gaussian prior centred on temperature scaling's map "
        f"(T = {1.0 / beta:.4g}) with precision {precision:g}{off}, chosen by {_cross_validation(n)}{budget}"
    )
