"""What histogram binning and isotonic regression share: one-vs-rest maps of each class's probability, renormalised.

Each non-parametric calibrator maps the probability `p_j` of each class `j`
through a fitted non-decreasing function `h_j` (a step function for histogram
binning, a piecewise-linear one for isotonic regression), fitted one-vs-rest:
to the indicator `y == j` on the fitting set. The calibrated distribution is
the row renormalised, with a floor that keeps every probability off 0:

```
q_j = (h_j(p_j) + floor) / sum_k (h_k(p_k) + floor),    floor = 1 / n
```

for `n` fitting examples. A one-vs-rest map fitted on few examples returns 0
wherever it saw no example of its class (below a class's lowest-scored
example, isotonic regression is 0; a bin without the class has frequency 0),
and a test example of that class there would get an infinite NLL; `1 / n` is
the resolution of frequencies counted on `n` examples, and vanishes as `n`
grows. A row whose maps are all 0 (possible only with `floor=0`) is uniform.
The layers output `log q` (log-probabilities: `softmax` of them is `q`), or
`q` itself with `from_logits=False`, where they also take probabilities.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _labels
from keras_ils._checks import number_in
from keras_ils.calibration._float32 import float32_by_default, to_compute_dtype

__all__ = ["OneVsRestCalibration", "fitting_probabilities", "floor_for", "gather_per_class", "renormalised"]


def floor_for(num_examples: int) -> float:
    """The floor a fit on `num_examples` examples gives its layer: `1 / n`."""
    return 1.0 / num_examples


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


class OneVsRestCalibration(keras.layers.Layer):
    """Base of the one-vs-rest calibration layers: inputs to probabilities, `one_vs_rest`, renormalised output.

    Subclasses build their weights and implement `_each_class(probabilities)`, the per-class maps.
    """

    def __init__(self, floor: float = 0.0, from_logits: bool = True, **kwargs):
        super().__init__(**float32_by_default(kwargs))
        self.floor = number_in("floor", floor, 0.0, 1.0, expected="a float in [0, 1]")
        self.from_logits = bool(from_logits)

    def one_vs_rest(self, probabilities):
        """Each class's fitted map of its own probability, `[..., K] -> [..., K]`, before renormalising."""
        return self._each_class(to_compute_dtype(self, probabilities))

    def _each_class(self, probabilities):
        raise NotImplementedError

    def call(self, inputs):
        inputs = to_compute_dtype(self, inputs)
        probabilities = ops.softmax(inputs, axis=-1) if self.from_logits else ops.clip(inputs, 0.0, 1.0)
        values = self._each_class(probabilities) + ops.cast(self.floor, inputs.dtype)
        total = ops.sum(values, axis=-1, keepdims=True)
        num_classes = ops.cast(ops.shape(inputs)[-1], inputs.dtype)
        calibrated = ops.where(total > 0, values / ops.where(total > 0, total, 1.0), 1.0 / num_classes)
        if not self.from_logits:
            return calibrated
        return ops.log(ops.maximum(calibrated, keras.config.epsilon()))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "floor": self.floor, "from_logits": self.from_logits}


def gather_per_class(table, index):
    """`table[j, index[..., j]]` for every class `j`: `table [K, M]`, integer `index [..., K]` -> `[..., K]`."""
    num_classes, width = table.shape
    offsets = ops.arange(num_classes, dtype="int32") * width
    return ops.take(ops.reshape(table, (-1,)), ops.cast(index, "int32") + offsets)
