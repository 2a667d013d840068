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

A class absent from the fitting set would get a map that is 0 everywhere
(none of its examples is a positive): the absence read as proof that the
class never occurs, so that a test example of a class merely missing from
the validation set (left out of a split, or too rare to be drawn) would keep
only the floor and the model's share. Its map is instead the one fitted to
every class's `(p_k, y == k)` pairs pooled: with no evidence about the class
itself, its probability is corrected as the model's probabilities are on the
whole. (Its count, 0, also brings in the small-data rule above; the registry
warns about the missing class.)

A row whose maps are all 0 (possible only with `floor=0`) is uniform. The
layers output `log q` (log-probabilities: `softmax` of them is `q`), or `q`
itself with `from_logits=False`, where they also take probabilities.

Where the work runs. The layers are `keras.ops`, so they run where the model
runs (on the GPU when there is one); each class's map is read by a binary
search over its points (`count_below`), in `O(N K log M)` work and `O(N K)`
memory for `N` rows and `M` points per class. The fits are float64 numpy
on the host, all classes at once, over class-major `[K, n]` probabilities
(`fitting_probabilities`): their cost is one sort of each class's
probabilities (`sorted_per_class`) and a few passes over them, plus, for
isotonic regression, one sequential pool-adjacent-violators pass over at
most `2 n + K` segments. TensorFlow's sort on a CPU is several times slower
than numpy's and the pooling is sequential, so numpy is the cheaper place
for the fits (and they give the same maps under every Keras backend).
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
    "count_below",
    "cross_validated_model_weight",
    "first_position",
    "fitting_probabilities",
    "fitting_settings",
    "gather_per_class",
    "label_losses",
    "sorted_per_class",
]


# the candidate strengths of the small-set prior, in examples per class, strongest (nearest the model) first
PRIOR_EXAMPLES_PER_CLASS = (64.0, 16.0, 4.0, 1.0)
_ROWS_PER_BLOCK = 128  # rows of outputs per block of `fitting_probabilities` (a block and its transpose in cache)


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
    `[K, n_test]` on the held-out fold (probabilities class-major, as
    `fitting_probabilities` returns them); each candidate's held-out NLL is
    that of the layers' `q` with the training folds' floor and model weight
    (`label_losses`); the one-standard-error rule
    (`small_data.one_standard_error_choice`) picks the strongest prior within
    one standard error of the best. With fewer than
    `small_data.MIN_CROSS_VALIDATED` examples (two per fold) the strongest
    prior is the choice, without cross-validation.
    """
    num_classes, n = probabilities.shape
    if n < small_data.MIN_CROSS_VALIDATED:
        return PRIOR_EXAMPLES_PER_CLASS[0]
    folds = small_data.stratified_folds(labels)
    losses = np.zeros((len(PRIOR_EXAMPLES_PER_CLASS), n))
    for fold in range(folds.max() + 1):
        train, test = folds != fold, folds == fold
        train_probabilities, test_probabilities = (
            np.compress(train, probabilities, 1),
            np.compress(test, probabilities, 1),
        )
        values = held_out_map(train_probabilities, labels[train], test_probabilities)  # class-major, C-ordered
        for c, prior_examples in enumerate(PRIOR_EXAMPLES_PER_CLASS):
            floor, model_weight = fitting_settings(int(train.sum()), num_classes, True, prior_examples)
            losses[c, test] = label_losses(values, test_probabilities, labels[test], floor, model_weight)
    return PRIOR_EXAMPLES_PER_CLASS[small_data.one_standard_error_choice(losses)]


def fitting_probabilities(outputs, labels, from_logits: bool, name: str = "outputs") -> tuple:
    """`(probabilities [K, n], labels [n])`, checked: what the one-vs-rest fits read, float64 and class-major, int64.

    Class-major (each class's `n` probabilities contiguous) is the layout of
    the fits' per-class sorts and maps. The softmax runs over blocks of rows,
    each written transposed, which costs less than either a softmax over a
    transposed copy or a transposed copy of the softmax.
    """
    outputs, labels = _labels.outputs_and_labels(outputs, labels, name=name)
    if not from_logits:
        _labels.check_probabilities(outputs)
    probabilities = np.empty(outputs.shape[::-1])
    for start in range(0, len(outputs), _ROWS_PER_BLOCK):
        block = outputs[start : start + _ROWS_PER_BLOCK]
        if from_logits:
            block = np.exp(block - block.max(axis=1, keepdims=True))
            block /= block.sum(axis=1, keepdims=True)
        probabilities[:, start : start + _ROWS_PER_BLOCK] = block.T
    return np.clip(probabilities, 0.0, 1.0, out=probabilities), labels.astype(np.int64)  # flat indices reach n K


def sorted_per_class(probabilities) -> np.ndarray:
    """Each class's probabilities in increasing order: `[K, n]` class-major in, a sorted C-ordered copy out."""
    ordered = np.array(probabilities, order="C")
    ordered.sort(axis=1)
    return ordered


def first_position(lo, hi, reached) -> np.ndarray:
    """For each query, the first integer `t` in `[lo, hi)` where `reached(t)` holds, or `hi`: vectorised bisection.

    `reached` maps an int64 array of positions (one per query) to booleans
    and must be false then true along each query's range; it may be probed
    at positions outside the ranges of queries already answered.
    """
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        hit = active & reached(mid)
        hi = np.where(hit, mid, hi)
        lo = np.where(active & ~hit, mid + 1, lo)


def label_losses(values, probabilities, labels, floor: float, model_weight: float) -> np.ndarray:
    """Each example's `-log q[label]` in float64 numpy, for the maps' `values [K, n]`: the fits' NLL, as the layers.

    `q` is the renormalised values with the floor, mixed with the model's
    `probabilities [K, n]` (module docstring); a row whose values and floor
    are all 0 is uniform.
    """
    num_classes, n = values.shape
    total = values.sum(axis=0) + num_classes * floor
    own = values[labels, np.arange(n)] + floor
    renormalised = np.where(total > 0, own / np.where(total > 0, total, 1.0), 1.0 / num_classes)
    chosen = (1.0 - model_weight) * renormalised + model_weight * probabilities[labels, np.arange(n)]
    return -np.log(np.maximum(chosen, np.finfo(np.float64).tiny))


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
    """`table[j, index[..., j]]` for every class `j`: `table [K, M, ...]`, int `index [..., K]` -> `[..., K, ...]`."""
    num_classes, width = table.shape[:2]
    offsets = ops.arange(num_classes, dtype="int32") * width
    flat = ops.reshape(table, (num_classes * width, *table.shape[2:]))
    return ops.take(flat, ops.cast(index, "int32") + offsets, axis=0)


def count_below(table, x):
    """`#{m : table[j, m] < x[..., j]}` for every class `j`, int32: `table [K, M]` with non-decreasing rows.

    A bisection of every class's row at once: `ceil(log2(M + 1))` steps,
    each one `gather_per_class`, so the work is `O(N K log M)` and the
    memory `O(N K)` for `N` rows, never `[..., K, M]`. Plain ops, unrolled
    over a count fixed by the table's shape: no function is traced per call
    (`ops.vectorized_map` traced one each time an eager caller scored a
    batch, and TensorFlow warned of the retracing).

    Example:

    >>> table = np.array([[0.1, 0.5, 0.9], [0.2, 0.2, 0.7]])
    >>> keras.ops.convert_to_numpy(count_below(table, np.array([[0.5, 0.3], [1.0, 0.2]]))).tolist()
    [[1, 2], [3, 0]]
    """
    num_classes, width = table.shape
    if not width:
        return ops.zeros_like(x, dtype="int32")
    x = ops.convert_to_tensor(x)
    low = ops.zeros_like(x, dtype="int32")
    high = ops.full(ops.shape(x), width, dtype="int32")
    for _ in range(int(np.ceil(np.log2(width + 1)))):
        middle = (low + high) // 2
        below = ops.less(gather_per_class(table, ops.minimum(middle, width - 1)), x)
        active = ops.less(low, high)
        low = ops.where(ops.logical_and(active, below), middle + 1, low)
        high = ops.where(ops.logical_and(active, ops.logical_not(below)), middle, high)
    return low
