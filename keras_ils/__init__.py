"""keras_ils: Instance-based Label Smoothing (Maher & Kull, ICMLA 2021) for Keras 3.

The public names live here; `keras_ils.metrics`, `keras_ils.synthetic` and
`keras_ils.models` are the homes of their own families.
"""

from keras_ils import metrics, models, synthetic
from keras_ils.calibration import TemperatureScaling, calibrate, fit_temperature
from keras_ils.losses import ILSLoss
from keras_ils.targets import ils_targets, smoothing_factor, teacher_targets

__version__ = "0.1.0"

__all__ = [
    "ILSLoss",
    "TemperatureScaling",
    "calibrate",
    "fit_temperature",
    "ils_targets",
    "metrics",
    "models",
    "smoothing_factor",
    "synthetic",
    "teacher_targets",
]
