"""Inductive Venn-Abers calibration (Vovk, Petej & Fedorova 2015): the layer and its fit on validation outputs.

A Venn-Abers predictor scores a test example `s` (a class's probability) by
two isotonic regressions fitted on the validation scores with the test
example added, once with label 0 and once with label 1; their values at `s`,
`p0 <= p1`, bracket a probability that is valid (perfectly calibrated in a
finite-sample sense) whatever the model. The calibrated probability merges
them as `p1 / (1 - p0 + p1)`, the minimax choice under log loss; it lies
strictly between 0 and 1, since the fit with label 1 is never 0 at the added
example, nor the fit with label 0 ever 1.

Both values depend on `s` only through its place among the `M` distinct
validation scores, so the fit tabulates them for the `M + 1` places
(`venn_abers_tables`) and the layer looks them up. Two classes are one binary
problem (class 1's probability); more classes are one problem per class,
one-vs-rest, and the merged probabilities are renormalised, as MAPIE's
`VennAbersCalibrator` does with `va_tpe="one_vs_all"`.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils import _labels
from keras_ils._checks import integer_at_least
from keras_ils.calibration._float32 import known_classes
from keras_ils.calibration.one_vs_rest import OneVsRestCalibration, count_below, gather_per_class
from keras_ils.calibration.reports import CalibratorFit, mean_nll, message, rare_classes

__all__ = ["VennAbersCalibration", "fit_venn_abers", "venn_abers_tables"]

_PAST_EVERY_SCORE = 2.0  # the padding of the score table: above every probability, never counted


@keras.saving.register_keras_serializable(package="keras_ils")
class VennAbersCalibration(OneVsRestCalibration):
    """Inductive Venn-Abers calibration: each class's probability through its two tabulated isotonic fits.

    For each binary problem `b` (class 1 for two classes, else every class,
    one-vs-rest), `scores[b]` holds the distinct validation scores in
    increasing order (padded with 2), and `lower[b, i]`, `upper[b, i]` the
    values `p0`, `p1` at a test score with `i` validation scores below it
    (for `p0`, at or below it: a tie joins the validation example's group).
    The class's probability is `p1 / (1 - p0 + p1)`; for more than two
    classes the row is renormalised. Fitted by `fit_calibrator("venn_abers",
    ...)`; a layer built directly outputs the uniform distribution until its
    weights are set.

    Formula:

    ```
    p0 = lower[b, #{m : scores[b, m] <= s}],   p1 = upper[b, #{m : scores[b, m] < s}]
    q_b = p1 / (1 - p0 + p1)
    two classes: (1 - q, q) of s = p_1;  K classes: q_j / sum_k q_k of s_j = p_j
    ```

    Args:
        num_points: distinct validation scores per problem (`M`), `>= 1`.
            Defaults to `1`.
        from_logits: whether the inputs are logits (then the outputs are
            log-probabilities) or probabilities (then so are the outputs).
            Defaults to `True`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = VennAbersCalibration(num_points=2, from_logits=False)
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([[0.3, 0.7]]), np.array([[0.0, 0.0, 0.5]]), np.array([[0.5, 1.0, 1.0]])])
    >>> p0, p1 = layer.interval(np.array([[0.5, 0.5]]))   # one validation score below 0.5
    >>> keras.ops.convert_to_numpy(p0).tolist(), keras.ops.convert_to_numpy(p1).tolist()
    ([[0.0]], [[1.0]])
    >>> np.round(keras.ops.convert_to_numpy(layer(np.array([[0.5, 0.5], [0.9, 0.1]]))), 4)
    array([[0.5  , 0.5  ],
           [0.6667, 0.3333]], dtype=float32)

    References:
        Vovk, Petej & Fedorova (2015), "Large-scale probabilistic predictors
        with and without guarantees of validity", NeurIPS; Manokhin (2017),
        "Multi-class probabilistic classification using inductive and cross
        Venn-Abers predictors", COPA.
    """

    def __init__(self, num_points: int = 1, from_logits: bool = True, **kwargs):
        super().__init__(floor=0.0, from_logits=from_logits, model_weight=0.0, **kwargs)
        self.num_points = integer_at_least("num_points", num_points, 1)

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        problems = 1 if num_classes == 2 else num_classes
        for name, value, width in (
            ("scores", _PAST_EVERY_SCORE, self.num_points),
            ("lower", 0.0, self.num_points + 1),
            ("upper", 1.0, self.num_points + 1),
        ):
            weight = self.add_weight(
                name=name, shape=(problems, width), initializer=keras.initializers.Constant(value), trainable=False
            )
            setattr(self, name, weight)

    def interval(self, probabilities):
        """`(p0, p1)`, each `[..., problems]`: the two isotonic fits' values at each problem's score."""
        probabilities = ops.cast(probabilities, self.compute_dtype)
        scores = probabilities[..., 1:] if probabilities.shape[-1] == 2 else probabilities
        table = ops.cast(self.scores, scores.dtype)
        at_or_below = self.num_points - count_below(ops.flip(-table, axis=-1), -scores)
        lower = gather_per_class(ops.cast(self.lower, scores.dtype), at_or_below)
        return lower, gather_per_class(ops.cast(self.upper, scores.dtype), count_below(table, scores))

    def _each_class(self, probabilities):
        lower, upper = self.interval(probabilities)
        merged = upper / (1.0 - lower + upper)
        return ops.concatenate([1.0 - merged, merged], axis=-1) if probabilities.shape[-1] == 2 else merged

    def get_config(self):
        config = {key: value for key, value in super().get_config().items() if key not in ("floor", "model_weight")}
        return {**config, "num_points": self.num_points}


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


def _padded(rows, width, fill=None) -> np.ndarray:
    """Rows of unequal length as one `[len(rows), width]` array, each padded with `fill` (else its last value)."""
    return np.stack([np.pad(r, (0, width - len(r)), constant_values=r[-1] if fill is None else fill) for r in rows])


def fit_venn_abers(outputs, labels, *, from_logits: bool = True):
    """Fits a `VennAbersCalibration` layer on validation outputs: `(layer, CalibratorFit)`, without warning.

    One `venn_abers_tables` per binary problem: class 1's probability against
    `y == 1` for two classes, else each class's against `y == j`. No option,
    no floor: every calibrated probability is strictly between 0 and 1. A fit
    where some class has fewer than `MIN_EXAMPLES_PER_CLASS` (20) validation
    examples has status `"few_examples"` and a warning text: the guarantee
    holds at any size, but `p0` and `p1` lie far apart there, and their merged
    probability is rough.
    """
    outputs, labels = _labels.outputs_and_labels(outputs, labels, name="outputs")  # the kind: `registry.fit`'s door
    n, num_classes = outputs.shape
    # the float32 probabilities the layer computes, so that a validation example falls on its own tabulated score
    outputs = outputs.astype(np.float32)
    probabilities = keras.ops.softmax(outputs) if from_logits else np.clip(outputs, 0.0, 1.0)
    probabilities = keras.ops.convert_to_numpy(probabilities).astype(np.float64)
    classes = [1] if num_classes == 2 else range(num_classes)
    tables = [venn_abers_tables(probabilities[:, j], labels == j) for j in classes]
    width = max(len(scores) for scores, _, _ in tables)
    layer = VennAbersCalibration(num_points=width, from_logits=from_logits, trainable=False)
    layer.build((None, num_classes))
    layer.set_weights([
        _padded([t[0] for t in tables], width, _PAST_EVERY_SCORE),
        _padded([t[1] for t in tables], width + 1),
        _padded([t[2] for t in tables], width + 1),
    ])  # fmt: skip
    calibrated = keras.ops.convert_to_numpy(layer.one_vs_rest(probabilities.astype(np.float32))).astype(np.float64)
    nll = mean_nll(calibrated / calibrated.sum(axis=1, keepdims=True), labels)
    text = _small_set_warning(layer, probabilities, labels, n) if rare_classes(labels, num_classes) else None
    status = "few_examples" if text else "fitted"
    return layer, CalibratorFit("venn_abers", status, n, nll, nll, 0, text)


def _small_set_warning(layer, probabilities, labels, num_examples) -> str:
    lower, upper = (keras.ops.convert_to_numpy(v) for v in layer.interval(probabilities.astype(np.float32)))
    clause = (
        f"it rests on too few examples ({num_examples} validation examples; "
        f"{rare_classes(labels, probabilities.shape[1])}): its two isotonic fits, with the example labelled 0 and "
        f"1, lie far apart there (p1 - p0 = {float(np.mean(upper - lower)):.3g} on average on the validation set), "
        "and the merged probability p1 / (1 - p0 + p1) is rough (temperature scaling needs less data)"
    )
    return message("venn_abers", [clause])
