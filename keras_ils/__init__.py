"""keras_ils: Instance-based Label Smoothing (Maher & Kull, ICMLA 2021) for Keras 3.

The method, what a Keras user imports: the public names live here, and `keras_ils.metrics`,
`keras_ils.calibrators`, `keras_ils.baselines`, `keras_ils.distillation`, `keras_ils.evaluation` and
`keras_ils.tuning` are the homes of their own families. The paper's experiment machinery (synthetic task,
datasets by name, model zoo and recipes, the many-students trainer, the pipeline behind `keras-ils`, the
synthetic protocol) is `keras_ils.experiments`, built on this library and never imported by it.
"""

from keras_ils import baselines, calibrators, distillation, evaluation, metrics, tuning
from keras_ils.calibration import (
    TemperatureFit,
    TemperatureFitWarning,
    TemperatureScaling,
    calibrate,
    estimate_temperature,
    fit_temperature,
)
from keras_ils.calibrators import (
    CalibratorFit,
    CalibratorFitWarning,
    DirichletCalibration,
    MatrixScaling,
    VectorScaling,
    fit_calibrator,
)
from keras_ils.data import with_hard_labels, with_teacher_targets
from keras_ils.evaluation import evaluate
from keras_ils.losses import ILSLoss
from keras_ils.plots import reliability_diagram
from keras_ils.targets import ils_targets, smoothing_factor, teacher_targets
from keras_ils.teacher import OnlineTeacher, StaleCacheError, TeacherLogits, compute_teacher_logits

__version__ = "0.2.0"

__all__ = [
    "CalibratorFit",
    "CalibratorFitWarning",
    "DirichletCalibration",
    "ILSLoss",
    "MatrixScaling",
    "OnlineTeacher",
    "StaleCacheError",
    "TeacherLogits",
    "TemperatureFit",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "VectorScaling",
    "baselines",
    "calibrate",
    "calibrators",
    "compute_teacher_logits",
    "distillation",
    "evaluate",
    "estimate_temperature",
    "evaluation",
    "fit_calibrator",
    "fit_temperature",
    "ils_targets",
    "metrics",
    "reliability_diagram",
    "smoothing_factor",
    "teacher_targets",
    "tuning",
    "with_hard_labels",
    "with_teacher_targets",
]
