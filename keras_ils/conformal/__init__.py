"""Split conformal classification: prediction sets that hold the true label with a stated probability.

A classifier's outputs on held-out calibration data fix a quantile of a
conformity score; a test example's set is every class whose score is within
it. On data exchangeable with the calibration set, the set holds the true
label with probability at least `1 - alpha`, whatever the model, whether it
is calibrated or not (a better model gives smaller sets).

- `conformalize(model, calibration_data, alpha=0.1, method="aps")` returns
  `model` followed by a fixed `ConformalSets` layer: a Keras model that
  outputs the `[n, K]` 0/1 mask of each set, saves as `.keras` and exports.
- `fit_conformal(method, outputs, labels, alpha=...)` fits the same layer on
  arrays; `conformal_quantile` is the finite-sample quantile itself.
- `METHODS`: `"lac"` (1 - p_y), `"aps"` (plain or `randomized=True`),
  `"raps"` (`k_reg`, `lam`) and `"top_k"`; `class_conditional=True` is
  Mondrian conformal prediction (a quantile per class).
- The sets' scores: `coverage`, `mean_set_size`, `size_stratified_coverage`,
  `class_conditional_coverage` (numpy), and the streaming metrics
  `SetCoverage`, `MeanSetSize`, `SizeStratifiedCoverage`,
  `ClassConditionalCoverage`.

The implementation lives in private modules: `_sets` (the scores and the
layer), `_fit` (the quantile, `fit_conformal`, `conformalize`) and `_scores`
(the sets' scores and metrics).
"""

from keras_ils.conformal._fit import ConformalFit, conformal_quantile, conformalize, fit_conformal, minimum_examples
from keras_ils.conformal._scores import (
    ClassConditionalCoverage,
    MeanSetSize,
    SetCoverage,
    SizeStratifiedCoverage,
    class_conditional_coverage,
    coverage,
    mean_set_size,
    size_stratified_coverage,
)
from keras_ils.conformal._sets import METHODS, ConformalSets

__all__ = [
    "METHODS",
    "ClassConditionalCoverage",
    "ConformalFit",
    "ConformalSets",
    "MeanSetSize",
    "SetCoverage",
    "SizeStratifiedCoverage",
    "class_conditional_coverage",
    "conformal_quantile",
    "conformalize",
    "coverage",
    "fit_conformal",
    "mean_set_size",
    "minimum_examples",
    "size_stratified_coverage",
]
