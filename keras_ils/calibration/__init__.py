"""Post-hoc calibration: temperature scaling and the affine maps beyond it, as fixed Keras layers.

Every calibrator is a layer that takes a classifier's logits (or probabilities
with `from_logits=False`) and returns calibrated logits, fitted on validation
outputs; `calibrate(model, data, method=...)` fits one and appends it to a
model.

| `method`        | layer                  | fitted by          | module        |
|-----------------|------------------------|--------------------|---------------|
| `"temperature"` | `TemperatureScaling`   | `fit_temperature`  | `temperature` |
| `"vector"`      | `VectorScaling`        | `fit_calibrator`   | `maps`        |
| `"matrix"`      | `MatrixScaling`        | `fit_calibrator`   | `maps`        |
| `"dirichlet"`   | `DirichletCalibration` | `fit_calibrator`   | `maps`        |

The fits (`temperature`, `solvers`) are float64 numpy, so they run the same under
every Keras backend.
"""

from keras_ils.calibration.maps import DirichletCalibration, MatrixScaling, VectorScaling
from keras_ils.calibration.model import LAYERS, METHODS, calibrate
from keras_ils.calibration.solvers import CalibratorFit, CalibratorFitWarning, fit_calibrator
from keras_ils.calibration.temperature import (
    ESTIMATORS,
    TemperatureFit,
    TemperatureFitWarning,
    TemperatureScaling,
    estimate_temperature,
    fit_temperature,
    fit_temperatures,
)

__all__ = [
    "ESTIMATORS",
    "LAYERS",
    "METHODS",
    "CalibratorFit",
    "CalibratorFitWarning",
    "DirichletCalibration",
    "MatrixScaling",
    "TemperatureFit",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "VectorScaling",
    "calibrate",
    "estimate_temperature",
    "fit_calibrator",
    "fit_temperature",
    "fit_temperatures",
]
