"""Temperature scaling: the layer and the 1-D fit of `T*` on validation logits."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

__all__ = [
    "AUTHORS_BOUNDS",
    "DEFAULT_PRIOR_SCALE",
    "ESTIMATORS",
    "EXTREME_TEMPERATURES",
    "SEARCH_BOUNDS",
    "TemperatureFit",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "estimate_temperature",
    "fit_temperature",
    "fit_temperatures",
]

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, positive
from keras_ils.calibration._float32 import float32_by_default, to_compute_dtype


@keras.saving.register_keras_serializable(package="keras_ils")
class TemperatureScaling(keras.layers.Layer):
    """Divides logits by a temperature `T` (Guo et al., 2017).

    With `from_logits=False` the layer takes and returns probabilities:
    `softmax(log(p) / T)`. The layer computes in float32 under any global
    dtype policy (unless given another `dtype`): its input is cast to
    float32, so rounding never changes the argmax under mixed precision.

    Args:
        temperature: initial (or fixed) temperature, `> 0`. Defaults to `1.0`.
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `trainable=False` fixes `T`;
            `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = TemperatureScaling(temperature=2.0)
    >>> keras.ops.convert_to_numpy(layer(np.array([[2.0, -4.0]])))
    array([[ 1., -2.]], dtype=float32)

    Usage with a trained model:

    ```python
    calibrated = keras.Sequential([model, keras_ils.TemperatureScaling(t_star, trainable=False)])
    ```

    References:
        Guo et al. (2017), "On Calibration of Modern Neural Networks".
    """

    def __init__(self, temperature: float = 1.0, from_logits: bool = True, **kwargs):
        super().__init__(**float32_by_default(kwargs))
        positive("temperature", temperature)
        self.initial_temperature = float(temperature)
        self.from_logits = bool(from_logits)

    def build(self, input_shape):
        self.temperature = self.add_weight(
            name="temperature",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_temperature),
            trainable=True,
        )

    def call(self, inputs):
        inputs = to_compute_dtype(self, inputs)
        temperature = ops.maximum(ops.cast(self.temperature, inputs.dtype), keras.config.epsilon())
        if self.from_logits:
            return inputs / temperature
        log_probabilities = ops.log(ops.clip(inputs, keras.config.epsilon(), 1.0))
        return ops.softmax(log_probabilities / temperature, axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "temperature": self.initial_temperature, "from_logits": self.from_logits}


ESTIMATORS = ("map", "mle", "authors")
SEARCH_BOUNDS = (1e-2, 1e2)
AUTHORS_BOUNDS = (0.8, 3.0)
DEFAULT_PRIOR_SCALE = 0.5
EXTREME_TEMPERATURES = (0.05, 20.0)  # outside this range a fitted T is always reported with a warning
_GRID_POINTS = 64


class TemperatureFit(NamedTuple):
    """What `estimate_temperature` found, for reports.

    Attributes:
        temperature: the `T*` to use.
        status: `"fitted"` (an interior optimum that the data pin down),
            `"regularised"` (the prior moved the estimate: the validation
            NLL has no interior optimum, or the set is too small to pin `T`
            down) or `"at_bound"` (the estimate is an end of the searched range).
        num_examples: validation examples the fit saw.
        estimator: `"map"`, `"mle"` or `"authors"`.
        maximum_likelihood: the unregularised optimum within `SEARCH_BOUNDS`
            (an end of that range when the NLL has no interior optimum).
        warning: the warning issued, or `None`.
    """

    temperature: float
    status: str
    num_examples: int
    estimator: str
    maximum_likelihood: float
    warning: str | None


_BRACKET_WIDTH = 1e-13  # bisection stops once every bracket of log T is this narrow (T to 13 digits)


def _class_major(logits):
    """`[M, n, K]` -> `[K, M, n]` (contiguous): sums and maxima over classes become elementwise over slabs."""
    return np.ascontiguousarray(np.moveaxis(logits, -1, 0))


def _nll_slopes(inverse_temperatures, logits, true_logits):
    """d/d(beta) of each model's mean NLL(softmax(beta * logits)): `E_p[z] - z_t`, increasing in beta; `[M]`.

    `logits` are class-major, `[K, M, n]` (`_class_major`).
    """
    z = logits * inverse_temperatures[:, None]
    z -= z.max(axis=0)
    p = np.exp(z, out=z)
    return np.mean((p * logits).sum(axis=0) / p.sum(axis=0) - true_logits, axis=-1)


def _mean_nll(inverse_temperatures, logits, true_logits):
    """Each model's mean NLL of softmax(beta * logits), `logits` class-major `[K, M, n]`; `[M]`."""
    z = logits * inverse_temperatures[:, None]
    top = z.max(axis=0)
    z -= top
    log_normaliser = top + np.log(np.exp(z, out=z).sum(axis=0))
    return np.mean(log_normaliser - inverse_temperatures[:, None] * true_logits, axis=-1)


def _bisect(increasing, lo, hi, iterations):
    """Bisection on the sign of each model's `increasing(middle)` until every bracket is `_BRACKET_WIDTH` narrow."""
    for _ in range(iterations):
        if np.all(hi - lo <= _BRACKET_WIDTH):
            break
        middle = 0.5 * (lo + hi)
        up = increasing(middle) > 0
        hi = np.where(up, middle, hi)
        lo = np.where(up, lo, middle)
    return lo, hi


def _maximum_likelihood(logits, true_logits, low, high, iterations):
    """The NLL is convex in `beta = 1 / T`: bisection on its derivative's sign, in log space; bounds when none.

    `logits` are class-major, `[K, M, n]` (`_class_major`).
    """
    models = logits.shape[1]
    lo, hi = np.full(models, np.log(1.0 / high)), np.full(models, np.log(1.0 / low))
    at_high = _nll_slopes(np.exp(lo), logits, true_logits) >= 0
    at_low = _nll_slopes(np.exp(hi), logits, true_logits) <= 0
    lo, hi = _bisect(lambda u: _nll_slopes(np.exp(u), logits, true_logits), lo, hi, iterations)
    temperature = np.exp(-0.5 * (lo + hi))
    return np.where(at_high, high, np.where(at_low, low, temperature))


def _maximum_a_posteriori(logits, true_logits, low, high, prior_scale, iterations):
    """Minimises `n * mean NLL + (log T)^2 / (2 prior_scale^2)` over `log T` in `[log low, log high]`.

    A grid of `_GRID_POINTS` values of `u = log(1 / T)` brackets the minimum;
    bisection on the objective's derivative in `u` refines it until the
    bracket is `_BRACKET_WIDTH` wide. Where the objective still falls at an
    end of the range (its derivative's sign there), that end is returned
    exactly. `logits` are class-major, `[K, M, n]` (`_class_major`).
    """
    models, n = logits.shape[1:]

    def slope(u):  # d/du of the objective per example, u = log(1 / T) per model
        beta = np.exp(u)
        return beta * _nll_slopes(beta, logits, true_logits) + u / (prior_scale**2 * n)

    grid = np.linspace(np.log(1.0 / high), np.log(1.0 / low), _GRID_POINTS)
    prior = lambda u: u**2 / (2.0 * prior_scale**2 * n)  # noqa: E731  (per example, like the mean NLL)
    objective = np.stack([_mean_nll(np.full(models, np.exp(u)), logits, true_logits) + prior(u) for u in grid])
    best = objective.argmin(axis=0)
    lo, hi = _bisect(slope, grid[np.maximum(best - 1, 0)], grid[np.minimum(best + 1, _GRID_POINTS - 1)], iterations)
    at_high = slope(np.full(models, grid[0])) >= 0
    at_low = slope(np.full(models, grid[-1])) <= 0
    return np.where(at_high, high, np.where(at_low, low, np.exp(-0.5 * (lo + hi))))


def _check_estimator(estimator, prior_scale, bounds):
    """`(low, high)` of the search after the arguments' checks."""
    if estimator not in ESTIMATORS:
        raise invalid("estimator", f"one of {ESTIMATORS}", estimator)
    positive("prior_scale", prior_scale)
    if bounds is None:
        return AUTHORS_BOUNDS if estimator == "authors" else SEARCH_BOUNDS
    if (
        not isinstance(bounds, (tuple, list))
        or len(bounds) != 2
        or not all(isinstance(b, numbers.Real) and math.isfinite(b) for b in bounds)
        or not 0 < bounds[0] < bounds[1]
    ):
        raise invalid("bounds", "a pair (low, high) with 0 < low < high", bounds)
    return float(bounds[0]), float(bounds[1])


def fit_temperatures(
    logits,
    labels,
    *,
    estimator: str = "map",
    prior_scale: float = DEFAULT_PRIOR_SCALE,
    bounds: tuple | None = None,
    iterations: int = 100,
) -> np.ndarray:
    """`fit_temperature` for many models at once: `[M, n, K]` logits and `[M, n]` labels -> `[M]` T*.

    Every estimator of `fit_temperature`, vectorised over models (float64);
    no warnings and no status (use `estimate_temperature` for one model's).
    `iterations` caps the bisection's halvings of each log-T bracket; it
    stops earlier, once every bracket is 1e-13 wide (T to 13 digits).

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, (2, 20000))
    >>> logits = 2.0 * (rng.normal(size=(2, 20000, 3)) + 2.0 * np.eye(3)[labels])
    >>> np.round(fit_temperatures(logits * np.array([3.0, 0.5])[:, None, None], labels), 1).tolist()
    [3.0, 0.5]
    """
    low, high = _check_estimator(estimator, prior_scale, bounds)
    integer_at_least("iterations", iterations, 1)
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels, np.int64)
    if logits.ndim != 3 or 0 in logits.shape[:2] or logits.shape[2] < 2:
        raise ValueError(f"Argument `logits` must have shape [M >= 1, n >= 1, K >= 2]. Received shape: {logits.shape}")
    try:
        labels = np.broadcast_to(labels, logits.shape[:2])
    except ValueError:
        raise ValueError(
            f"Argument `labels` must have shape [M, n] = {logits.shape[:2]} (or broadcast to it). "
            f"Received shape: {labels.shape}"
        ) from None
    _labels.check_labels_in_range(labels, logits.shape[2])
    true_logits = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return _solve(_class_major(logits), true_logits, estimator, prior_scale, low, high, iterations)


def _solve(logits, true_logits, estimator, prior_scale, low, high, iterations=100):
    """The estimator's `[M]` temperatures on checked float64 arrays (`logits` class-major, `[K, M, n]`)."""
    if estimator == "map":
        return _maximum_a_posteriori(logits, true_logits, low, high, prior_scale, iterations)
    return _maximum_likelihood(logits, true_logits, low, high, iterations)


class TemperatureFitWarning(UserWarning):
    """A temperature fit that did not find a well-determined optimum (see `TemperatureFit.status`)."""


def _diagnosis(temperature, likelihood, n, estimator, prior_scale, low, high):
    """`(status, warning or None)` of a fit."""
    separable = likelihood == SEARCH_BOUNDS[0]
    falls = f"the validation NLL of these {n} examples keeps falling up to T = {likelihood:g}"
    if likelihood == SEARCH_BOUNDS[1]:
        falls += " (the model's logits carry no information about their labels)"
    if estimator == "map":
        prior = f"the maximum a posteriori estimate under the prior log T ~ N(0, {prior_scale:g}^2)"
        if temperature in (low, high):
            return "at_bound", (
                f"Temperature scaling: {prior} lies at or beyond the end of the searched range [{low:g}, {high:g}] "
                f"(the maximum-likelihood T = {likelihood:.4g}); T* = {temperature:g} is that end, not an optimum."
            )
        if likelihood in SEARCH_BOUNDS:
            return "regularised", (
                f"Temperature scaling: {falls}{' (the model separates them)' if separable else ''}, so it has no "
                "optimum; "
                f"T* = {temperature:.4g} is {prior}."
            )
        if abs(math.log(temperature / likelihood)) > math.log(1.1):
            return "regularised", (
                f"Temperature scaling: {n} validation examples are too few to pin T down; the maximum-likelihood "
                f"T = {likelihood:.4g}, and T* = {temperature:.4g} is {prior}."
            )
    elif temperature in (low, high):
        cause = f"{falls} (the model separates them)" if separable else f"the maximum-likelihood T = {likelihood:.4g}"
        return "at_bound", (
            f"Temperature scaling: {cause}; T* = {temperature:g} is the end of the searched range "
            f"[{low:g}, {high:g}], not an optimum. estimator='map' regularises such fits."
        )
    if not EXTREME_TEMPERATURES[0] <= temperature <= EXTREME_TEMPERATURES[1]:
        return "fitted", f"Temperature scaling: T* = {temperature:.4g} ({n} validation examples) is extreme."
    return "fitted", None


def _estimate(logits, labels, estimator, prior_scale, bounds) -> TemperatureFit:
    low, high = _check_estimator(estimator, prior_scale, bounds)
    logits, labels = _labels.outputs_and_labels(logits, labels)
    logits, true_logits = _class_major(logits[None]), logits[np.arange(len(labels)), labels][None]
    likelihood = float(_maximum_likelihood(logits, true_logits, *SEARCH_BOUNDS, iterations=100)[0])
    if estimator != "map" and (low, high) == SEARCH_BOUNDS:
        temperature = likelihood  # the unregularised fit is the estimate itself: not solved twice
    else:
        temperature = float(_solve(logits, true_logits, estimator, prior_scale, low, high)[0])
    status, message = _diagnosis(temperature, likelihood, len(labels), estimator, prior_scale, low, high)
    return TemperatureFit(temperature, status, len(labels), estimator, likelihood, message)


def _warn(fit: TemperatureFit) -> None:
    """The fit's `TemperatureFitWarning`, if it has one, pointing at the caller of the public function."""
    if fit.warning:
        warnings.warn(fit.warning, TemperatureFitWarning, stacklevel=3)


def estimate_temperature(
    logits,
    labels,
    *,
    estimator: str = "map",
    prior_scale: float = DEFAULT_PRIOR_SCALE,
    bounds: tuple | None = None,
) -> TemperatureFit:
    """`fit_temperature` with its diagnosis: the `T*`, a status, the example count, the unregularised optimum.

    Issues a `TemperatureFitWarning` that names the cause whenever the status
    is not `"fitted"` or `T*` lies outside `EXTREME_TEMPERATURES`.

    Example:

    >>> separable = np.array([[4.0, 0.0], [0.0, 4.0], [3.0, -1.0]])
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", TemperatureFitWarning)
    ...     fit = estimate_temperature(separable, [0, 1, 0])
    >>> fit.status, fit.maximum_likelihood, round(fit.temperature, 3), fit.num_examples
    ('regularised', 0.01, 0.954, 3)
    """
    fit = _estimate(logits, labels, estimator, prior_scale, bounds)
    _warn(fit)
    return fit


def fit_temperature(
    logits,
    labels,
    *,
    estimator: str = "map",
    prior_scale: float = DEFAULT_PRIOR_SCALE,
    bounds: tuple | None = None,
) -> float:
    """The temperature `T*` for `softmax(logits / T)`, fitted on validation logits; never extreme in silence.

    Estimators:

    - `"map"` (default): the maximum a posteriori `T` under a weak Gaussian
      prior on `log T`, centred on `T = 1` with scale `prior_scale`:
      minimises `sum_i NLL_i(T) + (log T)^2 / (2 prior_scale^2)`. With
      thousands of validation examples the prior is negligible and this is
      Guo et al.'s fit; on 10-200 examples, or a validation set the model
      separates (where the NLL keeps falling towards `T = 0`), it stays
      finite and near 1 instead of collapsing to a bound.
    - `"mle"`: the plain minimiser of the validation NLL (Guo et al. 2017)
      within `bounds` (default `SEARCH_BOUNDS`); an end of the range when
      the NLL has no interior optimum.
    - `"authors"`: `"mle"` within `AUTHORS_BOUNDS = (0.8, 3.0)`, the range
      the paper's public code gives scipy's L-BFGS-B (the NLL is convex in
      `1 / T`, so that is the bounded optimum), for like-for-like
      reproduction.

    The NLL is convex in `beta = 1 / T`; the fits are bisections on the sign
    of its derivative in `log beta` (the MAP objective is bracketed on a grid
    first), in float64, to machine precision. Whenever the result is not an
    interior optimum that the data pin down, or is outside
    `EXTREME_TEMPERATURES`, a `TemperatureFitWarning` says why and what was
    done; `estimate_temperature` also returns that diagnosis.

    Args:
        logits: `[n, K]` uncalibrated logits.
        labels: sparse labels `[n]`, one-hot/soft `[n, K]` or teacher targets.
        estimator: `"map"`, `"mle"` or `"authors"`. Defaults to `"map"`.
        prior_scale: the standard deviation of the prior on `log T` for
            `"map"`. Defaults to `0.5` (`T` within `[0.37, 2.7]` at two
            standard deviations a priori; Guo et al. report fitted `T` of
            about 1-3 for modern networks).
        bounds: `(low, high)` searched. Defaults to `SEARCH_BOUNDS`
            (`AUTHORS_BOUNDS` for `"authors"`).

    Returns:
        `T*` as a Python float.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, 20000)
    >>> x = rng.normal(size=(20000, 3)) + 2.0 * np.eye(3)[labels]
    >>> calibrated_logits = 2.0 * x   # the true log-posteriors, up to a constant
    >>> round(fit_temperature(3.0 * calibrated_logits, labels), 1)   # 3x over-confident
    3.0
    >>> round(fit_temperature(3.0 * calibrated_logits[:40], labels[:40], estimator="mle"), 2)   # 40 examples
    2.82
    >>> round(fit_temperature(3.0 * calibrated_logits[:40], labels[:40]), 2)   # MAP: pulled towards 1
    2.19
    >>> fit_temperature(3.0 * calibrated_logits[:40], labels[:40], estimator="authors")   # the authors' range
    2.8...

    References:
        Guo et al. (2017), "On Calibration of Modern Neural Networks";
        Gelman et al. (2013), "Bayesian Data Analysis", ch. 13 (posterior
        modes as regularised point estimates).
    """
    fit = _estimate(logits, labels, estimator, prior_scale, bounds)
    _warn(fit)
    return fit.temperature
