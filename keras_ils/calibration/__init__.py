"""Post-hoc calibration: temperature scaling, the affine maps, binning and ensembles, as fixed Keras layers.

Every calibrator is a layer that takes a classifier's logits (or probabilities
with `from_logits=False`) and returns calibrated logits (log-probabilities for
the binning and ensemble methods; probabilities with `from_logits=False`),
fitted on validation outputs; `calibrate(model, data, method=...)` fits one
and appends it to a model, `fit_calibrator(method, outputs, labels)` fits one
on arrays: the two public ways to fit. Every fit reports a `CalibratorFit`
(`return_fit=True`) and warns with a `CalibratorFitWarning` (temperature
scaling's subclass `TemperatureFitWarning`). `LAYERS` maps each method to its
layer class. Every layer computes in float32 under any global dtype policy.

| `method`                 | layer                        | fitted by                                 | module        |
|--------------------------|------------------------------|-------------------------------------------|---------------|
| `"temperature"`          | `TemperatureScaling`         | `fit_calibrator` (Newton on log T)        | `temperature` |
| `"vector"`               | `VectorScaling`              | `fit_calibrator` (L-BFGS)                 | `maps`        |
| `"matrix"`               | `MatrixScaling`              | `fit_calibrator` (L-BFGS, ODIR)           | `maps`        |
| `"dirichlet"`            | `DirichletCalibration`       | `fit_calibrator` (L-BFGS, ODIR)           | `maps`        |
| `"histogram"`            | `HistogramBinning`           | `fit_calibrator` (equal-mass bins)        | `histogram`   |
| `"isotonic"`             | `IsotonicCalibration`        | `fit_calibrator` (pool adjacent violators)| `isotonic`    |
| `"ensemble_temperature"` | `EnsembleTemperatureScaling` | `fit_calibrator` (T, then simplex weights)| `ensemble`    |

Temperature scaling and ensemble temperature scaling fit by passes over the
logits written in `keras.ops` (`_temperature_solver`: float32 passes,
compiled by the Keras backend and run on its device, the GPU when it has
one; logits that fit one CPU block are passed in numpy); so do the affine
fits' passes over large data (`_affine_passes`; numpy below n P = 5e5, where
a compiled call costs more than the pass), with their L-BFGS steps in numpy
(`solvers`). `_device` says where the passes run; none needs TensorFlow
under JAX or torch. `histogram` and `isotonic` are numpy (a sort per class
and a sequential pool-adjacent-violators pass).
`registry` holds the table and `fit_calibrator`, `model` holds `calibrate`.
`fit_temperature`, `estimate_temperature`, `fit_temperatures` and
`TemperatureFit` are deprecated (see `fit_calibrator`).

Small validation sets (tens of examples) are the normal case: `small_data`
holds the rule that keeps every calibrator sane there. A vector, matrix or
Dirichlet map is the maximum a posteriori map under a prior centred on
temperature scaling's map, its precision cross-validated on the validation
set (temperature scaling's map itself when nothing less regularised is
better, or when the chosen map separates the validation set, as a trained
network's often is at any size); histogram binning and
isotonic regression with a class under 20 examples are mixed with the
model's own distribution (weight `m K / (n + m K)`, `m` cross-validated) and floored off 0; every such
fit warns (`CalibratorFitWarning`).
"""

from keras_ils.calibration.ensemble import EnsembleTemperatureScaling
from keras_ils.calibration.histogram import HistogramBinning
from keras_ils.calibration.isotonic import IsotonicCalibration
from keras_ils.calibration.maps import DirichletCalibration, MatrixScaling, VectorScaling
from keras_ils.calibration.model import calibrate
from keras_ils.calibration.registry import LAYERS, METHODS, fit_calibrator
from keras_ils.calibration.reports import CalibratorFit, CalibratorFitWarning
from keras_ils.calibration.temperature import (
    ESTIMATORS,
    TemperatureFitWarning,
    TemperatureScaling,
    estimate_temperature,
    fit_temperature,
    fit_temperatures,
)
from keras_ils.calibration.venn_abers import VennAbersCalibration

__all__ = [
    "ESTIMATORS",
    "LAYERS",
    "METHODS",
    "CalibratorFit",
    "CalibratorFitWarning",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "VectorScaling",
    "VennAbersCalibration",
    "calibrate",
    "estimate_temperature",
    "fit_calibrator",
    "fit_temperature",
    "fit_temperatures",
]


def __getattr__(name):
    if name == "TemperatureFit":  # deprecated: warns, and returns `CalibratorFit`
        from keras_ils.calibration import temperature

        return temperature._report_alias()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
