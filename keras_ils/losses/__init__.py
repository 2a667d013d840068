"""The package's losses: `ILSLoss` and its functional form `ils_crossentropy`.

Each loss is a plain per-example function plus a thin `keras.losses.Loss`
subclass, the way Keras pairs `categorical_crossentropy` with
`CategoricalCrossentropy`. The baselines' losses live in
`keras_ils.baselines`, the distillation losses in `keras_ils.distillation`.
"""

from keras_ils.losses.ils import ILSLoss, ils_crossentropy

__all__ = ["ILSLoss", "ils_crossentropy"]
