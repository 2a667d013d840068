"""Evaluate a classifier: accuracy, NLL, ECE, cwECE, Brier, MCE, overall and per subgroup.

The scores are computed in numpy on the whole set of predictions, with the
formulas of the streaming metrics in `keras_ils.metrics` and their bins
(`keras_ils.metrics.bin_index`, the one bin rule); numpy because reports and
the synthetic protocol score thousands of prediction sets and a Keras metric
object costs ~40 ms a call. Reliability diagrams (`keras_ils.plots`) draw the
same per-bin sums, `top_label_bins`.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_ils import _labels
from keras_ils import metrics as _metrics
from keras_ils.data import predict_with_labels

COLUMNS = ("accuracy", "nll", "ece", "cwece", "class_conditional_ece", "brier", "mce")


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
        `{name: float}` for the names of `COLUMNS`.

    Example:

    >>> out = scores(np.log([[0.9, 0.1], [0.2, 0.8]]), [0, 0])
    >>> round(out["accuracy"], 2), round(out["nll"], 4)
    (0.5, 0.8574)
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    num_classes = outputs.shape[-1]
    labels = keras.ops.convert_to_numpy(_labels.hard_labels(labels, num_classes, outputs.ndim)).reshape(-1)
    probs, log_probs = (a.reshape(-1, num_classes) for a in probabilities(outputs, from_logits=from_logits))
    counts, correct_sums, confidence_sums = top_label_bins(probs, labels, num_bins)
    rows = np.arange(len(labels))
    one_hot = np.eye(num_classes)[labels]
    return dict(
        accuracy=float(np.mean(probs.argmax(axis=-1) == labels)),
        nll=float(-log_probs[rows, labels].astype(np.float64).mean()),
        ece=float(_ece(counts, correct_sums, confidence_sums)),
        cwece=float(_classwise_ece(probs, one_hot, num_bins)),
        class_conditional_ece=float(_class_conditional_ece(probs, labels, num_bins)),
        brier=float(np.mean(np.sum(np.square(probs - one_hot), axis=-1))),
        mce=float(np.max(np.abs(correct_sums - confidence_sums) / np.maximum(counts, 1))),
    )


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


def evaluate_outputs(outputs, labels, *, from_logits: bool = True, groups: dict | None = None, num_bins: int = 15):
    """`evaluate` for predictions already made: `{"all": {...}, group: {...}}` with counts.

    Example:

    >>> out = evaluate_outputs(np.log([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), [0, 1, 1], groups={"a": [1, 1, 0]})
    >>> round(out["all"]["accuracy"], 4), out["a"]["count"], out["a"]["accuracy"]
    (0.6667, 2, 1.0)
    """
    outputs, labels = np.asarray(outputs), np.asarray(labels)
    result = {"all": {**scores(outputs, labels, from_logits=from_logits, num_bins=num_bins), "count": len(labels)}}
    for name, mask in (groups or {}).items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (len(labels),):
            raise ValueError(f"The mask of group {name!r} has shape {mask.shape}; expected ({len(labels)},).")
        if mask.any():
            group = scores(outputs[mask], labels[mask], from_logits=from_logits, num_bins=num_bins)
            result[name] = {**group, "count": int(mask.sum())}
    return result


def evaluate(model, data, *, from_logits: bool = True, groups: dict | None = None, num_bins: int = 15) -> dict:
    """Scores `model` on `data`, overall and on each subgroup.

    Args:
        model: a Keras classifier.
        data: `(x, y)` arrays or a dataset of `(x, y)` batches (tfds dicts too),
            in a fixed order when `groups` is given.
        from_logits: whether `model` outputs logits. Defaults to `True`.
        groups: optional `{name: boolean mask over the examples}`, e.g. the
            synthetic task's `{"dense": dense, "sparse": ~dense}`.
        num_bins: bins of the calibration errors. Defaults to `15`.

    Returns:
        `{"all": {...}, name: {...} for each group}`, each with the keys of
        `COLUMNS` plus `"count"`.

    Example:

    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2)])
    >>> result = evaluate(model, (np.zeros((4, 1)), np.array([0, 1, 0, 1])), groups={"first": np.arange(4) < 2})
    >>> result["all"]["accuracy"], result["first"]["count"]
    (0.5, 2)
    """
    outputs, labels = predict_with_labels(model, data)
    return evaluate_outputs(outputs, labels, from_logits=from_logits, groups=groups, num_bins=num_bins)
