"""Evaluate a classifier: accuracy, NLL, ECE, cwECE, Brier, MCE, overall and per subgroup."""

from __future__ import annotations

import numpy as np

from keras_ils import metrics as _metrics
from keras_ils.data import predict_with_labels

COLUMNS = ("accuracy", "nll", "ece", "cwece", "class_conditional_ece", "brier", "mce")


def scores(outputs, labels, *, from_logits: bool = True, num_bins: int = 15) -> dict:
    """All the package's evaluation metrics of predictions `outputs [n, K]` against `labels`.

    Uses the streaming metric classes of `keras_ils.metrics` on the whole set.

    Example:

    >>> out = scores(np.log([[0.9, 0.1], [0.2, 0.8]]), [0, 0])
    >>> round(out["accuracy"], 2), round(out["nll"], 4)
    (0.5, 0.8574)
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    num_classes = outputs.shape[-1]
    metrics = _metrics.calibration_metrics(num_classes, num_bins, from_logits) + [
        _metrics.ClassConditionalECE(num_classes, num_bins, from_logits)
    ]
    for metric in metrics:
        metric.update_state(labels, outputs)
    values = {metric.name: float(metric.result()) for metric in metrics}
    values["accuracy"] = values.pop("top_label_accuracy")
    return {name: values[name] for name in COLUMNS}


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
