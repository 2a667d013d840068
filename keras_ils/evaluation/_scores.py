"""Evaluate a classifier: accuracy, NLL, the ECE family, Brier, MCE, smooth ECE, ..., overall and per subgroup.

Re-exported by `keras_ils.evaluation`, the address to use.

The scores are computed in numpy on the whole set of predictions, with the
formulas of the streaming metrics in `keras_ils.metrics` and their bins
(`keras_ils.metrics.bin_index`, the one bin rule); numpy because reports and
the synthetic protocol score thousands of prediction sets and a Keras metric
object costs ~40 ms a call. Reliability diagrams (`keras_ils.plots`) draw the
same per-bin sums, `top_label_bins`.

The scores of `keras_ils.evaluation`'s `_calibration` module are columns
too, and numpy only: the equal-mass (adaptive) ECE, whose bins are ranks in
the whole set, which fixed per-bin sums cannot stream (see
`keras_ils.metrics`), the smooth ECE (no bins; it costs about 5-10 ms a
set), the debiased L2 calibration error (equal-mass bins) and the KS
calibration error (no bins).

Inputs are checked at the door (`_inputs`): finite outputs of the kind
`from_logits` declares, labels in `[0, K)`, at least one example. The
`[n, K]` outputs are read a chunk of rows at a time (`_passes.summarise`),
so a 1,000,000 x 1,000 set costs a few passes over it and no copy of it.

Uncertainty: `evaluate(..., confidence=0.95)` adds percentile bootstrap
intervals to every score, and `paired_difference` gives the interval of the
difference between two models scored on the same examples (both resampled with
the same indices, so what the examples share cancels).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils import _outputs
from keras_ils import metrics as _metrics
from keras_ils._checks import integer_at_least, number_in
from keras_ils._predict import predict_with_labels
from keras_ils.evaluation import _calibration, _inputs, _passes, _selective

__all__ = [
    "COLUMNS",
    "Interval",
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
    "aurc",
    "augrc",
)


def probabilities(outputs, *, from_logits: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """`(probabilities, log_probabilities)` of `outputs [..., K]`, float32, as `scores` reads them.

    Logits go through a log-softmax; probabilities are taken as given and
    their log is clipped at `keras.config.epsilon()`, as in `keras_ils.metrics`.
    The outputs are checked as `scores` checks them.

    Example:

    >>> p, log_p = probabilities(np.log([[0.9, 0.1]]))
    >>> p.round(4).tolist()
    [[0.9, 0.1]]
    """
    shape = np.shape(outputs)
    rows = _inputs.checked_outputs(outputs, from_logits)
    probs, log_probs = np.empty(rows.shape, dtype=np.float32), np.empty(rows.shape, dtype=np.float32)
    for part in _passes.row_chunks(*rows.shape):
        chunk = rows[part].astype(np.float32, copy=False)
        probs[part], log_probs[part] = _passes.softmax(chunk) if from_logits else (chunk, _passes.clipped_log(chunk))
    return probs.reshape(shape), log_probs.reshape(shape)


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
    integer_at_least("num_bins", num_bins, 1)
    probabilities, labels = _inputs.checked_rows(probabilities, labels)
    confidence, correct = _passes.top_label(probabilities, labels)
    return _top_label_bins(confidence, correct, labels, num_bins, probabilities.shape[-1] if per_class else None)


def _top_label_bins(confidence, correct, labels, num_bins, num_classes=None):
    """`top_label_bins` of the rows' top label; per true class when `num_classes` is given."""
    bins, shape = _metrics.bin_index(confidence.astype(np.float32), num_bins), (num_bins,)
    if num_classes is not None:
        bins, shape = labels * num_bins + bins, (num_classes, num_bins)
    size = int(np.prod(shape))
    sums = (np.bincount(bins, minlength=size), np.bincount(bins, correct, size), np.bincount(bins, confidence, size))
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
        from_logits: whether `outputs` are logits; a declaration that the
            values contradict (every row a distribution declared as logits,
            values outside [0, 1] declared as probabilities) is refused with
            the fix. Defaults to `True`.
        num_bins: bins of the calibration errors. Defaults to `15`.

    Returns:
        `{name: float}` for the names of `COLUMNS`: `accuracy` (top-label),
        `nll`, `ece` (top-label, equal-width bins), `cwece` (classwise-ECE,
        the paper's Eq. 2), `class_conditional_ece` (the authors' code's
        cwECE), `brier`, `mce`, `adaptive_ece` (equal-mass bins),
        `smooth_ece` (`smooth_ece`, Błasiok & Nakkiran 2023),
        `debiased_calibration_error` (`debiased_calibration_error`, Kumar et
        al. 2019, `num_bins` equal-mass bins), `ks_calibration_error`
        (`ks_calibration_error`, Gupta et al. 2021), and the abstention
        scores of a model that predicts only above a confidence threshold,
        `aurc` (`aurc`, Geifman et al. 2019) and `augrc` (`augrc`, Traub et
        al. 2024).

    Example:

    >>> out = scores(np.log([[0.9, 0.1], [0.2, 0.8]]), [0, 0])
    >>> round(out["accuracy"], 2), round(out["nll"], 4)
    (0.5, 0.8574)
    """
    integer_at_least("num_bins", num_bins, 1)
    return _scores(*_checked(outputs, labels, from_logits), from_logits, num_bins)


def _checked(outputs, labels, from_logits, name="outputs"):
    """`(outputs [n, K], labels [n])`, one row per prediction, checked at the door (`_inputs`)."""
    rows = _inputs.checked_outputs(outputs, from_logits, name)
    return rows, _inputs.checked_label_rows(labels, tuple(np.shape(outputs)), name)


def _scores(outputs, labels, from_logits, num_bins, rows=None):
    """`scores` of checked `outputs [n, K]` and `labels [n]`; of `rows` (indices) only, in that order, if given."""
    summary = _passes.summarise(outputs, labels, from_logits, num_bins, rows)
    labels = labels if rows is None else labels[rows]
    confidence, correct, sums = summary.confidence, summary.correct, summary.class_bins
    counts, correct_sums, confidence_sums = _top_label_bins(confidence, correct, labels, num_bins)
    n, num_classes = len(labels), sums.counts.shape[0]
    abstention = _selective.curve_of(confidence, 1.0 - correct)
    return dict(
        accuracy=float(np.mean(correct)),
        nll=float(-summary.label_log_probability.astype(np.float64).mean()),
        ece=float(_ece(counts, correct_sums, confidence_sums)),
        cwece=float(np.abs(sums.label_counts - sums.probability).sum() / (n * num_classes)),  # the paper's Eq. 2
        class_conditional_ece=float(_class_conditional_ece(confidence, correct, labels, num_bins, num_classes)),
        brier=float((sums.square - 2 * sums.label_probability.sum() + n) / n),  # mean sum_j (p_j - y_j)^2
        mce=float(np.max(np.abs(correct_sums - confidence_sums) / np.maximum(counts, 1))),
        adaptive_ece=_calibration._adaptive_ece(confidence, correct, num_bins),
        smooth_ece=_calibration._smooth_ece(confidence, correct),
        debiased_calibration_error=_calibration._debiased_calibration_error(confidence, correct, num_bins),
        ks_calibration_error=_calibration._ks_calibration_error(confidence, correct),
        aurc=_selective.area_under_risk(abstention),
        augrc=_selective.area_under_generalized_risk(abstention),
    )


def _ece(counts, correct_sums, confidence_sums):
    """Top-label ECE from `top_label_bins`' sums (per class, too): `sum_n |correct_n - confidence_n| / N`."""
    return np.abs(correct_sums - confidence_sums).sum(axis=-1) / np.maximum(counts.sum(axis=-1), 1)


def _class_conditional_ece(confidence, correct, labels, num_bins, num_classes):
    """The authors' cwECE: the mean over the true classes present of their points' top-label ECE."""
    counts, correct_sums, confidence_sums = _top_label_bins(confidence, correct, labels, num_bins, num_classes)
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


def _bootstrap(sets, rows, num_bins, confidence, bootstrap, seed, combine=lambda score: score):
    """`{name: (low, high)}`: the percentile interval of every score over `bootstrap` resamples.

    `sets` are checked `(outputs, labels, from_logits)` scored on the same
    rows, `rows` their indices (`None`: all). Resample `b` takes the rows
    `rows[numpy.random.default_rng(seed).integers(0, n, n)]` (the `b`-th draw
    of one generator), with replacement; `combine` turns the resample's
    scores of each set into the value whose interval is wanted.
    """
    rng = np.random.default_rng(seed)
    n = len(sets[0][1]) if rows is None else len(rows)
    draws = []
    for _ in range(bootstrap):
        index = rng.integers(0, n, n)
        index = index if rows is None else rows[index]
        draws.append(combine(*(_scores(*scored, num_bins, index) for scored in sets)))
    tails = ((1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0)
    return {name: tuple(float(q) for q in np.quantile([d[name] for d in draws], tails)) for name in COLUMNS}


def _with_intervals(scored, rows, num_bins, confidence, bootstrap, seed):
    values = _scores(*scored, num_bins, rows)
    if confidence is None:
        return values
    intervals = _bootstrap([scored], rows, num_bins, confidence, bootstrap, seed)
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
    adds bootstrap intervals), but arrays carry no model to read:
    `from_logits` defaults to `True` and is checked against the values, as
    in `scores`.

    Example:

    >>> out = evaluate_outputs(np.log([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), [0, 1, 1], groups={"a": [1, 1, 0]})
    >>> round(out["all"]["accuracy"], 4), out["a"]["count"], out["a"]["accuracy"]
    (0.6667, 2, 1.0)
    """
    if confidence is not None:
        _check_bootstrap(confidence, bootstrap, seed)
    integer_at_least("num_bins", num_bins, 1)
    scored = (*_checked(outputs, labels, from_logits), from_logits)
    examples = len(outputs)  # a sequence's or an image's predictions are rows of one example
    result = {"all": {**_with_intervals(scored, None, num_bins, confidence, bootstrap, seed), "count": examples}}
    for name, mask in (groups or {}).items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (examples,):
            raise ValueError(
                f"Invalid value for argument `groups`: the mask of group {name!r} has shape {mask.shape}; expected "
                f"({examples},), one entry per example."
            )
        if mask.any():
            rows = np.flatnonzero(np.repeat(mask, len(scored[1]) // examples))
            group = _with_intervals(scored, rows, num_bins, confidence, bootstrap, seed)
            result[name] = {**group, "count": int(mask.sum())}
    return result


def evaluate(
    model,
    data,
    *,
    from_logits: bool | None = None,
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
        from_logits: whether `model` outputs logits; `None` reads the model:
            one whose last layer ends in a softmax (a `Softmax` layer or
            `activation="softmax"`, the way most Keras tutorials end a
            classifier) outputs probabilities, and otherwise the outputs
            decide (every row a distribution: probabilities). `True` or
            `False` is checked against the outputs, and a contradiction is
            refused with the fix. Defaults to `None`.
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
    from_logits = _outputs.model_from_logits(model, outputs, from_logits)
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
        from_logits: whether the outputs are logits, checked against them as
            in `scores`. Defaults to `True`.
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
    integer_at_least("num_bins", num_bins, 1)
    sets = [(*_checked(outputs, labels, from_logits, name), from_logits) for name, outputs in
            (("outputs_a", outputs_a), ("outputs_b", outputs_b))]  # fmt: skip
    difference = lambda a, b: {name: a[name] - b[name] for name in COLUMNS}  # noqa: E731
    values = difference(*(_scores(*scored, num_bins) for scored in sets))
    intervals = _bootstrap(sets, None, num_bins, confidence, bootstrap, seed, combine=difference)
    return {name: Interval(values[name], *intervals[name]) for name in COLUMNS}
