"""keras_ils: Instance-based Label Smoothing (Maher & Kull, ICMLA 2021) for Keras 3.

The public names live here; `keras_ils.metrics`, `keras_ils.models`,
`keras_ils.synthetic`, `keras_ils.datasets`, `keras_ils.training` and `keras_ils.tuning` are the
homes of their own families.
"""

from keras_ils import (
    baselines,
    datasets,
    distillation,
    evaluation,
    metrics,
    models,
    synthetic,
    training,
    tuning,
    vectorised,
)
from keras_ils.calibration import TemperatureScaling, calibrate, fit_temperature
from keras_ils.data import with_hard_labels, with_teacher_targets
from keras_ils.evaluation import evaluate
from keras_ils.losses import ILSLoss
from keras_ils.plots import reliability_diagram
from keras_ils.targets import ils_targets, smoothing_factor, teacher_targets
from keras_ils.teacher import OnlineTeacher, StaleCacheError, TeacherLogits, compute_teacher_logits

__version__ = "0.1.0"

__all__ = [
    "ILSLoss",
    "OnlineTeacher",
    "StaleCacheError",
    "TeacherLogits",
    "TemperatureScaling",
    "baselines",
    "calibrate",
    "compute_teacher_logits",
    "datasets",
    "distillation",
    "evaluate",
    "evaluation",
    "fit_temperature",
    "ils_targets",
    "metrics",
    "models",
    "reliability_diagram",
    "smoothing_factor",
    "synthetic",
    "teacher_targets",
    "training",
    "tuning",
    "vectorised",
    "with_hard_labels",
    "with_teacher_targets",
]
