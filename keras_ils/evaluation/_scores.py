"""Evaluate a classifier: accuracy, NLL, the ECE family, Brier, MCE, smooth ECE, ..., overall and per subgroup.

Re-exported by `keras_ils.evaluation`, the address to use.

The scores are computed in numpy on the whole set of predictions, with the
formulas of the streaming metrics in `keras_ils.metrics` and their bins
(`keras_ils.metrics.bin_index`, the one bin rule); numpy because reports and
the synthetic protocol score thousands of prediction sets and a Keras metric
object costs ~40 ms a call. Reliability diagrams (`keras_ils.plots`) draw the
same per-bin sums, `top_label_bins`.

The equal-mass (adaptive) ECE, `adaptive_ece`, is here only: its bins are
ranks in the whole set, which fixed per-bin sums cannot stream (see
`keras_ils.metrics`). So are the scores of `keras_ils.evaluation`'s
`_calibration` module, which are columns too: the smooth ECE (no bins; it
costs about 5-10 ms a set, most of a `scores` call), the debiased L2
calibration error (equal-mass bins) and the KS calibration error (no bins).

Uncertainty: `evaluate(..., confidence=0.95)` adds percentile bootstrap
intervals to every score, and `paired_difference` gives the interval of the
difference between two models scored on the same examples (both resampled with
the same indices, so what the examples share cancels).
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np

from keras_ils import _labels
from keras_ils import metrics as _metrics
from keras_ils._checks import integer_at_least, number_in
from keras_ils.data import predict_with_labels
from keras_ils.evaluation import _calibration

__all__ = [
    "COLUMNS",
    "Interval",
    "adaptive_ece",
    "evaluate",
    "evaluate_outputs",
    "paired_difference",
    "probabilities",
    "scores",
    "top_label_bins",
]

# the scores of `scores`, `evaluate` and `evaluate_outputs`, in their order (`results.json` and `results.csv` too)
COLUMNS = (
    "accuracy",
    "nll",
    "ece",
    "cwece",
    "class_conditional_ece",
    "brier",
    "mce",
    "adaptive_ece",
    "smooth_ece",
    "debiased_calibration_error",
    "ks_calibration_error",
)


def probabilities(outputs, *, from_logits: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """`(probabilities, log_probabilities)` of `outputs [..., K]`, float32, as `scores` reads them.

    Logits go through a log-softmax; probabilities are taken as given and
    their log is clipped at `keras.config.epsilon()`, as in `keras_ils.metrics`.

    Example:

    >>> p, log_p = probabilities(np.log([[0.9, 0.1]]))
    >>> p.round(4).tolist()
    [[0.9, 0.1]]
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    if not from_logits:
        _labels.check_probabilities(outputs)
        return outputs, np.log(np.clip(outputs, keras.config.epsilon(), 1.0))
    shifted = outputs - outputs.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.exp(log_probabilities), log_probabilities


def top_label_bins(
    probabilities, labels, num_bins: int = 15, *, per_class: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin count, correct-prediction sum and confidence sum of every row's top prediction.

    A row falls in the bin of its confidence `max_j p_j` (the paper's bins,
    `keras_ils.metrics.bin_index`); the sums are float64. ECE and MCE are
    read from these sums, and reliability diagrams draw them.

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.
        num_bins: number of equal-width bins. Defaults to `15`.
        per_class: sums per true class as well, `[K, num_bins]` (what the
            class-conditional ECE reads). Defaults to `False`.

    Returns:
        `(counts, correct_sums, confidence_sums)`, each of shape `[num_bins]`
        (`[K, num_bins]` with `per_class=True`).

    Example:

    >>> counts, correct, confidence = top_label_bins([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]], [0, 1, 1], num_bins=2)
    >>> counts.tolist(), correct.tolist(), confidence.round(4).tolist()
    ([0, 3], [0.0, 2.0], [0.0, 2.4])
    """
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)
    confidence = probabilities.max(axis=-1)
    correct = (probabilities.argmax(axis=-1) == labels).astype(np.float64)
    bins, shape = _bins(confidence, num_bins), (num_bins,)
    if per_class:
        bins, shape = labels * num_bins + bins, (probabilities.shape[-1], num_bins)
    size = int(np.prod(shape))
    sums = (
        np.bincount(bins, minlength=size),
        np.bincount(bins, correct, size),
        np.bincount(bins, confidence.astype(np.float64), size),
    )
    return tuple(s.reshape(shape) for s in sums)


def scores(outputs, labels, *, from_logits: bool = True, num_bins: int = 15) -> dict:
    """All the package's evaluation metrics of predictions `outputs [..., K]` against `labels`.

    The values of the metrics of `keras_ils.metrics` on the whole set, in
    numpy: float32 probabilities, float64 sums. `labels` may take any `y_true`
    form the metrics accept (integer labels, one-hot or soft targets, teacher
    targets).

    Args:
        outputs: `[..., K]` logits, or probabilities with `from_logits=False`.
        labels: the true classes.
        from_logits: whether `outputs` are logits. Defaults to `True`.
        num_bins: bins of the calibration errors. Defaults to `15`.

    Returns:
        `{name: float}` for the names of `COLUMNS`: `accuracy` (top-label),
        `nll`, `ece` (top-label, equal-width bins), `cwece` (classwise-ECE,
        the paper's Eq. 2), `class_conditional_ece` (the authors' code's
        cwECE), `brier`, `mce`, `adaptive_ece` (equal-mass bins),
        `smooth_ece` (`smooth_ece`, Błasiok & Nakkiran 2023),
        `debiased_calibration_error` (`debiased_calibration_error`, Kumar et
        al. 2019, `num_bins` equal-mass bins) and `ks_calibration_error`
        (`ks_calibration_error`, Gupta et al. 2021).

    Example:

    >>> out = scores(np.log([[0.9, 0.1], [0.2, 0.8]]), [0, 0])
    >>> round(out["accuracy"], 2), round(out["nll"], 4)
    (0.5, 0.8574)
    """
    return _scores(*_rows(outputs, labels, from_logits), num_bins)


def _rows(outputs, labels, from_logits):
    """`(probabilities [n, K], log-probabilities [n, K], labels [n])`, one row per prediction, checked."""
    outputs = np.asarray(outputs, dtype=np.float32)
    num_classes = outputs.shape[-1]
    labels = keras.ops.convert_to_numpy(_labels.hard_labels(labels, num_classes, outputs.ndim)).reshape(-1)
    probs, log_probs = (a.reshape(-1, num_classes) for a in probabilities(outputs, from_logits=from_logits))
    if len(probs) != len(labels):
        raise ValueError(
            f"Arguments `outputs` and `labels` must hold one prediction per label. Received: {len(probs)} "
            f"predictions and {len(labels)} labels"
        )
    return probs, log_probs, labels


def _scores(probs, log_probs, labels, num_bins):
    counts, correct_sums, confidence_sums = top_label_bins(probs, labels, num_bins)
    rows = np.arange(len(labels))
    one_hot = np.eye(probs.shape[-1])[labels]
    return dict(
        accuracy=float(np.mean(probs.argmax(axis=-1) == labels)),
        nll=float(-log_probs[rows, labels].astype(np.float64).mean()),
        ece=float(_ece(counts, correct_sums, confidence_sums)),
        cwece=float(_classwise_ece(probs, one_hot, num_bins)),
        class_conditional_ece=float(_class_conditional_ece(probs, labels, num_bins)),
        brier=float(np.mean(np.sum(np.square(probs - one_hot), axis=-1))),
        mce=float(np.max(np.abs(correct_sums - confidence_sums) / np.maximum(counts, 1))),
        adaptive_ece=float(adaptive_ece(probs, labels, num_bins)),
        smooth_ece=_calibration.smooth_ece(probs, labels),
        debiased_calibration_error=_calibration.debiased_calibration_error(probs, labels, num_bins),
        ks_calibration_error=_calibration.ks_calibration_error(probs, labels),
    )


def adaptive_ece(probabilities, labels, num_bins: int = 15) -> float:
    """Equal-mass (adaptive) ECE: the top-label ECE with bins of equally many predictions.

    The rows are sorted by their confidence `max_j p_j` (a stable sort: ties
    keep their order) and split by rank into `num_bins` bins whose sizes
    differ by at most one, the larger first (`numpy.array_split`); then

    ```
    adaptive ECE = sum_b |B_b| / N * |accuracy(B_b) - confidence(B_b)|
    ```

    With fewer rows than bins, the empty bins count for nothing. Equal-width
    bins leave most bins nearly empty when confidences crowd near 1; equal
    mass gives every bin the same share of the data (Nixon et al. 2019;
    Roelofs et al. 2022, "ECE_EM"). Not streamable: a bin's members depend on
    every prediction, so there is no Keras metric of it.

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.
        num_bins: number of bins, `>= 1`. Defaults to `15`.

    Returns:
        The adaptive ECE as a float.

    Example:

    >>> probs = [[0.55, 0.45], [0.61, 0.39], [0.62, 0.38], [0.94, 0.06], [0.95, 0.05]]
    >>> round(adaptive_ece(probs, [1, 0, 0, 1, 0], num_bins=2), 4)   # bins {0.55, 0.61, 0.62} and {0.94, 0.95}
    0.222

    References:
        Nixon et al. (2019), "Measuring Calibration in Deep Learning";
        Roelofs et al. (2022), "Mitigating Bias in Calibration Error Estimation".
    """
    integer_at_least("num_bins", num_bins, 1)
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)
    confidence = probabilities.max(axis=-1).astype(np.float64)
    correct = (probabilities.argmax(axis=-1) == labels).astype(np.float64)
    order = np.argsort(confidence, kind="stable")
    n = len(order)
    sizes = np.full(num_bins, n // num_bins) + (np.arange(num_bins) < n % num_bins)
    bins = np.repeat(np.arange(num_bins), sizes)
    gaps = np.bincount(bins, correct[order], num_bins) - np.bincount(bins, confidence[order], num_bins)
    return float(np.abs(gaps).sum() / max(n, 1))


def _bins(probabilities, num_bins):
    """`keras_ils.metrics.bin_index` of float32 `probabilities`, as a numpy array."""
    return keras.ops.convert_to_numpy(_metrics.bin_index(np.asarray(probabilities, dtype=np.float32), num_bins))


def _ece(counts, correct_sums, confidence_sums):
    """Top-label ECE from `top_label_bins`' sums (per class, too): `sum_n |correct_n - confidence_n| / N`."""
    return np.abs(correct_sums - confidence_sums).sum(axis=-1) / np.maximum(counts.sum(axis=-1), 1)


def _classwise_ece(probabilities, one_hot, num_bins):
    """Eq. 2: every class binned on its own probability; `1/(N K) sum_j sum_n |labels_nj - probabilities_nj|`."""
    n, k = probabilities.shape
    bins = _bins(probabilities, num_bins)
    total = 0.0
    for j in range(k):
        label_sums = np.bincount(bins[:, j], one_hot[:, j], num_bins)
        total += np.abs(label_sums - np.bincount(bins[:, j], probabilities[:, j], num_bins)).sum()
    return total / (n * k)


def _class_conditional_ece(probabilities, labels, num_bins):
    """The authors' cwECE: the mean over the true classes present of their points' top-label ECE."""
    counts, correct_sums, confidence_sums = top_label_bins(probabilities, labels, num_bins, per_class=True)
    return np.mean(_ece(counts, correct_sums, confidence_sums)[counts.sum(axis=-1) > 0])


class Interval(NamedTuple):
    """A score and its bootstrap percentile interval."""

    value: float
    low: float
    high: float


def _check_bootstrap(confidence, bootstrap, seed):
    number_in("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    integer_at_least("bootstrap", bootstrap, 1)
    integer_at_least("seed", seed, 0)


def _bootstrap(rows, num_bins, confidence, bootstrap, seed, combine=lambda score: score):
    """`{name: (low, high)}`: the percentile interval of every score over `bootstrap` resamples.

    Resample `b` takes the rows `numpy.random.default_rng(seed).integers(0, n, n)`
    (the `b`-th draw of one generator), with replacement; `combine` turns a
    resample's rows into the value whose interval is wanted.
    """
    rng = np.random.default_rng(seed)
    n = len(rows[0][-1])
    draws = []
    for _ in range(bootstrap):
        index = rng.integers(0, n, n)
        draws.append(combine(*(_scores(*(a[index] for a in r), num_bins) for r in rows)))
    tails = ((1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0)
    return {name: tuple(float(q) for q in np.quantile([d[name] for d in draws], tails)) for name in COLUMNS}


def _with_intervals(rows, num_bins, confidence, bootstrap, seed):
    values = _scores(*rows, num_bins)
    if confidence is None:
        return values
    intervals = _bootstrap([rows], num_bins, confidence, bootstrap, seed)
    return {**values, "intervals": {name: Interval(values[name], *intervals[name]) for name in COLUMNS}}


def evaluate_outputs(
    outputs,
    labels,
    *,
    from_logits: bool = True,
    groups: dict | None = None,
    num_bins: int = 15,
    confidence: float | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
):
    """`evaluate` for predictions already made: `{"all": {...}, group: {...}}` with counts.

    The arguments after `outputs` and `labels` are `evaluate`'s (`confidence`
    adds bootstrap intervals).

    Example:

    >>> out = evaluate_outputs(np.log([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), [0, 1, 1], groups={"a": [1, 1, 0]})
    >>> round(out["all"]["accuracy"], 4), out["a"]["count"], out["a"]["accuracy"]
    (0.6667, 2, 1.0)
    """
    if confidence is not None:
        _check_bootstrap(confidence, bootstrap, seed)
    outputs, labels = np.asarray(outputs), np.asarray(labels)
    rows = _rows(outputs, labels, from_logits)
    result = {"all": {**_with_intervals(rows, num_bins, confidence, bootstrap, seed), "count": len(labels)}}
    for name, mask in (groups or {}).items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (len(labels),):
            raise ValueError(f"The mask of group {name!r} has shape {mask.shape}; expected ({len(labels)},).")
        if mask.any():
            group = _rows(outputs[mask], labels[mask], from_logits)
            result[name] = {**_with_intervals(group, num_bins, confidence, bootstrap, seed), "count": int(mask.sum())}
    return result


def evaluate(
    model,
    data,
    *,
    from_logits: bool = True,
    groups: dict | None = None,
    num_bins: int = 15,
    confidence: float | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict:
    """Scores `model` on `data`, overall and on each subgroup, with bootstrap intervals on request.

    With `confidence`, every score also gets a percentile bootstrap interval:
    the set (each group on its own) is resampled with replacement `bootstrap`
    times, every score is computed on every resample, and the interval runs
    from the `(1 - confidence) / 2` to the `(1 + confidence) / 2` quantile of
    those values (`numpy.quantile`'s linear interpolation). Resample `b` takes
    rows `rng.integers(0, n, n)`, the `b`-th draw of
    `rng = numpy.random.default_rng(seed)`, so results are reproducible. The
    intervals describe the test set's sampling noise only, not that of
    training; they cost `bootstrap` evaluations of the scores (about 2.5 s
    per 100 resamples of 10,000 examples of 10 classes on one CPU core, a
    fifth of it the smooth ECE).

    Args:
        model: a Keras classifier.
        data: `(x, y)` arrays or a dataset of `(x, y)` batches (tfds dicts too),
            in a fixed order when `groups` is given.
        from_logits: whether `model` outputs logits. Defaults to `True`.
        groups: optional `{name: boolean mask over the examples}`, e.g. the
            synthetic task's `{"dense": dense, "sparse": ~dense}`.
        num_bins: bins of the calibration errors. Defaults to `15`.
        confidence: the intervals' coverage, in `(0, 1)`, or `None` for no
            intervals. Defaults to `None`.
        bootstrap: resamples, `>= 1`. Defaults to `1000`.
        seed: the resampling generator's seed, `>= 0`. Defaults to `0`.

    Returns:
        `{"all": {...}, name: {...} for each group}`, each with the keys of
        `COLUMNS` plus `"count"`; with `confidence`, also `"intervals"`:
        `{score name: Interval(value, low, high)}`.

    Example:

    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2)])
    >>> result = evaluate(model, (np.zeros((4, 1)), np.array([0, 1, 0, 1])), groups={"first": np.arange(4) < 2})
    >>> result["all"]["accuracy"], result["first"]["count"]
    (0.5, 2)
    >>> x, y = np.random.default_rng(0).normal(size=(200, 1)), np.arange(200) % 2
    >>> interval = evaluate(model, (x, y), confidence=0.9, bootstrap=200)["all"]["intervals"]["accuracy"]
    >>> interval.low <= interval.value <= interval.high
    True
    """
    if confidence is not None:
        _check_bootstrap(confidence, bootstrap, seed)
    outputs, labels = predict_with_labels(model, data)
    return evaluate_outputs(
        outputs,
        labels,
        from_logits=from_logits,
        groups=groups,
        num_bins=num_bins,
        confidence=confidence,
        bootstrap=bootstrap,
        seed=seed,
    )


def paired_difference(
    outputs_a,
    outputs_b,
    labels,
    *,
    from_logits: bool = True,
    confidence: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
    num_bins: int = 15,
) -> dict:
    """Score of model A minus model B on the same examples, with a paired bootstrap interval.

    Both models' predictions are resampled with the same indices (resample
    `b` takes rows `rng.integers(0, n, n)`, the `b`-th draw of
    `rng = numpy.random.default_rng(seed)`), so the examples' shared
    difficulty cancels and the interval is narrower than two unpaired ones: an
    interval that excludes 0 says the difference is more than the test set's
    sampling noise at that confidence. The interval is the percentile one, as
    in `evaluate`.

    Args:
        outputs_a: `[..., K]` model A's logits (probabilities with
            `from_logits=False`).
        outputs_b: model B's, for the same examples in the same order.
        labels: the true classes, any `y_true` form.
        from_logits: whether the outputs are logits. Defaults to `True`.
        confidence: the interval's coverage, in `(0, 1)`. Defaults to `0.95`.
        bootstrap: resamples, `>= 1`. Defaults to `1000`.
        seed: the resampling generator's seed, `>= 0`. Defaults to `0`.
        num_bins: bins of the calibration errors. Defaults to `15`.

    Returns:
        `{score name: Interval(value, low, high)}` for the names of `COLUMNS`,
        `value` being A's score minus B's (negative: A's is lower).

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, 2000)
    >>> logits = rng.normal(size=(2000, 3)) + 2.0 * np.eye(3)[labels]
    >>> difference = paired_difference(logits, 4.0 * logits, labels, bootstrap=200)["nll"]
    >>> difference.high < 0   # the over-confident B has the higher NLL, beyond the noise
    True
    """
    _check_bootstrap(confidence, bootstrap, seed)
    if np.shape(outputs_a) != np.shape(outputs_b):
        raise ValueError(
            "Arguments `outputs_a` and `outputs_b` must score the same examples. "
            f"Received shapes: {np.shape(outputs_a)} and {np.shape(outputs_b)}"
        )
    rows_a, rows_b = _rows(outputs_a, labels, from_logits), _rows(outputs_b, labels, from_logits)
    difference = lambda a, b: {name: a[name] - b[name] for name in COLUMNS}  # noqa: E731
    values = difference(_scores(*rows_a, num_bins), _scores(*rows_b, num_bins))
    intervals = _bootstrap([rows_a, rows_b], num_bins, confidence, bootstrap, seed, combine=difference)
    return {name: Interval(values[name], *intervals[name]) for name in COLUMNS}
