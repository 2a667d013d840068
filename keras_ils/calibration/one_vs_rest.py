"""What histogram binning and isotonic regression share: one-vs-rest maps of each class's probability, renormalised.

Each non-parametric calibrator maps the probability `p_j` of each class `j`
through a fitted non-decreasing function `h_j` (a step function for histogram
binning, a piecewise-linear one for isotonic regression), fitted one-vs-rest:
to the indicator `y == j` on the fitting set. The calibrated distribution is
the row renormalised, with a floor that keeps every probability off 0, and
mixed with the model's own distribution `p` with weight `model_weight`:

```
q_j = (1 - model_weight) * (h_j(p_j) + floor) / sum_k (h_k(p_k) + floor) + model_weight * p_j
```

A one-vs-rest map fitted on few examples returns 0 wherever it saw no
example of its class (below a class's lowest-scored example, isotonic
regression is 0; a bin without the class has frequency 0), and a test example
of that class there would get an infinite NLL. The fits choose (see
`fitting_settings`):

- with enough examples (every class at least `MIN_EXAMPLES_PER_CLASS`, and
  for histogram binning `num_bins` bins of `num_bins` examples), the classic
  maps: `floor = 1 / n` for `n` fitting examples (the resolution of
  frequencies counted on `n` examples, vanishing as `n` grows) and
  `model_weight = 0`;
- on a small set (the small-data rule, `keras_ils.calibration.small_data`),
  `floor = 1 / (n K)` (a row's floors add up to `1 / n`) and
  `model_weight = m K / (n + m K)`: the posterior mean of the calibrated
  distribution under a Dirichlet prior centred on the model's prediction and
  worth `m` examples per class, so that a map that saw no example of a class
  where a test example lands leaves it the model's own probability, in part,
  rather than the floor alone. The prior's strength `m` is chosen among
  `PRIOR_EXAMPLES_PER_CLASS` by stratified 5-fold cross-validation on the
  fitting set (`cross_validated_model_weight`, the one-standard-error rule,
  the strongest prior first; the strongest below 10 examples), as the affine
  maps' prior is: a fixed `m = 1`
  let histogram binning on 21-25 validation examples of a trained network
  triple its test NLL.

A row whose maps are all 0 (possible only with `floor=0`) is uniform. The
layers output `log q` (log-probabilities: `softmax` of them is `q`), or `q`
itself with `from_logits=False`, where they also take probabilities.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _labels
from keras_ils._checks import number_in
from keras_ils.calibration import small_data
from keras_ils.calibration._float32 import float32_by_default, to_compute_dtype

__all__ = [
    "PRIOR_EXAMPLES_PER_CLASS",
    "OneVsRestCalibration",
    "calibrated",
    "cross_validated_model_weight",
    "fitting_probabilities",
    "fitting_settings",
    "gather_per_class",
    "renormalised",
]


# the candidate strengths of the small-set prior, in examples per class, strongest (nearest the model) first
PRIOR_EXAMPLES_PER_CLASS = (64.0, 16.0, 4.0, 1.0)


def fitting_settings(num_examples: int, num_classes: int, small: bool, prior_examples: float) -> tuple:
    """`(floor, model_weight)` of a fit on `n` examples of `K` classes: `(1 / n, 0)`, or on a small set
    `(1 / (n K), m K / (n + m K))` for a prior worth `m = prior_examples` per class (see the module docstring)."""
    if not small:
        return 1.0 / num_examples, 0.0
    prior = prior_examples * num_classes
    return 1.0 / (num_examples * num_classes), prior / (num_examples + prior)


def cross_validated_model_weight(held_out_map, probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The prior's strength `m` (examples per class) among `PRIOR_EXAMPLES_PER_CLASS` chosen by cross-validation.

    `held_out_map(train_probabilities, train_labels, test_probabilities)`
    fits the per-class maps on the training folds and returns their values
    `[n_test, K]` on the held-out fold; each candidate's held-out NLL is that
    of `calibrated` with the training folds' floor and model weight; the
    one-standard-error rule (`small_data.one_standard_error_choice`) picks the
    strongest prior within one standard error of the best. With fewer than
    `small_data.MIN_CROSS_VALIDATED` examples (two per fold) the strongest
    prior is the choice, without cross-validation.
    """
    n, num_classes = probabilities.shape
    if n < small_data.MIN_CROSS_VALIDATED:
        return PRIOR_EXAMPLES_PER_CLASS[0]
    folds = small_data.stratified_folds(labels)
    losses = np.zeros((len(PRIOR_EXAMPLES_PER_CLASS), n))
    for fold in range(folds.max() + 1):
        train, test = folds != fold, folds == fold
        values = held_out_map(probabilities[train], labels[train], probabilities[test])
        for c, prior_examples in enumerate(PRIOR_EXAMPLES_PER_CLASS):
            floor, model_weight = fitting_settings(int(train.sum()), num_classes, True, prior_examples)
            chosen = calibrated(values, probabilities[test], floor, model_weight)[np.arange(test.sum()), labels[test]]
            losses[c, test] = -np.log(np.maximum(chosen, np.finfo(np.float64).tiny))
    return PRIOR_EXAMPLES_PER_CLASS[small_data.one_standard_error_choice(losses)]


def fitting_probabilities(outputs, labels, from_logits: bool, name: str = "outputs") -> tuple:
    """`(probabilities as float64 [n, K], labels [n])`, checked: what the one-vs-rest fits read."""
    outputs, labels = _labels.outputs_and_labels(outputs, labels, name=name)
    if not from_logits:
        _labels.check_probabilities(outputs)
        return np.clip(outputs, 0.0, 1.0), labels
    shifted = np.exp(outputs - outputs.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True), labels


def renormalised(values, floor: float):
    """`(values + floor) / row sum` in float64 numpy: the layers' renormalisation, for the fits' reports."""
    values = values + floor
    total = values.sum(axis=1, keepdims=True)
    uniform = np.full_like(values, 1.0 / values.shape[1])
    return np.where(total > 0, values / np.where(total > 0, total, 1.0), uniform)


def calibrated(values, probabilities, floor: float, model_weight: float):
    """The layers' `q` in float64 numpy, for the fits' reports: renormalised `values`, mixed with the model's."""
    return (1.0 - model_weight) * renormalised(values, floor) + model_weight * probabilities


class OneVsRestCalibration(keras.layers.Layer):
    """Base of the one-vs-rest calibration layers: inputs to probabilities, `one_vs_rest`, renormalised output.

    Subclasses build their weights and implement `_each_class(probabilities)`, the per-class maps.
    """

    def __init__(self, floor: float = 0.0, from_logits: bool = True, model_weight: float = 0.0, **kwargs):
        super().__init__(**float32_by_default(kwargs))
        self.floor = number_in("floor", floor, 0.0, 1.0, expected="a float in [0, 1]")
        self.model_weight = number_in("model_weight", model_weight, 0.0, 1.0, expected="a float in [0, 1]")
        self.from_logits = bool(from_logits)

    def one_vs_rest(self, probabilities):
        """Each class's fitted map of its own probability, `[..., K] -> [..., K]`, before renormalising."""
        return self._each_class(to_compute_dtype(self, probabilities))

    def _each_class(self, probabilities):
        raise NotImplementedError

    def call(self, inputs):
        inputs = to_compute_dtype(self, inputs)
        if self.from_logits:
            probabilities = ops.softmax(inputs, axis=-1)
        else:
            probabilities = ops.clip(inputs, 0.0, 1.0)
        values = self._each_class(probabilities) + ops.cast(self.floor, inputs.dtype)
        total = ops.sum(values, axis=-1, keepdims=True)
        num_classes = ops.cast(ops.shape(inputs)[-1], inputs.dtype)
        calibrated = ops.where(total > 0, values / ops.where(total > 0, total, 1.0), 1.0 / num_classes)
        if self.model_weight:
            model = probabilities / ops.maximum(ops.sum(probabilities, axis=-1, keepdims=True), 1e-30)
            calibrated = (1.0 - self.model_weight) * calibrated + self.model_weight * model
        if not self.from_logits:
            return calibrated
        return ops.log(ops.maximum(calibrated, keras.config.epsilon()))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = {**super().get_config(), "floor": self.floor, "from_logits": self.from_logits}
        return {**config, "model_weight": self.model_weight}


def gather_per_class(table, index):
    """`table[j, index[..., j]]` for every class `j`: `table [K, M]`, integer `index [..., K]` -> `[..., K]`."""
    num_classes, width = table.shape
    offsets = ops.arange(num_classes, dtype="int32") * width
    return ops.take(ops.reshape(table, (-1,)), ops.cast(index, "int32") + offsets)
