"""Fitting split conformal sets: the finite-sample quantile, `fit_conformal` on arrays, `conformalize` on a model."""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np

from keras_ils import _labels, _outputs
from keras_ils._checks import invalid, number_in
from keras_ils._predict import predict_with_labels
from keras_ils.calibration.model import _followed_by
from keras_ils.conformal._sets import ConformalSets, Method, SetOptions, check_options

__all__ = ["ConformalFit", "conformal_quantile", "conformalize", "fit_conformal", "minimum_examples"]


class ConformalFit(NamedTuple):
    """What `fit_conformal` and `conformalize` fitted, for reports.

    Attributes:
        method: the score, one of `keras_ils.conformal.METHODS`.
        alpha: the miscoverage level; the sets cover with probability at
            least `1 - alpha`.
        class_conditional: whether each class has its own quantile (Mondrian).
        num_examples: calibration examples.
        quantiles: `[K]` float64, each class's quantile of the scores (all
            equal unless `class_conditional`).
    """

    method: str
    alpha: float
    class_conditional: bool
    num_examples: int
    quantiles: np.ndarray


def _rank(num_scores: int, alpha: float) -> int:
    """`ceil((n + 1)(1 - alpha))`, the product rounded to 9 decimals first (0.1 is not exact in binary)."""
    return math.ceil(round((num_scores + 1) * (1.0 - alpha), 9))


def minimum_examples(alpha: float) -> int:
    """The fewest calibration scores whose quantile exists at `alpha`: the smallest `n` with `alpha >= 1 / (n + 1)`.

    Example:

    >>> minimum_examples(0.1), minimum_examples(0.05), minimum_examples(0.3)
    (9, 19, 3)
    """
    alpha = _checked_alpha(alpha)
    return math.ceil(round(1.0 / alpha - 1.0, 9))


def _checked_alpha(alpha) -> float:
    return number_in("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)


def _too_few(alpha: float, num_scores: int, where: str) -> ValueError:
    return ValueError(
        f"Invalid value for argument `alpha`: alpha={alpha:g} is too small for {num_scores} calibration examples"
        f"{where}. The quantile is the ceil((n + 1)(1 - alpha)) = {_rank(num_scores, alpha)}th smallest of the "
        f"n = {num_scores} scores, which exists from n = {minimum_examples(alpha)} examples on (alpha >= "
        "1 / (n + 1)). Pass a larger alpha or more calibration data."
    )


def conformal_quantile(scores, alpha: float) -> float:
    """Split conformal's quantile of `n` calibration scores: the `ceil((n + 1)(1 - alpha))`-th smallest.

    The finite-sample quantile of level `ceil((n + 1)(1 - alpha)) / n`
    (Angelopoulos & Bates 2021, Eq. 1; MAPIE's `method="lower"`): a test
    score exchangeable with the calibration scores is at most it with
    probability at least `1 - alpha`, and at most `1 - alpha + 1 / (n + 1)`
    when the scores have no ties. Ties need no rule: the quantile is one of
    the scores, and a score equal to it conforms (`score <= quantile`).

    Args:
        scores: `[n]` calibration scores, `n >= 1`, finite.
        alpha: the miscoverage level, in `(0, 1)`, at least `1 / (n + 1)`.

    Returns:
        The quantile, a float.

    Example:

    >>> conformal_quantile(np.arange(1.0, 20.0), alpha=0.1)   # the ceil(20 * 0.9) = 18th smallest of 19
    18.0
    """
    alpha = _checked_alpha(alpha)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or len(scores) == 0:
        raise invalid("scores", "a 1-D array of at least one calibration score", f"an array of shape {scores.shape}")
    nan, inf = int(np.isnan(scores).sum()), int(np.isinf(scores).sum())
    if nan or inf:  # a NaN sorts last and would be the quantile: sets that cover nothing
        raise ValueError(
            f"Invalid value for argument `scores`. Expected finite calibration scores. Received: {nan} NaN and {inf} "
            f"inf among its {len(scores)} scores (first at index {int(np.flatnonzero(~np.isfinite(scores))[0])})"
        )
    rank = _rank(len(scores), alpha)
    if rank > len(scores):
        raise _too_few(alpha, len(scores), "")
    return float(np.partition(scores, rank - 1)[rank - 1])


def _quantiles(calibration_scores, labels, num_classes, alpha, class_conditional) -> np.ndarray:
    """`[K]` quantiles: one of all the scores, or with `class_conditional` one of each class's scores."""
    if not class_conditional:
        return np.full(num_classes, conformal_quantile(calibration_scores, alpha))
    counts = np.bincount(labels, minlength=num_classes)
    smallest = int(np.argmin(counts))
    if counts[smallest] < minimum_examples(alpha):
        raise _too_few(alpha, int(counts[smallest]), f" of class {smallest} (with class_conditional=True)")
    return np.array([conformal_quantile(calibration_scores[labels == j], alpha) for j in range(num_classes)])


def _fit(method, outputs, labels, alpha, from_logits, class_conditional, options: SetOptions):
    """`(ConformalSets layer, ConformalFit)` of checked arguments."""
    outputs, labels = _labels.outputs_and_labels(outputs, labels, name="outputs")
    _outputs.check_outputs_kind(outputs, from_logits)
    num_examples, num_classes = outputs.shape
    layer = ConformalSets(method, **options._asdict(), from_logits=from_logits, trainable=False, name="conformal_sets")
    layer.build((None, num_classes))
    uniform = None
    if options.randomized:
        uniform = np.random.default_rng(options.seed).random((num_examples, 1)).astype(np.float32)
    every_class = keras.ops.convert_to_numpy(layer.class_scores(outputs.astype(np.float32), uniform))
    calibration_scores = every_class[np.arange(num_examples), labels].astype(np.float64)
    quantiles = _quantiles(calibration_scores, labels, num_classes, alpha, class_conditional)
    layer.set_weights([quantiles])
    return layer, ConformalFit(method, alpha, class_conditional, num_examples, quantiles)


def fit_conformal(
    method: Method,
    outputs,
    labels,
    *,
    alpha: float = 0.1,
    from_logits: bool = True,
    class_conditional: bool = False,
    return_fit: bool = False,
    **options,
):
    """Fits split conformal prediction sets on calibration outputs and returns them as a fixed layer.

    Each calibration example is scored at its true label (`method`'s
    conformity score, lower conforms better); the layer holds the
    `conformal_quantile` of those scores and puts in a test example's set
    every class whose score is within it (see `ConformalSets`). On data
    exchangeable with the calibration set, a set holds the true label with
    probability at least `1 - alpha`; with `class_conditional=True` the
    quantile is taken per true class (Mondrian conformal prediction), so the
    guarantee holds within every class.

    | `method`  | score of class `j`                                          | reference               |
    |-----------|-------------------------------------------------------------|-------------------------|
    | `"lac"`   | `1 - p_j`                                                   | Sadinle et al. (2019)   |
    | `"aps"`   | the probability of the classes at least as probable as `j`  | Romano et al. (2020)    |
    | `"raps"`  | APS' plus `lam * max(rank_j - k_reg, 0)`                    | Angelopoulos et al. (2021) |
    | `"top_k"` | `rank_j`, the classes at least as probable as `j`           | Angelopoulos et al. (2021) |

    Plain APS and RAPS sets take classes in order of probability up to and
    including the one whose cumulative score reaches the quantile (the sets of
    Angelopoulos & Bates 2021 and MAPIE's default): they cover with
    probability at least `1 - alpha`, often more. `randomized=True` enters
    the last class's probability in a uniform fraction (one draw per
    example), which makes the coverage exact, within `[1 - alpha,
    1 - alpha + 1 / (n + 1)]`, at the price of random and sometimes empty sets.

    Args:
        method: `"lac"`, `"aps"`, `"raps"` or `"top_k"`.
        outputs: `[n, K]` calibration logits (probabilities with
            `from_logits=False`), held out from training.
        labels: sparse labels `[n]`, one-hot/soft `[n, K]` or teacher targets.
        alpha: the miscoverage level, in `(0, 1)`; at least `1 / (n + 1)`
            (per class with `class_conditional`), else a `ValueError` says
            how many examples it needs. Defaults to `0.1`.
        from_logits: whether `outputs` are logits. Defaults to `True`.
        class_conditional: one quantile per class. Defaults to `False`.
        return_fit: also return the `ConformalFit`. Defaults to `False`.
        **options: the method's own options (a method refuses the others):
            `randomized` (`"aps"`, `"raps"`: randomised sets, default
            `False`) and `seed` (an int `>= 0` or `None`, the default: the
            seed of the uniform numbers, numpy's for the calibration scores
            and the layer's `SeedGenerator` for its sets); `k_reg` (RAPS'
            rank from which the penalty counts, an int `>= 0`, default `1`)
            and `lam` (RAPS' penalty per rank, `>= 0`, default `0.01`).

    Returns:
        A built `ConformalSets` layer, not trainable; `(layer, ConformalFit)`
        with `return_fit=True`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> logits = 2.0 * rng.normal(size=(1000, 4))
    >>> labels = (rng.random((1000, 1)) < keras.ops.convert_to_numpy(keras.ops.softmax(logits)).cumsum(1)).argmax(1)
    >>> layer, fit = fit_conformal("lac", logits[:500], labels[:500], alpha=0.1, return_fit=True)
    >>> fit.quantiles.round(3)    # LAC: the classes of probability >= 1 - 0.855 are in a set
    array([0.855, 0.855, 0.855, 0.855])
    >>> sets = keras.ops.convert_to_numpy(layer(logits[500:]))   # [500, 4] 0/1 masks
    >>> from keras_ils.conformal import coverage, mean_set_size
    >>> round(coverage(sets, labels[500:]), 2), round(mean_set_size(sets), 2)
    (0.9, 1.75)

    References:
        Angelopoulos & Bates (2021), "A Gentle Introduction to Conformal
        Prediction and Distribution-Free Uncertainty Quantification", §1-2;
        Romano, Sesia & Candès (2020), "Classification with Valid and
        Adaptive Coverage"; Angelopoulos et al. (2021), "Uncertainty Sets
        for Image Classifiers using Conformal Prediction"; Sadinle, Lei &
        Wasserman (2019), "Least Ambiguous Set-Valued Classifiers with
        Bounded Error Levels"; Vovk (2012), "Conditional validity of
        inductive conformal predictors" (Mondrian).
    """
    alpha, checked = _checked(method, alpha, class_conditional, options)
    layer, fit = _fit(method, outputs, labels, alpha, from_logits, class_conditional, checked)
    return (layer, fit) if return_fit else layer


def _checked(method, alpha, class_conditional, options) -> tuple:
    """`(alpha, SetOptions)`, every argument checked before any work."""
    checked = check_options(method, options)
    if not isinstance(class_conditional, bool):
        raise invalid("class_conditional", "True or False", class_conditional)
    return _checked_alpha(alpha), checked


def _calibration_outputs(model, calibration_data):
    """`(outputs, labels)` of `model` on `calibration_data`, refusing empty data and outputs that are not finite
    with one line naming the argument."""
    empty = None
    if isinstance(calibration_data, (tuple, list)) and len(calibration_data) == 2:
        if 0 in {len(leaf) for leaf in keras.tree.flatten(calibration_data) if np.ndim(leaf)}:
            empty = "a tuple (x, y) of 0 examples"
    if empty is None:
        try:
            outputs, labels = predict_with_labels(model, calibration_data)
        except ValueError as error:
            if str(error) != "Argument `data` is empty.":  # a dataset or iterable that yields no batch
                raise
            empty = f"a {type(calibration_data).__name__} that yields no batch"
        else:
            bad = int(np.sum(~np.isfinite(outputs)))
            if bad:
                raise ValueError(
                    f"Invalid value for argument `model`: its outputs on `calibration_data` must be finite to score "
                    f"the sets. Received: {bad} NaN or infinite values among {np.size(outputs)} (a diverged model?)"
                )
            return outputs, labels
    raise ValueError(
        "Invalid value for argument `calibration_data`. Expected at least one (x, y) example, held out from "
        f"training, to calibrate the sets on. Received: {empty}"
    )


def conformalize(
    model: keras.Model,
    calibration_data,
    *,
    alpha: float = 0.1,
    method: Method = "aps",
    from_logits: bool | None = None,
    class_conditional: bool = False,
    return_fit: bool = False,
    **options,
):
    """Fits split conformal prediction sets on calibration data and returns `model` followed by them.

    The returned model outputs, for each example, the `[K]` 0/1 mask of its
    prediction set: on data exchangeable with `calibration_data`, the set
    holds the true label with probability at least `1 - alpha`. Its last
    layer is a fixed `ConformalSets` (float32 under any dtype policy) that
    holds the quantile, saves with the model as `.keras`, and exports with
    it (`model.export(...)` serves one plain tensor for a one-input model).
    The scores and options are `fit_conformal`'s.

    Args:
        model: a trained Keras classifier.
        calibration_data: a `tf.data.Dataset` of batched `(x, y)`, a tuple
            `(x, y)`, a `keras.utils.PyDataset` or an iterable of `(x, y)`
            batches, held out from training (and from any data the model was
            calibrated or tuned on); `y` sparse, one-hot or teacher targets.
        alpha: the miscoverage level, in `(0, 1)`. Defaults to `0.1`.
        method: `"lac"`, `"aps"`, `"raps"` or `"top_k"` (see
            `fit_conformal`). Defaults to `"aps"`.
        from_logits: whether `model` outputs logits, or `None` to read it from
            the model as `calibrate` does (a model ending in a softmax outputs
            probabilities). Defaults to `None`.
        class_conditional: one quantile per class (Mondrian). Defaults to
            `False`.
        return_fit: also return the `ConformalFit`. Defaults to `False`.
        **options: the method's options, as in `fit_conformal`:
            `randomized` and `seed` (`"aps"`, `"raps"`), `k_reg` and `lam`
            (`"raps"`).

    Returns:
        A new model sharing `model`'s layers, its last layer the fitted
        `ConformalSets`; `(model, ConformalFit)` with `return_fit=True`.

    Example:

    >>> x = np.random.default_rng(0).normal(size=(200, 4)).astype("float32")
    >>> y = (x[:, 0] + x[:, 1] > 0).astype("int32") + (x[:, 0] > 1)
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    >>> sets = conformalize(model, (x[:100], y[:100]), alpha=0.2, method="lac")
    >>> masks = sets.predict(x[100:], verbose=0)
    >>> masks.shape, sorted(np.unique(masks).tolist())
    ((100, 3), [0.0, 1.0])
    """
    alpha, checked = _checked(method, alpha, class_conditional, options)
    outputs, labels = _calibration_outputs(model, calibration_data)
    from_logits = _outputs.model_from_logits(model, outputs, from_logits)
    layer, fit = _fit(method, outputs, labels, alpha, from_logits, class_conditional, checked)
    conformal = _followed_by(model, layer)
    conformal.name = f"{model.name}_conformal"
    return (conformal, fit) if return_fit else conformal
