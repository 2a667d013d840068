"""Evaluate a classifier in numpy: accuracy, NLL, the ECE family, Brier, bootstrap intervals.

The implementation lives in private modules and the public names are
re-exported here, so `keras_ils.evaluation.<name>` is the one address of each:

- `_scores`: `scores`, `evaluate`, `evaluate_outputs`, `paired_difference`
  (accuracy, NLL, ECE, cwECE, class-conditional ECE, Brier, MCE, adaptive
  ECE, smooth ECE, debiased L2 and KS calibration errors: `COLUMNS`, with
  bootstrap intervals), `top_label_bins`, `probabilities`;
- `_calibration`: `adaptive_ece`, `smooth_ece`, `debiased_calibration_error`,
  `ks_calibration_error` (calibration scores beyond equal-width ECE, also
  columns of `scores`), `brier_decomposition`;
- `_selective`: `risk_coverage_curve`, `aurc`, `augrc`, `risk_at_coverage`
  (selective classification: abstaining below a confidence threshold; AURC
  and AUGRC are columns of `scores` too);
- `_inputs`, the door every public score's inputs pass (finite, of the
  declared kind, labels in `[0, K)`, at least one example), and `_passes`,
  which reads `[n, K]` outputs a chunk of rows at a time.
"""

from keras_ils.evaluation._calibration import (
    BrierDecomposition,
    adaptive_ece,
    brier_decomposition,
    debiased_calibration_error,
    ks_calibration_error,
    smooth_ece,
)
from keras_ils.evaluation._scores import (
    COLUMNS,
    Interval,
    evaluate,
    evaluate_outputs,
    paired_difference,
    probabilities,
    scores,
    top_label_bins,
)
from keras_ils.evaluation._selective import RiskCoverageCurve, augrc, aurc, risk_at_coverage, risk_coverage_curve

__all__ = [
    "BrierDecomposition",
    "COLUMNS",
    "Interval",
    "RiskCoverageCurve",
    "adaptive_ece",
    "augrc",
    "aurc",
    "brier_decomposition",
    "debiased_calibration_error",
    "evaluate",
    "evaluate_outputs",
    "ks_calibration_error",
    "paired_difference",
    "probabilities",
    "risk_at_coverage",
    "risk_coverage_curve",
    "scores",
    "smooth_ece",
    "top_label_bins",
]
