"""keras_ils: calibrated Keras classifiers, with Instance-based Label Smoothing (Maher & Kull, ICMLA 2021).

The names users type live here. Each family has its own home:
`keras_ils.losses`, `keras_ils.metrics`, `keras_ils.calibration` (temperature
scaling and the maps beyond it), `keras_ils.methods` (the registry of
comparison methods), `keras_ils.baselines`, `keras_ils.distillation`,
`keras_ils.evaluation` (with abstention scores), `keras_ils.conformal` (prediction sets with a coverage
guarantee), `keras_ils.plots` and `keras_ils.tuning` (KerasTuner).
`keras_ils.compare` (`keras_ils.comparison`) runs every method and calibrator on your model and data, with a
verdict.
`import keras_ils` costs what `import keras` costs: KerasTuner loads on the
first use of `keras_ils.tuning` or `keras_ils.compare`, matplotlib on the
first plot, TensorFlow on the first use of the `tf.data` parts
(`with_teacher_targets`, `with_hard_labels`, the teacher's cache,
`compare`). Under `KERAS_BACKEND=jax` or `torch` the losses,
targets, metrics, calibration layers, `conformal`, `evaluation`, `plots` and
the distillation losses run where TensorFlow is not installed. The paper's
machinery is a sibling package installed beside it, `keras_ils_experiments`
(its `experiments` extra brings tensorflow-datasets), built on this library
and never imported by it.
"""

import importlib

from keras_ils import baselines, calibration, conformal, distillation, evaluation, losses, methods, metrics, plots
from keras_ils.calibration import (
    CalibratorFit,
    CalibratorFitWarning,
    DirichletCalibration,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    TemperatureFitWarning,
    TemperatureScaling,
    VectorScaling,
    calibrate,
    estimate_temperature,
    fit_calibrator,
    fit_temperature,
)
from keras_ils.conformal import conformalize, fit_conformal
from keras_ils.evaluation import evaluate
from keras_ils.losses import (
    FocalLoss,
    ILSLoss,
    MarginLabelSmoothingLoss,
    MDCALoss,
    MMCELoss,
    OnlineLabelSmoothing,
    OnlineLabelSmoothingCallback,
    OnlineLabelSmoothingWarning,
    ils_crossentropy,
)
from keras_ils.online_teacher import OnlineTeacher
from keras_ils.plots import reliability_diagram
from keras_ils.targets import ils_targets, smoothing_factor, teacher_targets

__version__ = "0.2.0"

_LAZY_MODULES = ("tuning", "comparison", "data", "teacher")  # KerasTuner; TensorFlow (`tf.data`)
_LAZY_NAMES = {  # TensorFlow's `tf.data`: loaded on first use, so the core runs where TensorFlow is absent
    "with_hard_labels": "data",
    "with_teacher_targets": "data",
    "StaleCacheError": "teacher",
    "TeacherLogits": "teacher",
    "compute_teacher_logits": "teacher",
}


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(f"keras_ils.{name}")
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f"keras_ils.{_LAZY_NAMES[name]}"), name)
    if name in ("compare", "Comparison"):  # the main job: TensorFlow datasets, KerasTuner, the engine
        return getattr(importlib.import_module("keras_ils.comparison"), name)
    if name == "TemperatureFit":  # deprecated: warns, and returns `CalibratorFit`
        return calibration.temperature._report_alias()
    raise AttributeError(f"module 'keras_ils' has no attribute {name!r}")


__all__ = [
    "CalibratorFit",
    "CalibratorFitWarning",
    "Comparison",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "FocalLoss",
    "HistogramBinning",
    "ILSLoss",
    "IsotonicCalibration",
    "MDCALoss",
    "MMCELoss",
    "MarginLabelSmoothingLoss",
    "MatrixScaling",
    "OnlineLabelSmoothing",
    "OnlineLabelSmoothingCallback",
    "OnlineLabelSmoothingWarning",
    "OnlineTeacher",
    "StaleCacheError",
    "TeacherLogits",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "VectorScaling",
    "baselines",
    "calibrate",
    "calibration",
    "compare",
    "comparison",
    "compute_teacher_logits",
    "conformal",
    "conformalize",
    "distillation",
    "estimate_temperature",
    "evaluate",
    "evaluation",
    "fit_calibrator",
    "fit_conformal",
    "fit_temperature",
    "ils_crossentropy",
    "ils_targets",
    "losses",
    "methods",
    "metrics",
    "plots",
    "reliability_diagram",
    "smoothing_factor",
    "teacher_targets",
    "tuning",
    "with_hard_labels",
    "with_teacher_targets",
]
