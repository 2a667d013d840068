"""The package's losses: `ILSLoss` and the calibration losses, each with its functional form.

Each loss is a plain per-example function plus a thin `keras.losses.Loss`
subclass, the way Keras pairs `categorical_crossentropy` with
`CategoricalCrossentropy`:

- `ILSLoss` / `ils_crossentropy` (`losses/ils.py`): no LS, LS, ILS1, ILS2, ILS;
- `FocalLoss` / `focal_crossentropy` (`losses/focal.py`): focal loss, FLSD-53;
- `MarginLabelSmoothingLoss` / `margin_label_smoothing_crossentropy`
  (`losses/margin.py`): MbLS;
- `MMCELoss` / `mmce_crossentropy` (`losses/mmce.py`) and `MDCALoss` /
  `mdca_crossentropy` (`losses/mdca.py`): cross-entropy plus a batch-level
  calibration penalty;
- `OnlineLabelSmoothing` with `OnlineLabelSmoothingCallback` /
  `online_label_smoothing_crossentropy` (`losses/online.py`): OLS; without
  its callback it warns (`OnlineLabelSmoothingWarning`).

The baselines' losses live in `keras_ils.baselines`, the distillation losses
in `keras_ils.distillation`.

`functional_form(loss)` (`losses/forms.py`) gives a loss as plain functions
(`FunctionalForm`): the per-example function, its settings, a batch term
(MMCE's, MDCA's penalty), targets made once from `y_true` (ILS's), settings
learned once an epoch (OLS's soft labels, `EpochState`). The functions
broadcast over a leading models axis (`y_pred` `[M, batch, K]`, settings
`[M, 1, 1]`), which is how the vectorised engine of `keras_ils.comparison`
trains many models' losses at once with this package's code, and any
`keras.losses.LossFunctionWrapper`'s.

Every loss here takes `from_logits` (default `True`). Told `from_logits=False`,
a loss refuses `y_pred` that cannot be probabilities (a value outside
`[0, 1]`, a row not summing to 1 within 1 %), since logits would otherwise
train silently on a wrong loss, and every loss refuses bad labels: eagerly
with a `ValueError`; inside a compiled step (Keras' JAX step, TensorFlow's,
with or without XLA), where raising would make the device wait for the host,
the batch's loss and gradients are NaN, and a package metric (or
`keras_ils.metrics.InputCheck()`) raises the `ValueError` at the end of the
epoch (`keras_ils._bad_input`); a model compiled with a package loss and no
package metric warns so when its step is first traced
(`UncheckedLossWarning`). In a TensorFlow graph the output of a softmax
(a model ending in `activation="softmax"`) is a distribution by construction
and is not checked.
"""

from keras_ils._bad_input import UncheckedLossWarning
from keras_ils.losses.focal import FocalLoss, focal_crossentropy
from keras_ils.losses.forms import EpochState, FunctionalForm, functional_form
from keras_ils.losses.ils import ILSLoss, ils_crossentropy
from keras_ils.losses.margin import MarginLabelSmoothingLoss, margin_label_smoothing_crossentropy
from keras_ils.losses.mdca import MDCALoss, mdca_crossentropy
from keras_ils.losses.mmce import MMCELoss, mmce_crossentropy
from keras_ils.losses.online import (
    OnlineLabelSmoothing,
    OnlineLabelSmoothingCallback,
    OnlineLabelSmoothingWarning,
    online_label_smoothing_crossentropy,
)

__all__ = [
    "EpochState",
    "FocalLoss",
    "FunctionalForm",
    "ILSLoss",
    "MDCALoss",
    "MMCELoss",
    "MarginLabelSmoothingLoss",
    "OnlineLabelSmoothing",
    "OnlineLabelSmoothingCallback",
    "OnlineLabelSmoothingWarning",
    "UncheckedLossWarning",
    "focal_crossentropy",
    "functional_form",
    "ils_crossentropy",
    "margin_label_smoothing_crossentropy",
    "mdca_crossentropy",
    "mmce_crossentropy",
    "online_label_smoothing_crossentropy",
]
