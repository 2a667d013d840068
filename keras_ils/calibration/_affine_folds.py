"""The affine maps' default rule on validation folds: the candidate maps, their cross-validation, and its budget.

`keras_ils.calibration.small_data` states the rule; `affine_fit` fits the
chosen map on the whole validation set. Each stage's candidates form a path,
most regularised first, each fitted from the previous one's map on every
fold's training rows and scored on its held-out rows:

- the diagonal stage: temperature scaling's map, then the maximum a
  posteriori diagonal map (a scale per class and a bias, as vector scaling)
  under the prior `N(temperature scaling's map, 1 / precision)`, for each
  precision of `PRIOR_PRECISIONS`;
- the off-diagonal stage (matrix scaling, Dirichlet calibration, after a
  diagonal precision was chosen): the chosen diagonal map, then the full map
  whose off-diagonal entries have the prior `N(0, 1 / precision)`, the
  diagonal and bias keeping theirs.
"""

from __future__ import annotations

import math
import time

import numpy as np

from keras_ils.calibration import small_data, solvers
from keras_ils.calibration._affine_passes import Passes, split
from keras_ils.calibration.solvers import Penalty
from keras_ils.calibration.temperature import DEFAULT_PRIOR_SCALE, _estimate

PRIOR_PRECISIONS = small_data.PRIOR_PRECISIONS
# the largest gradient entry that ends a fold's L-BFGS fit (at least): its held-out NLL is then within ~1e-9 of
# the optimum's, and the last digits cost a third of the iterations (Newton's method keeps the fit's tolerance)
FOLD_TOLERANCE = 1e-6


def absent_classes(labels, k) -> np.ndarray:
    """`[K]` bool: the classes with no example among `labels`."""
    return np.bincount(labels, minlength=k) == 0


def identity(k, full, scale=1.0):
    """The flat parameters of `scale * I` and a zero bias."""
    return np.concatenate([scale * np.eye(k).ravel() if full else np.full(k, scale), np.zeros(k)])


def held(parameters, absent, beta, full):
    """`parameters` with each absent class's own at temperature scaling's map: column `beta e_j` (scale), bias 0."""
    if not absent.any():
        return parameters
    weights, bias = split(np.array(parameters, np.float64), len(absent), full)
    if full:
        weights[:, absent] = 0.0
        weights[absent, absent] = beta
    else:
        weights[absent] = beta
    bias[absent] = 0.0
    return np.concatenate([weights.ravel(), bias])


def temperature_map(features, labels, full):
    """`(parameters of temperature scaling's maximum a posteriori map beta * I, beta)` on these features."""
    beta = 1.0 / _estimate(features, labels, "map", DEFAULT_PRIOR_SCALE, None).temperature
    return identity(features.shape[1], full, beta), beta


def embedded(vector_map, k):
    """A diagonal map's flat parameters (scale, bias) as a kernel's (`diag(scale)`, bias)."""
    return np.concatenate([np.diag(vector_map[:k]).ravel(), vector_map[k:]])


def prior(precision, num_examples, beta, off_diagonal=None) -> Penalty:
    """The prior `N(beta * I, 1 / precision)` per example (the mean NLL's scale), the off-diagonal's precision apart.

    An infinite precision is a parameter held where it is (weight 0: the fit
    does not move it); `off_diagonal=None` gives the off-diagonal `precision`.
    """
    weight = 0.0 if math.isinf(precision) else precision / (2.0 * num_examples)
    if off_diagonal is None:
        return Penalty(weight, weight, weight, beta)
    return Penalty(0.0 if math.isinf(off_diagonal) else off_diagonal / (2.0 * num_examples), weight, weight, beta)


class Budget:
    """The folds' fits' time left: `CROSS_VALIDATION_SECONDS` of wall clock for both stages together.

    A fold's fit still running at the deadline stops there and marks `cut`
    (so does one that would start after it); `_choose` then leaves that
    candidate out.
    """

    def __init__(self, seconds: float):
        self.deadline, self.cut = time.monotonic() + seconds, False

    def solve(self, passes, penalty, start, settings):
        """`solvers.solve` within the budget: `(parameters, iterations, converged)`."""
        max_iterations, tolerance = settings
        tolerance = tolerance if solvers.uses_newton(passes) else max(tolerance, FOLD_TOLERANCE)
        if time.monotonic() >= self.deadline:
            self.cut = True
            return start, 0, False
        parameters, iterations, converged = solvers.solve(passes, penalty, start, max_iterations, tolerance,
                                                          self.deadline)  # fmt: skip
        self.cut |= not converged and time.monotonic() >= self.deadline
        return parameters, iterations, converged


def diagonal_path(passes, settings, budget):
    """Yields `(parameters [2K], beta, iterations, converged)` of each candidate diagonal map, most regularised
    first."""
    features, labels, n = passes.features, passes.labels, len(passes.labels)
    parameters, beta = temperature_map(features, labels, False)
    for precision in PRIOR_PRECISIONS:
        iterations, converged = 0, True
        if not math.isinf(precision):
            parameters, iterations, converged = budget.solve(passes, prior(precision, n, beta), parameters, settings)
        yield parameters, beta, iterations, converged


def off_diagonal_path(passes, diagonal, settings, budget):
    """Yields `(parameters [K^2 + K], beta, iterations, converged)` of each candidate full map, most regularised first.

    `diagonal` is `(precision, map, beta)` of the diagonal stage's choice on
    the same rows: the first candidate, and the diagonal's prior throughout.
    """
    precision, vector_map, beta = diagonal
    n, k = passes.features.shape
    parameters = embedded(vector_map, k)
    for off_diagonal in PRIOR_PRECISIONS:
        iterations, converged = 0, True
        if not math.isinf(off_diagonal):
            penalty = prior(precision, n, beta, off_diagonal)
            parameters, iterations, converged = budget.solve(passes, penalty, parameters, settings)
        yield parameters, beta, iterations, converged


def folds(labels):
    """`[(training rows, held-out rows)]`: each of `stratified_folds`, or the first alone on `ONE_FOLD_EXAMPLES`
    examples or more (its held-out fifth then pins each candidate's NLL down: see `small_data`)."""
    assigned = small_data.stratified_folds(labels)
    count = 1 if len(labels) >= small_data.ONE_FOLD_EXAMPLES else int(assigned.max()) + 1
    return [(assigned != fold, assigned == fold) for fold in range(count)]


def choose_diagonal(features, labels, settings, budget):
    """The diagonal stage on the folds: `(index in PRIOR_PRECISIONS, [(map, beta)] per fold there, stopped)`."""
    paths, tests, k = [], [], features.shape[1]
    for train, test in folds(labels):
        passes = Passes(features[train], labels[train], False, absent_classes(labels[train], k))
        paths.append(diagonal_path(passes, settings, budget))
        tests.append(Passes(features[test], labels[test], False))
    return _choose(paths, tests, budget, solvers.uses_newton(passes))


def choose_off_diagonal(features, labels, diagonal, settings, budget):
    """The off-diagonal stage: `(index in PRIOR_PRECISIONS, [(map, beta)] per fold there, stopped)`.

    `diagonal` is `(precision, [(map, beta)] per fold)` of the diagonal stage.
    """
    precision, fold_maps = diagonal
    paths, tests, k = [], [], features.shape[1]
    for (train, test), (vector_map, beta) in zip(folds(labels), fold_maps, strict=True):
        passes = Passes(features[train], labels[train], True, absent_classes(labels[train], k))
        paths.append(off_diagonal_path(passes, (precision, vector_map, beta), settings, budget))
        tests.append(Passes(features[test], labels[test], True))
    return _choose(paths, tests, budget, solvers.uses_newton(passes))


def _choose(paths, tests, budget, every_candidate):
    """Walks the folds' paths candidate by candidate; `(chosen index, [(map, beta)] per fold, stopped)`.

    The choice is `small_data.one_standard_error_choice` on the held-out
    NLLs. Unless `every_candidate` (Newton-sized problems), the walk stops
    after two candidates in a row raised the mean held-out NLL (`stopped`:
    `"rising"`); it stops too when the budget cut a fold's fit short, that
    candidate left out (`"budget"`).
    """
    losses, maps, stopped = [], [], None
    budget.cut = False  # a cut in an earlier stage ended that stage; this one starts with a fit that costs none
    for _ in PRIOR_PRECISIONS:
        fitted = [next(path) for path in paths]
        if budget.cut:
            stopped = "budget"
            break
        losses.append(np.concatenate([test.nll_each(fit[0]) for test, fit in zip(tests, fitted, strict=True)]))
        maps.append([(fit[0], fit[1]) for fit in fitted])
        means = [np.mean(loss) for loss in losses[-3:]]
        if not every_candidate and len(means) == 3 and means[0] < means[1] < means[2]:
            stopped = "rising"
            break
    chosen = small_data.one_standard_error_choice(losses)
    return chosen, maps[chosen], stopped
