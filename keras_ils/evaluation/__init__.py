"""Evaluate a classifier in numpy: accuracy, NLL, the ECE family, Brier, bootstrap intervals.

The implementation lives in private modules and the public names are
re-exported here, so `keras_ils.evaluation.<name>` is the one address of each:

- `_scores`: `scores`, `evaluate`, `evaluate_outputs`, `paired_difference`
  (accuracy, NLL, ECE, cwECE, class-conditional ECE, Brier, MCE, adaptive
  ECE, with bootstrap intervals), `top_label_bins`, `adaptive_ece`,
  `probabilities`.
"""

from keras_ils.evaluation._scores import (
    COLUMNS,
    Interval,
    adaptive_ece,
    evaluate,
    evaluate_outputs,
    paired_difference,
    probabilities,
    scores,
    top_label_bins,
)

__all__ = [
    "COLUMNS",
    "Interval",
    "adaptive_ece",
    "evaluate",
    "evaluate_outputs",
    "paired_difference",
    "probabilities",
    "scores",
    "top_label_bins",
]
