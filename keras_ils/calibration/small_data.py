"""The calibrators' rules for small and nearly separable validation sets: how each map is chosen, and when it warns.

Users' validation sets are small (tens of examples), and a calibration map
with more parameters than the examples can pin down overfits them: an
unregularised vector scaling or a weakly regularised Dirichlet calibration
fitted on 30 examples of 6 classes multiplied the test NLL by 10-1000, and
histogram binning by up to 18, before this rule. No calibrator may do so.

The rule, for the affine maps (vector, matrix, Dirichlet), applies to every
fit, since a trained network's validation logits are often nearly separable
whatever their number: a plain vector scaling fitted on 251 validation
logits of a digits network (20 parameters, 12 examples each) multiplied its
test NLL by up to 100, and matrix/Dirichlet maps on 80 breast-cancer
examples by 400 (docs/results/calibration-comparison.md). So:

- the fit is the maximum a posteriori map under a Gaussian prior centred on
  temperature scaling's map (each parameter `~ N(TS map, 1 / precision)`,
  so the prior's weight against the data falls as `1 / n`), with the
  precision chosen on validation folds of the validation set itself (as
  Kull et al. choose ODIR's weights) among `PRIOR_PRECISIONS` and
  temperature scaling's map itself (an infinite precision), by the
  one-standard-error rule (Hastie et al. 2009, §7.10): the most regularised
  candidate whose held-out NLL is within one standard error of the best;
- for matrix scaling and Dirichlet calibration the choice has two stages,
  as ODIR has two weights: first the diagonal map (a scale per class and a
  bias, vector scaling's rule on the same features), then, unless that chose
  temperature scaling's map, the off-diagonal entries under their own prior
  `N(0, 1 / precision)` (most regularised first: the diagonal map itself),
  the diagonal and bias keeping theirs. So the `K (K - 1)` off-diagonal
  entries, which a validation set of `n` examples rarely pins down when `K`
  is 100 or 1,000, get a prior apart from the `2K` that it does;
- the folds are `NUM_FOLDS` stratified ones, each held out in turn; from
  `ONE_FOLD_EXAMPLES` (10,000) examples only the first is held out (2,000
  examples or more, whose mean NLL's standard error is small next to the
  differences between candidates, at a fifth of the cost);
- the time budget: each stage walks its candidates from the most
  regularised one, each fitted from the previous one's map, and the folds'
  fits of both stages together run for at most `CROSS_VALIDATION_SECONDS`
  (300 s of wall clock); the candidate the budget cuts short is left out,
  the choice is made among the others, and the warning says so (nothing is
  silently replaced). It binds only at deep-network sizes on a CPU: a
  1,000-class matrix or Dirichlet map on 50,000 examples costs seconds a
  pass on 2 CPU cores and milliseconds on a GPU, which fits every candidate
  in it. Beyond Newton's method's size (a Hessian of `n P^2 > 2e7`,
  `solvers.NEWTON_MAX_WORK`) a stage also stops after two candidates in a
  row raised the mean held-out NLL;
- a class with no validation example keeps temperature scaling's map (its
  kernel column, or scale, `beta e_j` and bias 0) and takes no part in the
  fit's softmax: the likelihood would otherwise drive its logit down without
  bound;
- a chosen map that classifies every validation example correctly is
  replaced by temperature scaling's map: cross-validation cannot bound its
  sharpness there (every held-out example is right too, so a sharper map
  always scores better), and the test errors it never saw pay for it;
  temperature scaling keeps the network's decisions, and its own prior
  bounds its sharpness; one example, which leaves none to hold out, gets
  temperature scaling's map too;
- `fit_calibrator` warns (`CalibratorFitWarning`) with the numbers and the
  choice when the fit rests on fewer than `EXAMPLES_PER_PARAMETER` (10)
  validation examples per parameter (the "events per variable" rule of thumb
  of logistic regression, Peduzzi et al. 1996: `n < 10 * 2K` for vector
  scaling, `n < 10 * (K^2 + K)` for matrix scaling and Dirichlet
  calibration), when the chosen map was replaced or when the budget ended a
  stage; `prior_precision=` fixes the precision instead
  (`0`: the plain fit, ODIR-regularised for matrix and Dirichlet; `math.inf`:
  temperature scaling's map), and such a fit warns too when it rests on too
  few examples or its map separates the validation set.

For the one-vs-rest maps (histogram binning, isotonic regression; see
`keras_ils.calibration.one_vs_rest`):

- a fit rests on too few examples when a class has fewer than
  `MIN_EXAMPLES_PER_CLASS` (20) examples, or, for histogram binning, when
  there are fewer than `num_bins` examples per bin (`n < num_bins^2`);
- such a fit mixes its renormalised maps with the model's own distribution,
  with weight `m K / (n + m K)` (a Dirichlet prior centred on the model's
  prediction, worth `m` examples per class, `m` among 64, 16, 4 and 1 chosen
  by 5-fold cross-validation with the one-standard-error rule, 64 below
  `MIN_CROSS_VALIDATED` examples), and floors every class at
  `1 / (n K)`, so no probability is 0 and a map that saw no example of a
  class where a test example lands does not overrule the model alone;
  histogram binning then uses as many equal-mass bins as hold 3 examples
  each (`histogram.bins_for`), none of them empty;
- and warns. Each class's map is the plain one either way (isotonic
  regression stays scikit-learn's).

Ensemble temperature scaling mixes in the uniform distribution itself and
keeps temperature scaling's robust fit; it warns when a class has fewer than
`MIN_EXAMPLES_PER_CLASS` examples.

`benchmarks/small_validation.py` measures the rule: every calibrator on
about 30 validation examples of scikit-learn's data sets and a synthetic
task, over 20 seeds, and on trained networks' validation sets of scikit-learn's
data, against the bound test NLL <= 2 x uncalibrated + 0.1.
"""

from __future__ import annotations

import math

import numpy as np

from keras_ils._checks import number_in

__all__ = [
    "CROSS_VALIDATION_SECONDS",
    "EXAMPLES_PER_PARAMETER",
    "MIN_CROSS_VALIDATED",
    "NUM_FOLDS",
    "ONE_FOLD_EXAMPLES",
    "PRIOR_PRECISIONS",
    "check_prior_precision",
    "one_standard_error_choice",
    "parameter_count",
    "stratified_folds",
    "too_few_clause",
]

EXAMPLES_PER_PARAMETER = 10
NUM_FOLDS = 5
# fewer examples than two per fold: the one-vs-rest prior's strength is not cross-validated (the strongest is taken)
MIN_CROSS_VALIDATED = 2 * NUM_FOLDS
# examples from which one held-out fold of NUM_FOLDS chooses (its fifth, 2,000 examples or more, pins each candidate's
# held-out NLL down), where every fold would cost NUM_FOLDS times the fits
ONE_FOLD_EXAMPLES = 10_000
# seconds of wall clock the folds' fits of a map's regularisation (both stages) may take together
CROSS_VALIDATION_SECONDS = 300.0
# candidate prior precisions, most regularised first after temperature scaling's map itself (math.inf)
PRIOR_PRECISIONS = (math.inf, 1e4, 1e3, 1e2, 1e1, 1.0, 0.1)


def check_prior_precision(value) -> float | None:
    """`None` (cross-validated), or `value` as a float `>= 0` or `math.inf`, else the package's `ValueError`."""
    if value is None or (isinstance(value, float) and value == math.inf):
        return value
    return number_in(
        "prior_precision",
        value,
        0.0,
        expected="None (chosen by cross-validation), a float >= 0 (0: the plain fit) or math.inf (temperature scaling)",
    )


def parameter_count(method: str, num_classes: int) -> int:
    """The parameters of an affine map: `2K` for `"vector"`, `K^2 + K` for `"matrix"` and `"dirichlet"`."""
    return 2 * num_classes if method == "vector" else num_classes * num_classes + num_classes


def too_few_clause(method, num_examples, num_classes) -> str | None:
    """The warning clause of a fit with fewer than `EXAMPLES_PER_PARAMETER` examples per parameter, else `None`."""
    parameters = parameter_count(method, num_classes)
    if num_examples >= EXAMPLES_PER_PARAMETER * parameters:
        return None
    return (
        f"it rests on too few examples: {num_examples} validation examples for the {parameters} parameters of "
        f"{method} scaling/calibration of {num_classes} classes (fewer than {EXAMPLES_PER_PARAMETER} per parameter)"
    )


def stratified_folds(labels, num_folds: int = NUM_FOLDS) -> np.ndarray:
    """Each example's fold, `[n]` in `[0, min(num_folds, n))`: classes dealt round-robin after a fixed shuffle.

    Deterministic (the shuffle's seed is fixed), so a fit is reproducible;
    every class is spread over the folds as evenly as its count allows.

    Example:

    >>> stratified_folds([0, 0, 0, 1, 1, 1, 1, 2, 2, 2], num_folds=3)
    array([1, 2, 0, 2, 0, 0, 1, 1, 0, 2])
    """
    labels = np.asarray(labels)
    n = len(labels)
    shuffled = np.random.default_rng(0).permutation(n)
    order = shuffled[np.argsort(labels[shuffled], kind="stable")]
    folds = np.empty(n, dtype=np.int64)
    folds[order] = np.arange(n) % min(num_folds, n)
    return folds


def one_standard_error_choice(losses) -> int:
    """The first candidate (most regularised first) whose mean loss is within one standard error of the best.

    `losses` is `[candidates, n]`: each example's held-out loss under each
    candidate. The standard error is the best candidate's, `std / sqrt(n)`.

    Example:

    >>> losses = [[1.0, 1.2, 0.9, 1.1], [0.9, 1.1, 0.8, 1.0], [0.2, 2.5, 0.1, 1.0]]
    >>> one_standard_error_choice(losses)   # means 1.05, 0.95, 0.95; one standard error of the best: 0.065
    1
    """
    losses = np.asarray(losses, np.float64)
    means = losses.mean(axis=1)
    best = int(np.argmin(means))
    n = losses.shape[1]
    standard_error = losses[best].std(ddof=1) / math.sqrt(n) if n > 1 else 0.0
    return int(np.flatnonzero(means <= means[best] + standard_error)[0])
