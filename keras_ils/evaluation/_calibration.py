"""Top-label calibration scores beyond equal-width ECE, and the Brier decomposition.

Re-exported by `keras_ils.evaluation`, the address to use. Numpy functions of
`probabilities [n, K]` and integer `labels [n]`, checked at the door
(`_inputs.checked_rows`). The adaptive ECE, smooth ECE, debiased L2 and KS
errors read each row's confidence `max_j p_j` and whether its argmax is the
label (`_passes.top_label`; `scores` hands its own to the private `_...`
versions); the Brier decomposition reads every class's probability, by
chunks (`_passes.class_bin_sums`).

Ties: the two scores that sort the confidences read them as values, not as
rows, so that equal confidences (an over-confident float32 model gives many
of exactly 1.0) give one value under any row order. The equal-mass bins
(`adaptive_ece`, `debiased_calibration_error`) never split a block of tied
confidences (`_equal_mass_bins`); the KS error reads its cumulative curves
only where the confidence changes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils._checks import integer_at_least
from keras_ils.evaluation import _inputs, _passes

__all__ = [
    "BrierDecomposition",
    "adaptive_ece",
    "brier_decomposition",
    "debiased_calibration_error",
    "ks_calibration_error",
    "smooth_ece",
]

_MESH = 200  # smooth ECE: fewest evaluation points on [0, 1]
_DENSITY_FLOOR = 1e-4  # smooth ECE: added to the kernel density, so that empty regions weigh (almost) nothing
_SIGMA_TOLERANCE = 1e-3  # smooth ECE: bandwidths below this count as "too small" in the fixed-point search


def _checked_top_label(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """`(confidence, correct)` of checked `probabilities` and `labels` (`_passes.top_label`)."""
    return _passes.top_label(*_inputs.checked_rows(probabilities, labels))


def _equal_mass_bins(confidence, num_bins: int) -> np.ndarray:
    """The equal-mass bin of each of the sorted `confidence [n]`, a block of tied confidences never split.

    By rank, the rows form `min(num_bins, n)` groups whose sizes differ by
    at most one, the larger first (`numpy.array_split`). A row's bin is the
    number of groups whose last confidence is below its own, so a block of
    equal confidences that the groups would cut goes whole to the bin where
    it begins, and a bin may end up empty. The bins are a function of the
    values alone: any row order gives the same bins.
    """
    n = len(confidence)
    groups = min(num_bins, n)
    ends = np.cumsum(np.full(groups, n // groups) + (np.arange(groups) < n % groups))
    return np.searchsorted(confidence[ends[:-1] - 1], confidence, side="left")


def _sorted(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """`confidence` and `correct` sorted by confidence: the sorted confidences do not depend on the row order."""
    order = np.argsort(confidence, kind="stable")
    return confidence[order], correct[order]


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
    return _smooth_ece(*_checked_top_label(probabilities, labels))


def _smooth_ece(confidence, correct) -> float:
    """`smooth_ece` of the rows' `confidence` and `correct` (float64 `[n]`)."""
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


def adaptive_ece(probabilities, labels, num_bins: int = 15) -> float:
    """Equal-mass (adaptive) ECE: the top-label ECE with bins of equally many predictions.

    The rows are sorted by their confidence `max_j p_j` and split by rank
    into `num_bins` bins whose sizes differ by at most one, the larger first
    (`numpy.array_split`), except that a block of tied confidences is never
    split: it goes whole to the bin where it begins (so that bin holds more
    and a later one less, or none). Then

    ```
    adaptive ECE = sum_b |B_b| / N * |accuracy(B_b) - confidence(B_b)|
    ```

    Empty bins count for nothing. Equal-width bins leave most bins nearly
    empty when confidences crowd near 1; equal mass gives every bin the same
    share of the data (Nixon et al. 2019; Roelofs et al. 2022, "ECE_EM"). Not
    streamable: a bin's members depend on every prediction, so there is no
    Keras metric of it.

    Ties: the bins depend on the confidences' values only, so any row order
    gives the same value; splitting a tied block by row order (a stable
    sort, as this function did before) made it depend on the order. These
    are the bins of `uncertainty-calibration`'s `get_equal_bins` (edges
    midway between the groups, a confidence in the first bin whose edge is
    `>=` it), so `adaptive_ece` equals its
    `calibration.get_ece_em(probabilities, labels, num_bins=num_bins)`, ties
    included, and `debiased_calibration_error` uses the same bins.

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
    >>> tied = [[0.6, 0.4], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]]   # the 0.9 block is not split: one bin
    >>> round(adaptive_ece(tied, [0, 0, 1, 1], num_bins=2), 4), round(adaptive_ece(tied, [0, 1, 1, 0], num_bins=2), 4)
    (0.325, 0.325)

    References:
        Nixon et al. (2019), "Measuring Calibration in Deep Learning";
        Roelofs et al. (2022), "Mitigating Bias in Calibration Error Estimation".
    """
    integer_at_least("num_bins", num_bins, 1)
    return _adaptive_ece(*_checked_top_label(probabilities, labels), num_bins)


def _adaptive_ece(confidence, correct, num_bins: int) -> float:
    confidence, correct = _sorted(confidence, correct)
    bins = _equal_mass_bins(confidence, num_bins)
    gaps = np.bincount(bins, correct, num_bins) - np.bincount(bins, confidence, num_bins)
    return float(np.abs(gaps).sum() / len(confidence))


def debiased_calibration_error(probabilities, labels, num_bins: int = 15) -> float:
    """Kumar et al.'s (2019) debiased top-label L2 calibration error, with equal-mass bins.

    The bins are `adaptive_ece`'s: the confidences sorted and split into
    `min(num_bins, n)` groups of equal size (`numpy.array_split`), a block of
    tied confidences never split (it goes whole to the bin where it begins).
    In each bin with at least two rows, the squared gap between mean
    confidence and accuracy is debiased by subtracting the accuracy's
    sampling variance; bins are weighted by their share of rows, and the
    square root is taken of the sum (clipped at 0). This is
    `calibration.get_calibration_error(probs, labels, p=2, debias=True,
    mode="top-label")` of the `uncertainty-calibration` package on
    continuous probabilities (its default of 15 bins; tested to 1e-6), and
    its `lower_bound_scaling_ce(..., num_bins=num_bins)` with ties too. That
    `get_calibration_error` switches to one bin per distinct value when
    every class's probabilities take few values (fewer than n/4); this one
    always uses equal-mass bins.

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
    return _debiased_calibration_error(*_checked_top_label(probabilities, labels), num_bins)


def _debiased_calibration_error(confidence, correct, num_bins: int) -> float:
    confidence, correct = _sorted(confidence, correct)
    bins = _equal_mass_bins(confidence, num_bins)
    counts = np.bincount(bins, minlength=num_bins).astype(np.float64)
    size = np.maximum(counts, 1)
    accuracy = np.bincount(bins, correct, num_bins) / size
    gap = np.bincount(bins, confidence, num_bins) / size - accuracy
    terms = np.where(counts >= 2, gap**2 - accuracy * (1 - accuracy) / np.maximum(counts - 1, 1), 0.0)
    return float(np.sqrt(max(np.sum(counts / len(confidence) * terms), 0.0)))


def ks_calibration_error(probabilities, labels) -> float:
    """Kolmogorov-Smirnov calibration error (Gupta et al. 2021): the largest gap of the cumulative curves.

    The rows are sorted by their confidence `max_j p_j`; the cumulative
    accuracy and cumulative confidence curves are the running sums of
    `correct_i / n` and `confidence_i / n`, and the error is their largest
    vertical distance. No bins.

    Ties: the curves are read only where the confidence changes (after the
    last row of each block of equal confidences, as the empirical
    distribution functions are), so any row order gives the same value.
    Gupta et al.'s code reads them after every row of an `argsort`, so its
    value with tied confidences depends on their order (within a block the
    curves move by at most the block's share of rows); without ties the two
    agree. `uncertainty-calibration` has no KS error.

    Formula:

    ```
    KS = max_t |(1/n) sum_{i: confidence_i <= t} (correct_i - confidence_i)|,   t over the confidences
    ```

    Args:
        probabilities: `[n, K]` predicted probabilities.
        labels: `[n]` integer labels.

    Returns:
        The KS calibration error as a float.

    Example:

    >>> round(ks_calibration_error([[0.6, 0.4], [0.9, 0.1]], [1, 0]), 4)   # running sums -0.3, then -0.25
    0.3
    >>> round(ks_calibration_error([[0.9, 0.1], [0.9, 0.1]], [0, 1]), 4)   # one block: read after both rows
    0.4

    References:
        Gupta, Rahimi, Ajanthan, Mensink, Sminchisescu & Hartley (2021),
        "Calibration of Neural Networks using Splines", ICLR.
    """
    return _ks_calibration_error(*_checked_top_label(probabilities, labels))


def _ks_calibration_error(confidence, correct) -> float:
    confidence, correct = _sorted(confidence, correct)
    gaps = np.cumsum(correct) - np.cumsum(confidence)  # the integer sums are exact: no order inside a tie shows
    block_ends = np.append(confidence[1:] != confidence[:-1], True)
    return float(np.max(np.abs(gaps[block_ends])) / len(confidence))


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

    All are read from per-class sums over the bins, a chunk of rows at a
    time (`_passes.class_bin_sums`), so no `[n, K]` copy is made.

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
    probabilities, labels = _inputs.checked_rows(probabilities, labels)
    return _brier_decomposition(_passes.class_bin_sums(probabilities, labels, num_bins))


def _brier_decomposition(sums: _passes.ClassBinSums) -> BrierDecomposition:
    """The terms from the per-class bin sums: `sum_i (p - f_b(i))^2 = sum p^2 - sum_b n_b f_b^2` and, in a bin,
    `sum (p - f)(y - o) = sum p y - n_b f o`."""
    n = sums.counts[0].sum()  # each row is in one bin of class 0
    size = np.maximum(sums.counts, 1)
    mean_probability, frequency = sums.probability / size, sums.label_counts / size
    overall = sums.label_counts.sum(axis=-1, keepdims=True) / n
    covariance = sums.label_probability - sums.counts * mean_probability * frequency
    return BrierDecomposition(
        reliability=float(np.sum(sums.counts * (mean_probability - frequency) ** 2) / n),
        resolution=float(np.sum(sums.counts * (frequency - overall) ** 2) / n),
        uncertainty=float(np.sum(overall * (1 - overall))),
        within_bin_variance=float((sums.square - np.sum(sums.counts * mean_probability**2)) / n),
        within_bin_covariance=float(2 * np.sum(covariance) / n),
    )
