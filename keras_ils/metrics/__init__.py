"""Calibration metrics as streaming Keras metrics.

Binning follows the paper (§2.2): `num_bins` equal-width bins,
`B_1 = [0, 1/N]`, `B_n = ((n-1)/N, n/N]`, so a probability `p` falls in bin
`clip(ceil(p * N) - 1, 0, N - 1)`.

State is per-bin sums (counts, confidences, correct predictions), added with
`assign_add` only, so the value after any batching, order or replica split
equals the value on the whole set at once, and `tf.distribute` sums replicas.

Every metric accepts the three `y_true` forms of the package: sparse labels,
one-hot/soft targets (read as their argmax) and teacher targets built by
`keras_ils.teacher_targets`. `y_pred` are probabilities unless
`from_logits=True`: the default is Keras' metrics' `False`, unlike `ILSLoss`'s
`True` (see `keras_ils.losses`), because it is the default whose misuse is
caught: probabilities are checked, and logits passed as probabilities are
refused with an error that names `from_logits=True`, while probabilities read
as logits would give a wrong value in silence.

| metric                               | what it is                                           |
|--------------------------------------|------------------------------------------------------|
| `ExpectedCalibrationError`           | confidence-ECE, paper Eq. 1                          |
| `ClasswiseExpectedCalibrationError`  | classwise-ECE, paper Eq. 2 (Kull et al. 2019)        |
| `ClassConditionalECE`                | the paper's printed "cwECE" (authors' code): mean   |
|                                      | over true classes of that class's top-label ECE      |
| `MaximumCalibrationError`            | largest |accuracy - confidence| over non-empty bins |
| `NegativeLogLikelihood`              | mean -log p_t                                        |
| `BrierScore`                         | mean sum_j (p_j - y_j)^2                             |
| `TopLabelAccuracy`                   | top-1 accuracy                                       |
| `InputCheck`                         | no score: the package losses' input checks, raised   |
|                                      | at the end of the epoch from a compiled step         |

Inside a compiled step (Keras' JAX steps, TensorFlow's, `torch.compile`) a
metric cannot raise without making the accelerator wait for the host: every
metric here counts bad labels and probabilities in its state instead, and
its `result()` raises the `ValueError` on the host, where Keras reads it at
the end of every epoch and of `evaluate` (`keras_ils._bad_input`).

The equal-mass (adaptive) ECE is not a metric here: its bins are the
confidences' ranks in the whole set, so no fixed per-bin sums stream it (a
batch's rows land in bins only the later batches decide), and accumulating
every prediction in a metric's state would break the fixed-size state that
`tf.distribute` and XLA need. Compute it on the whole set of predictions with
`keras_ils.evaluation.adaptive_ece` (a `scores`/`evaluate` key).
"""

from keras_ils.metrics.binned import (
    ClassConditionalECE,
    ClasswiseExpectedCalibrationError,
    ExpectedCalibrationError,
    MaximumCalibrationError,
    bin_index,
)
from keras_ils.metrics.input_check import InputCheck
from keras_ils.metrics.means import BrierScore, NegativeLogLikelihood, TopLabelAccuracy, calibration_metrics

__all__ = [
    "BrierScore",
    "ClassConditionalECE",
    "ClasswiseExpectedCalibrationError",
    "ExpectedCalibrationError",
    "InputCheck",
    "MaximumCalibrationError",
    "NegativeLogLikelihood",
    "TopLabelAccuracy",
    "bin_index",
    "calibration_metrics",
]
