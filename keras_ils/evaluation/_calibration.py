"""Calibration scores beyond binned ECE: smooth ECE, debiased L2 calibration error, KS error, Brier decomposition.

Re-exported by `keras_ils.evaluation`, the address to use. Numpy functions of
`probabilities [n, K]` and integer `labels [n]`, the conventions of
`adaptive_ece`. The three top-label errors read each row's confidence
`max_j p_j` and whether its argmax is the label; the Brier decomposition
reads every class's probability.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np

from keras_ils import metrics as _metrics
from keras_ils._checks import integer_at_least

__all__ = [
    "BrierDecomposition",
    "brier_decomposition",
    "debiased_calibration_error",
    "ks_calibration_error",
    "smooth_ece",
]

_MESH = 200  # smooth ECE: fewest evaluation points on [0, 1]
_DENSITY_FLOOR = 1e-4  # smooth ECE: added to the kernel density, so that empty regions weigh (almost) nothing
_SIGMA_TOLERANCE = 1e-3  # smooth ECE: bandwidths below this count as "too small" in the fixed-point search


def _rows(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """`(probabilities as float64 [n, K], labels as int [n])`, checked."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    if probabilities.ndim != 2 or labels.shape != probabilities.shape[:1]:
        raise ValueError(
            "Arguments `probabilities` and `labels` must have shapes [n, K] and [n]. "
            f"Received: {probabilities.shape} and {labels.shape}"
        )
    return probabilities, labels.astype(int)


def _top_label(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """`(confidence, correct)` as float64: each row's top probability and whether its argmax is the label."""
    probabilities, labels = _rows(probabilities, labels)
    return probabilities.max(axis=-1), (probabilities.argmax(axis=-1) == labels).astype(np.float64)


def _grid_spectra(confidence, values, size) -> np.ndarray:
    """The FFT of each row of `values` put on `size` grid points over [0, 1] and mirrored into one period.

    Each value is split linearly between the two grid points nearest its
    confidence; the grid `g_0 .. g_{size-1}` and its mirror image
    `g_{size-2} .. g_1` make one period of length `2 (size - 1)` of the
    sequence reflected at 0 and 1 (the reference implementation's
    reflection), so a circular convolution with it is the reflected one.
    """
    position = confidence * (size - 1)
    left = np.clip(position.astype(int), 0, size - 2)
    share = position - left
    grid = np.stack([np.bincount(left, (1 - share) * v, size) + np.bincount(left + 1, share * v, size) for v in values])
    return np.fft.rfft(np.concatenate([grid, grid[:, -2:0:-1]], axis=1), axis=1)


def _reflected_gaussian_smooth(spectra, size, sigma, where) -> np.ndarray:
    """`sum_i values[c, i] k_sigma(x - confidence_i)` at `where` for each row `c` of `_grid_spectra`' values, `k` a
    Gaussian reflected at 0 and 1, sampled on the grid.

    The discretisation of Błasiok & Nakkiran's reference implementation: the
    grid has `size = max(2000, 20 / sigma) // 2 + 1` points, the Gaussian is
    sampled on `size` offsets from -1/2 to 1/2 and convolved with the
    mirrored grid (here circularly, by FFT, over one period; equal to its
    `numpy.convolve` to about 1e-13), and the result is read at `where` by
    linear interpolation.
    """
    period = 2 * (size - 1)
    offsets = np.linspace(0, 1, size) - 0.5
    kernel = np.zeros(period)
    kernel[(np.arange(size) - size // 2) % period] = np.exp(-(offsets**2) / (2 * sigma**2)) / (
        np.sqrt(2 * np.pi) * sigma
    )
    smoothed = np.fft.irfft(spectra * np.fft.rfft(kernel), period, axis=1)[:, :size]
    grid_points = np.linspace(0, 1, size)
    return np.stack([np.interp(where, grid_points, row) for row in smoothed])


def _smooth_ece_at(confidence, correct, sigma, spectra: dict) -> float:
    """The smooth ECE at bandwidth `sigma`: the density-weighted mean of the smoothed |residual|.

    `spectra` caches `_grid_spectra` by grid size (the same for every
    `sigma >= 0.01`, the bisection's usual range).
    """
    size = max(2000, round(20 / sigma)) // 2 + 1
    if size not in spectra:
        spectra[size] = _grid_spectra(confidence, np.stack([np.ones_like(confidence), confidence - correct]), size)
    where = np.linspace(0, 1, max(round(10 / sigma), _MESH))
    density, residual = _reflected_gaussian_smooth(spectra[size], size, sigma, where)
    density = density + _DENSITY_FLOOR
    return float(np.sum(np.abs(residual / density) * density) / np.sum(density))


def smooth_ece(probabilities, labels) -> float:
    """Top-label smooth ECE (Błasiok & Nakkiran 2023): ECE with a kernel instead of bins, at a self-chosen width.

    The residuals `confidence - correct` are smoothed over the confidence axis
    with a Gaussian kernel reflected at 0 and 1; the smooth ECE at bandwidth
    `sigma` is the mean absolute smoothed residual, weighted by the smoothed
    density of the confidences. The bandwidth is the fixed point
    `sigma = smECE_sigma`, found by bisection on `(0, 1]` (10 halvings; widths
    below `1e-3` count as too small), as in the authors' `relplot.smECE`,
    whose discretisation this follows: `smooth_ece` equals
    `relplot.smECE(confidence, correct)` (tested to 1e-4). Unlike binned ECE
    it is continuous in the predictions and has no bin count to choose.

    Formula:

    ```
    r(t) = sum_i (f_i - y_i) K_sigma(t, f_i) / sum_i K_sigma(t, f_i)
    smECE_sigma = integral |r(t)| d(t) dt / integral d(t) dt,   d(t) = sum_i K_sigma(t, f_i)
    smECE = smECE_sigma* where sigma* = smECE_sigma*
    ```

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.

    Returns:
        The smooth ECE as a float.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> confidence = rng.uniform(0.5, 1.0, 2000)
    >>> probs = np.stack([confidence, 1 - confidence], axis=1)
    >>> labels = (rng.uniform(size=2000) > confidence).astype(int)   # calibrated: P(label 0) = confidence
    >>> smooth_ece(probs, labels) < 0.03
    True
    >>> round(smooth_ece(probs, np.zeros(2000, int)), 2)   # always right: the gap is 1 - mean confidence
    0.25

    References:
        Błasiok & Nakkiran (2023), "Smooth ECE: Principled Reliability
        Diagrams via Kernel Smoothing".
    """
    confidence, correct = _top_label(probabilities, labels)
    spectra, values = {}, {}

    def at(sigma):
        if sigma not in values:
            values[sigma] = _smooth_ece_at(confidence, correct, sigma, spectra)
        return values[sigma]

    def too_narrow(sigma):
        return sigma < _SIGMA_TOLERANCE or sigma < at(sigma)

    wide, narrow = 1.0, 0.0
    if too_narrow(wide):  # sigma = 1 below its own smooth ECE: no fixed point in (0, 1]; take the widest
        return at(wide)
    for _ in range(10):
        middle = (wide + narrow) / 2
        if too_narrow(middle):
            narrow = middle
        else:
            wide = middle
    return at(wide)


def debiased_calibration_error(probabilities, labels, num_bins: int = 15) -> float:
    """Kumar et al.'s (2019) debiased top-label L2 calibration error, with equal-mass bins.

    The confidences are sorted and split into `min(num_bins, n)` groups of
    equal size (`numpy.array_split`); the bin edges are the midpoints between
    neighbouring groups, the last edge is 1, and a row falls in the first bin
    whose edge is `>=` its confidence (so tied confidences share a bin). In
    each bin with at least two rows, the squared gap between mean confidence
    and accuracy is debiased by subtracting the accuracy's sampling variance;
    bins are weighted by their share of rows, and the square root is taken
    of the sum (clipped at 0). This is `calibration.get_calibration_error(
    probs, labels, p=2, debias=True, mode="top-label")` of the
    `uncertainty-calibration` package on continuous probabilities (its
    default of 15 bins; tested to 1e-6). That function switches to one bin
    per distinct value when every class's probabilities take few values
    (fewer than n/4); this one always uses equal-mass bins.

    Formula:

    ```
    CE^2 = sum_b |B_b|/n * [(conf(B_b) - acc(B_b))^2 - acc(B_b)(1 - acc(B_b)) / (|B_b| - 1)]
    debiased CE = sqrt(max(CE^2, 0))
    ```

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.
        num_bins: number of equal-mass bins, `>= 1`. Defaults to `15`.

    Returns:
        The debiased L2 calibration error as a float.

    Example:

    >>> probs = [[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.7, 0.3]]
    >>> round(debiased_calibration_error(probs, [0, 0, 1, 0], num_bins=1), 4)   # gap 0.0, variance 0.0625
    0.0

    References:
        Kumar, Liang & Ma (2019), "Verified Uncertainty Calibration", NeurIPS.
    """
    integer_at_least("num_bins", num_bins, 1)
    confidence, correct = _top_label(probabilities, labels)
    n = len(confidence)
    if n == 0:
        return 0.0
    groups = np.array_split(np.sort(confidence), min(num_bins, n))
    edges = np.unique([(low[-1] + high[0]) / 2 for low, high in zip(groups[:-1], groups[1:], strict=True)] + [1.0])
    bins = np.searchsorted(edges, confidence)  # side="left": the first edge >= the confidence
    counts = np.bincount(bins, minlength=len(edges) + 1).astype(np.float64)
    size = np.maximum(counts, 1)
    accuracy = np.bincount(bins, correct, len(edges) + 1) / size
    gap = np.bincount(bins, confidence, len(edges) + 1) / size - accuracy
    terms = np.where(counts >= 2, gap**2 - accuracy * (1 - accuracy) / np.maximum(counts - 1, 1), 0.0)
    return float(np.sqrt(max(np.sum(counts / n * terms), 0.0)))


def ks_calibration_error(probabilities, labels) -> float:
    """Kolmogorov-Smirnov calibration error (Gupta et al. 2021): the largest gap of the cumulative curves.

    The rows are sorted by their confidence `max_j p_j` (a stable sort: ties
    keep their order), and the error is the largest absolute running sum of
    `(correct_i - confidence_i) / n`: the largest vertical distance between
    the cumulative accuracy and cumulative confidence curves. No bins.

    Formula:

    ```
    KS = max_k |(1/n) sum_{i <= k} (correct_(i) - confidence_(i))|,   rows sorted by confidence
    ```

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.

    Returns:
        The KS calibration error as a float (0 for no rows).

    Example:

    >>> round(ks_calibration_error([[0.6, 0.4], [0.9, 0.1]], [1, 0]), 4)   # running sums -0.3, then -0.25
    0.3

    References:
        Gupta, Rahimi, Ajanthan, Mensink, Sminchisescu & Hartley (2021),
        "Calibration of Neural Networks using Splines", ICLR.
    """
    confidence, correct = _top_label(probabilities, labels)
    if len(confidence) == 0:
        return 0.0
    order = np.argsort(confidence, kind="stable")
    return float(np.max(np.abs(np.cumsum(correct[order] - confidence[order]) / len(confidence))))


class BrierDecomposition(NamedTuple):
    """The terms of `brier_decomposition`; `brier` is their sum, the Brier score."""

    reliability: float
    resolution: float
    uncertainty: float
    within_bin_variance: float
    within_bin_covariance: float

    @property
    def brier(self) -> float:
        """`reliability - resolution + uncertainty + within_bin_variance - within_bin_covariance`."""
        return (
            self.reliability
            - self.resolution
            + self.uncertainty
            + self.within_bin_variance
            - self.within_bin_covariance
        )


def brier_decomposition(probabilities, labels, num_bins: int = 15) -> BrierDecomposition:
    """Murphy's decomposition of the Brier score into reliability, resolution and uncertainty, per class bins.

    The package's Brier score is `mean_i sum_j (p_ij - y_ij)^2` (y one-hot),
    so it is the sum over classes of one-vs-rest Brier scores, and each is
    decomposed over bins of that class's probability (the paper's 15
    equal-width bins, `keras_ils.metrics.bin_index`). With `n_b` rows in bin
    `b` of class `j`, mean probability `f_b`, class frequency `o_b`, and `o`
    the class's overall frequency:

    - `reliability = (1/n) sum_j sum_b n_b (f_b - o_b)^2`, lower is better;
    - `resolution = (1/n) sum_j sum_b n_b (o_b - o)^2`, higher is better;
    - `uncertainty = sum_j o (1 - o)`, the data's alone.

    Murphy's identity `brier = reliability - resolution + uncertainty` holds
    when the probabilities are constant within each bin; in general two
    within-bin terms complete it (Stephenson et al. 2008), so that the five
    sum to the Brier score exactly (`BrierDecomposition.brier`):

    - `within_bin_variance = (1/n) sum_j sum_i (p_ij - f_b(i))^2`;
    - `within_bin_covariance = (2/n) sum_j sum_i (p_ij - f_b(i)) (y_ij - o_b(i))`.

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.
        num_bins: equal-width bins per class, `>= 1`. Defaults to `15`.

    Returns:
        A `BrierDecomposition` of floats.

    Example:

    >>> probs = [[0.8, 0.2], [0.8, 0.2], [0.3, 0.7], [0.3, 0.7]]
    >>> terms = brier_decomposition(probs, [0, 1, 1, 1])
    >>> [round(t, 4) for t in terms]   # constant within bins: the last two are 0
    [0.18, 0.125, 0.375, 0.0, 0.0]
    >>> round(terms.brier, 4)
    0.43

    References:
        Murphy (1973), "A New Vector Partition of the Probability Score";
        Stephenson, Coelho & Jolliffe (2008), "Two Extra Components in the
        Brier Score Decomposition".
    """
    integer_at_least("num_bins", num_bins, 1)
    probabilities, labels = _rows(probabilities, labels)
    n, k = probabilities.shape
    one_hot = np.eye(k)[labels]
    bins = keras.ops.convert_to_numpy(_metrics.bin_index(probabilities.astype(np.float32), num_bins))
    bins = bins + num_bins * np.arange(k)  # class j's bins are j * num_bins + b
    counts = np.bincount(bins.ravel(), minlength=k * num_bins).astype(np.float64)
    size = np.maximum(counts, 1)
    mean_probability = np.bincount(bins.ravel(), probabilities.ravel(), k * num_bins) / size
    frequency = np.bincount(bins.ravel(), one_hot.ravel(), k * num_bins) / size
    overall = np.repeat(one_hot.mean(axis=0), num_bins)
    spread = probabilities - mean_probability[bins]
    return BrierDecomposition(
        reliability=float(np.sum(counts * (mean_probability - frequency) ** 2) / n),
        resolution=float(np.sum(counts * (frequency - overall) ** 2) / n),
        uncertainty=float(np.sum(one_hot.mean(axis=0) * (1 - one_hot.mean(axis=0)))),
        within_bin_variance=float(np.sum(spread**2) / n),
        within_bin_covariance=float(2 * np.sum(spread * (one_hot - frequency[bins])) / n),
    )
