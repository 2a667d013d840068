"""Inductive Venn-Abers calibration (Vovk, Petej & Fedorova 2015) of the top label: the layer and its fit.

A Venn-Abers predictor is binary. It scores a test example `s` by two
isotonic regressions fitted on the validation scores with the test example
added, once with label 0 and once with label 1; their values at `s`,
`p0 <= p1`, bracket a probability that is valid (perfectly calibrated in a
finite-sample sense) whatever the model. The calibrated probability merges
them as `p1 / (1 - p0 + p1)`, the minimax choice under log loss; it lies
strictly between 0 and 1, since the fit with label 1 is never 0 at the added
example, nor the fit with label 0 ever 1.

The binary problem here is the top label's, for any number of classes (two
included): the score is the model's largest probability and the label
whether its class is the true one (the top-label reduction of Gupta & Ramdas
2022). The top class gets the merged probability `q`, and the other classes
share `1 - q` in proportion to the model's probabilities. Every validation
example takes part in the one problem, so the bracket narrows as `1 / n`.

The per-class reductions do not: one-vs-rest (renormalised; MAPIE's and the
`venn-abers` package's `va_tpe="one_vs_all"`) and one-vs-one (their
default, pairwise coupling) give each class's problem only its own `n / K`
positives (`2 n / K` examples). `p1` of a class the model rules out is then
about `1 / (m + 1)`, `m` the validation examples between its score and the
class's positives: at 32 classes and 18 validation examples a class, the 31
wrong classes' `p1` added up to about 0.3 of every row after renormalising,
and a network with test NLL 0.02-0.06 came out at 0.31-0.49 one-vs-rest
(1.7 one-vs-one); the top label's fit gives 0.04 there.

Both values depend on `s` only through its place among the `M` distinct
validation scores, so the fit tabulates them for the `M + 1` places
(`venn_abers_tables`) and the layer looks them up.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _labels
from keras_ils._checks import integer_at_least
from keras_ils._outputs import log_probabilities_tensor
from keras_ils.calibration._float32 import float32_by_default, known_classes, to_compute_dtype
from keras_ils.calibration.reports import CalibratorFit, message, rare_classes

__all__ = ["VennAbersCalibration", "fit_venn_abers", "venn_abers_tables"]

_PAST_EVERY_SCORE = 2.0  # the padding of the score table: above every probability, never counted
_NO_MASS = -1e30  # the top class's log-probability left out of the others' share (exp underflows to 0)


@keras.saving.register_keras_serializable(package="keras_ils")
class VennAbersCalibration(keras.layers.Layer):
    """Inductive Venn-Abers calibration of the top label: its probability through two tabulated isotonic fits.

    `scores` holds the distinct validation top-label probabilities in
    increasing order (padded with 2), and `lower[i]`, `upper[i]` the values
    `p0`, `p1` at a test score with `i` validation scores below it (for
    `p0`, at or below it: a tie joins the validation example's group). The
    top class (the largest probability, the first of ties) gets
    `q = p1 / (1 - p0 + p1)`, every other class `j` its share of `1 - q` in
    proportion to `p_j`, computed in log space (a class the model gives
    `1e-30` keeps its place). Fitted by `fit_calibrator("venn_abers", ...)`;
    a layer built directly gives the top label `1 / 2` until its weights are
    set.

    Formula:

    ```
    s = max_k p_k,  t = argmax_k p_k
    p0 = lower[#{m : scores[m] <= s}],   p1 = upper[#{m : scores[m] < s}]
    q_t = p1 / (1 - p0 + p1),   q_j = (1 - q_t) p_j / sum_{k != t} p_k   (j != t)
    ```

    Args:
        num_points: distinct validation scores (`M`), `>= 1`. Defaults to `1`.
        from_logits: whether the inputs are logits (then the outputs are
            log-probabilities) or probabilities (then so are the outputs).
            Defaults to `True`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = VennAbersCalibration(num_points=2, from_logits=False)
    >>> layer.build((None, 3))
    >>> layer.set_weights([np.array([0.6, 0.9]), np.array([0.0, 0.5, 0.5]), np.array([0.5, 1.0, 1.0])])
    >>> p0, p1 = layer.interval(np.array([[0.7, 0.2, 0.1]]))   # one validation score below 0.7
    >>> keras.ops.convert_to_numpy(p0).tolist(), keras.ops.convert_to_numpy(p1).tolist()
    ([[0.5]], [[1.0]])
    >>> np.round(keras.ops.convert_to_numpy(layer(np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]))), 4)
    array([[0.6667, 0.2222, 0.1111],
           [0.125 , 0.375 , 0.5   ]], dtype=float32)

    References:
        Vovk, Petej & Fedorova (2015), "Large-scale probabilistic predictors
        with and without guarantees of validity", NeurIPS; Gupta & Ramdas
        (2022), "Top-label calibration and multiclass-to-binary reductions",
        ICLR.
    """

    def __init__(self, num_points: int = 1, from_logits: bool = True, **kwargs):
        super().__init__(**float32_by_default(kwargs))
        self.num_points = integer_at_least("num_points", num_points, 1)
        self.from_logits = bool(from_logits)

    def build(self, input_shape):
        known_classes(self, input_shape)
        for name, value, width in (
            ("scores", _PAST_EVERY_SCORE, self.num_points),
            ("lower", 0.0, self.num_points + 1),
            ("upper", 1.0, self.num_points + 1),
        ):
            weight = self.add_weight(
                name=name, shape=(width,), initializer=keras.initializers.Constant(value), trainable=False
            )
            setattr(self, name, weight)

    def interval(self, probabilities):
        """`(p0, p1)`, each `[..., 1]`: the two isotonic fits' values at the top label's probability."""
        probabilities = to_compute_dtype(self, probabilities)
        return self._interval(ops.max(probabilities, axis=-1, keepdims=True))

    def _interval(self, top):
        table, flat = ops.cast(self.scores, top.dtype), ops.reshape(top, (-1,))
        at_or_below, below = (ops.reshape(ops.searchsorted(table, flat, side=side), ops.shape(top)) for side in
                              ("right", "left"))  # fmt: skip
        return ops.take(ops.cast(self.lower, top.dtype), at_or_below), ops.take(ops.cast(self.upper, top.dtype), below)

    def call(self, inputs):
        log_p = _log_probabilities(to_compute_dtype(self, inputs), self.from_logits)
        is_top = ops.one_hot(ops.argmax(log_p, axis=-1), ops.shape(inputs)[-1], dtype="bool")
        lower, upper = self._interval(ops.exp(ops.max(log_p, axis=-1, keepdims=True)))
        merged = upper / (1.0 - lower + upper)
        others = ops.log_softmax(ops.where(is_top, _NO_MASS, log_p), axis=-1)
        log_q = ops.where(is_top, ops.log(merged), ops.log1p(-merged) + others)
        return log_q if self.from_logits else ops.exp(log_q)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "num_points": self.num_points, "from_logits": self.from_logits}


def _log_probabilities(inputs, from_logits: bool):
    """`log p` of logits, or of probabilities (`log_probabilities_tensor`: 0 read as the dtype's smallest normal
    number): the layer's and the fit's one reading, so that a validation example falls on its own tabulated score."""
    return ops.log_softmax(inputs, axis=-1) if from_logits else log_probabilities_tensor(inputs)


def _upper_values(weights, label_sums) -> np.ndarray:
    """`p1` at each of the `M + 1` places of a test example among `M` groups of tied validation scores.

    `weights [M]` and `label_sums [M]` are the groups' sizes and label sums,
    in increasing order of score. With the cumulative sum diagram `Q_i =
    (W_i, Y_i)` (`Q_0 = 0`), a test example with label 1 placed after `i`
    groups shifts the points beyond it by `(1, 1)`, and the isotonic fit's
    value there is

    ```
    p1[i] = max_{a <= i} min_{b >= i} (Y_b + 1 - Y_a) / (W_b + 1 - W_a)
    ```

    One scan keeps the maximising `a` (a corner) and its slope: the corner
    changes only when `Q_i` falls below the line through the corner, and
    then the slope is a vectorised minimum over the groups beyond `i`.
    """
    w = np.concatenate([[0.0], np.cumsum(weights)])
    y = np.concatenate([[0.0], np.cumsum(label_sums)])
    values = np.empty(len(w))
    corner, slope = 0, np.inf
    for i in range(len(w)):
        if i == 0 or y[i] < y[corner] + slope * (w[i] - w[corner]):
            corner = i
            slope = np.min((y[i:] + 1.0 - y[i]) / (w[i:] + 1.0 - w[i]))
        values[i] = slope
    return values


def venn_abers_tables(scores, targets) -> tuple:
    """`(distinct scores [M], p0 [M + 1], p1 [M + 1])` of inductive Venn-Abers fitted on `(scores, targets)`.

    `p0[i]` (`p1[i]`) is the value at a test example of the isotonic
    regression fitted on the validation pairs plus that example with label 0
    (1), when `i` distinct validation scores lie below it (for `p1`; for
    `p0`, at or below it). `p0` is `p1` of the mirrored problem: scores
    reversed, labels flipped.

    Example:

    >>> scores, p0, p1 = venn_abers_tables([0.2, 0.4, 0.6, 0.8], [0, 1, 0, 1])
    >>> p0.round(3).tolist(), p1.round(3).tolist()
    ([0.0, 0.0, 0.333, 0.333, 0.5], [0.5, 0.667, 0.667, 1.0, 1.0])
    """
    distinct, group = np.unique(np.asarray(scores, dtype=np.float64), return_inverse=True)
    weights = np.bincount(group).astype(np.float64)
    label_sums = np.bincount(group, weights=np.asarray(targets, dtype=np.float64))
    lower = 1.0 - _upper_values(weights[::-1], (weights - label_sums)[::-1])[::-1]
    return distinct, lower, _upper_values(weights, label_sums)


def fit_venn_abers(outputs, labels, *, from_logits: bool = True):
    """Fits a `VennAbersCalibration` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    One `venn_abers_tables` on the top-label problem: the largest
    probability against whether its class is the label. No option, no
    floor: the top label's calibrated probability is strictly between 0 and
    1. A fit where some class has fewer than `MIN_EXAMPLES_PER_CLASS` (20)
    validation examples has status `"few_examples"` and a warning text: the
    guarantee holds at any size, but `p0` and `p1` lie far apart on few
    examples, and their merged probability is rough.
    """
    outputs, labels = _labels.outputs_and_labels(outputs, labels, name="outputs")  # the kind: `registry.fit`'s door
    n, num_classes = outputs.shape
    log_p = _log_probabilities(keras.ops.convert_to_tensor(outputs, "float32"), from_logits)  # as the layer reads
    top = keras.ops.convert_to_numpy(ops.exp(ops.max(log_p, axis=-1))).astype(np.float64)
    scores, lower, upper = venn_abers_tables(top, keras.ops.convert_to_numpy(ops.argmax(log_p, axis=-1)) == labels)
    layer = VennAbersCalibration(num_points=len(scores), from_logits=from_logits, trainable=False)
    layer.build((None, num_classes))
    layer.set_weights([scores, lower, upper])
    calibrated = keras.ops.convert_to_numpy(layer(outputs)).astype(np.float64)
    nll = -float(np.mean((calibrated if from_logits else np.log(calibrated))[np.arange(n), labels]))
    text = _small_set_warning(layer, ops.exp(log_p), labels, n) if rare_classes(labels, num_classes) else None
    status = "few_examples" if text else "fitted"
    return layer, CalibratorFit("venn_abers", status, n, nll, nll, 0, text)


def _small_set_warning(layer, probabilities, labels, num_examples) -> str:
    lower, upper = (keras.ops.convert_to_numpy(v) for v in layer.interval(probabilities))
    clause = (
        f"it rests on too few examples ({num_examples} validation examples; "
        f"{rare_classes(labels, probabilities.shape[1])}): its two isotonic fits, with the example labelled 0 and "
        f"1, lie far apart there (p1 - p0 = {float(np.mean(upper - lower)):.3g} on average on the validation set), "
        "and the merged probability p1 / (1 - p0 + p1) is rough (temperature scaling needs less data)"
    )
    return message("venn_abers", [clause])
