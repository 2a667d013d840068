"""The numpy scores' passes over `[n, K]` outputs, a chunk of rows at a time.

A score reads each row's top label (`top_label`), the label's
log-probability and, for the classwise scores (cwECE, Brier and its
decomposition), per-class sums over the paper's bins of every probability
(`class_bin_sums`). Those are all it keeps of the `[n, K]` outputs, so
`summarise` reads them chunk by chunk (`CHUNK_VALUES` values, a few MiB)
and no `[n, K]` temporary is ever made: a 1,000,000 x 1,000 float32 set
(4 GB) is scored in a few passes and a few MiB beyond it. The per-class
sums bin only the entries above the first bin, `p > 1 / num_bins` (fewer
than `num_bins` a row), and take the first bin's as the column totals less
the rest: `numpy.bincount` over all `n K` entries would cost several times
the other passes together at K = 1,000.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np

from keras_ils import metrics as _metrics

__all__ = ["CHUNK_VALUES", "ClassBinSums", "Summary", "clipped_log", "softmax", "summarise", "top_label"]

CHUNK_VALUES = 2**20  # values of the outputs read at a time: 4 MiB of float32


def row_chunks(num_rows: int, num_classes: int):
    """Slices of `range(num_rows)` of about `CHUNK_VALUES / num_classes` rows each."""
    step = max(1, CHUNK_VALUES // num_classes)
    return (slice(start, min(start + step, num_rows)) for start in range(0, num_rows, step))


def softmax(logits) -> tuple[np.ndarray, np.ndarray]:
    """`(probabilities, log_probabilities)` of float32 `logits [m, K]` by a log-softmax, float32."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.exp(log_probabilities), log_probabilities


def clipped_log(probabilities) -> np.ndarray:
    """`log(clip(p, epsilon, 1))`: the log of probabilities as `keras_ils.metrics` takes it."""
    return np.log(np.clip(probabilities, keras.config.epsilon(), 1.0))


def top_label(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """`(confidence, correct)` as float64 `[n]`: each row's top probability and whether its argmax is the label."""
    prediction = probabilities.argmax(axis=-1)
    confidence = probabilities[np.arange(len(prediction)), prediction].astype(np.float64)
    return confidence, (prediction == labels).astype(np.float64)


class ClassBinSums(NamedTuple):
    """Float64 sums per class `j` and bin `b` of `p_ij` (`keras_ils.metrics.bin_index`), each `[K, num_bins]`.

    `counts` and `probability` sum 1 and `p_ij` over every row;
    `label_counts` and `label_probability` sum 1 and `p_ij` over the rows
    whose label is `j`; `square` is the sum of every `p_ij ** 2`, a float.
    """

    counts: np.ndarray
    probability: np.ndarray
    label_counts: np.ndarray
    label_probability: np.ndarray
    square: float


class _ClassBins:
    """Accumulates `ClassBinSums` over chunks of rows (`add`), the first bin by difference (`sums`)."""

    def __init__(self, num_classes: int, num_bins: int):
        self.num_classes, self.num_bins, self.rows, self.square = num_classes, num_bins, 0, 0.0
        self.columns = np.zeros(num_classes)  # column sums of p
        self.cells = np.zeros((4, num_classes * num_bins))  # the four per-cell sums, flat

    def add(self, probabilities, labels) -> None:
        size, float32 = self.num_classes * self.num_bins, probabilities.astype(np.float32, copy=False)
        # the entries beyond the first bin: `bin_index` > 0, i.e. ceil(p * num_bins) > 1, i.e. p * num_bins > 1
        above = np.flatnonzero(float32 * np.float32(self.num_bins) > 1)
        cells = (above % self.num_classes) * self.num_bins + _metrics.bin_index(float32.ravel()[above], self.num_bins)
        rows = np.arange(len(labels))
        label_cells = labels * self.num_bins + _metrics.bin_index(float32[rows, labels], self.num_bins)
        self.cells += (
            np.bincount(cells, minlength=size),
            np.bincount(cells, probabilities.ravel()[above], size),
            np.bincount(label_cells, minlength=size),
            np.bincount(label_cells, probabilities[rows, labels], size),
        )
        self.columns += probabilities.sum(axis=0, dtype=np.float64)
        self.square += float(np.square(probabilities, dtype=np.float64).sum())
        self.rows += len(labels)

    def sums(self) -> ClassBinSums:
        counts, probability, label_counts, label_probability = (
            c.reshape(self.num_classes, self.num_bins).copy() for c in self.cells
        )
        counts[:, 0] = self.rows - counts[:, 1:].sum(axis=-1)
        probability[:, 0] = self.columns - probability[:, 1:].sum(axis=-1)
        return ClassBinSums(counts, probability, label_counts, label_probability, self.square)


def class_bin_sums(probabilities, labels, num_bins: int) -> ClassBinSums:
    """`ClassBinSums` of checked `probabilities [n, K]` and `labels [n]`, chunk by chunk."""
    sums = _ClassBins(probabilities.shape[-1], num_bins)
    for part in row_chunks(*probabilities.shape):
        sums.add(probabilities[part], labels[part])
    return sums.sums()


class Summary(NamedTuple):
    """What the scores read of a set of predictions: per-row top label and label log-probability, class sums."""

    confidence: np.ndarray
    correct: np.ndarray
    label_log_probability: np.ndarray
    class_bins: ClassBinSums


def summarise(outputs, labels, from_logits: bool, num_bins: int, rows=None) -> Summary:
    """The `Summary` of checked `outputs [n, K]` (float32, as `scores` reads them) against `labels [n]`.

    `rows` (integer indices, e.g. a bootstrap resample or a group) reads
    those rows, in that order, instead of all.
    """
    num_rows = len(labels) if rows is None else len(rows)
    confidence, correct = np.empty(num_rows), np.empty(num_rows)
    label_log_probability = np.empty(num_rows, dtype=np.float32)
    class_bins = _ClassBins(outputs.shape[-1], num_bins)
    for part in row_chunks(num_rows, outputs.shape[-1]):
        index = part if rows is None else rows[part]
        chunk, chunk_labels = outputs[index].astype(np.float32, copy=False), labels[index]
        at_label = (np.arange(len(chunk_labels)), chunk_labels)
        if from_logits:
            probabilities, log_probabilities = softmax(chunk)
            label_log_probability[part] = log_probabilities[at_label]
        else:
            probabilities = chunk
            label_log_probability[part] = clipped_log(chunk[at_label])
        confidence[part], correct[part] = top_label(probabilities, chunk_labels)
        class_bins.add(probabilities, chunk_labels)
    return Summary(confidence, correct, label_log_probability, class_bins.sums())
