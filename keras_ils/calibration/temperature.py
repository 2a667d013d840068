"""Temperature scaling: the layer and the 1-D fit of `T*` on validation logits.

`fit_calibrator("temperature", logits, labels)` fits it (`_estimate` here);
the arithmetic is `_temperature_solver`'s: a safeguarded Newton method on
`log T`, one pass over the logits per step (`keras.ops`, on the backend's device). `fit_temperature`,
`estimate_temperature`, `fit_temperatures` and `TemperatureFit` are the
deprecated names of earlier releases.
"""

from __future__ import annotations

import math
import numbers
import warnings

import keras
import numpy as np
from keras import ops

__all__ = [
    "AUTHORS_BOUNDS",
    "DEFAULT_PRIOR_SCALE",
    "ESTIMATORS",
    "EXTREME_TEMPERATURES",
    "SEARCH_BOUNDS",
    "TemperatureFitWarning",
    "TemperatureScaling",
    "estimate_temperature",
    "fit_temperature",
    "fit_temperatures",
]

from keras_ils import _labels
from keras_ils._checks import integer_at_least, invalid, positive
from keras_ils._outputs import log_probabilities_tensor
from keras_ils.calibration import _temperature_solver as solver
from keras_ils.calibration._float32 import float32_by_default, to_compute_dtype
from keras_ils.calibration.reports import CalibratorFit, CalibratorFitWarning


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
        log_probabilities = log_probabilities_tensor(inputs)
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


class TemperatureFitWarning(CalibratorFitWarning):
    """A temperature fit that did not find a well-determined optimum (see the report's `status`).

    A subclass of `CalibratorFitWarning`, which every calibrator issues: a
    filter on `CalibratorFitWarning` covers temperature scaling too, and one
    on `TemperatureFitWarning` (from earlier releases) still works.
    """


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


def _checked(outputs, labels, name="logits"):
    """`(outputs as float32 [n, K], labels as int [n])`: `_labels.outputs_and_labels`' checks, in float32.

    The fits compute on float32 logits, so a float32 array is used as it is
    (no float64 copy of 50,000 x 1,000 logits); finiteness is read off one
    float64 sum, and counted only when it fails.
    """
    outputs = _labels.as_numpy(outputs)
    if outputs.ndim != 2 or outputs.shape[1] < 2 or len(outputs) == 0:
        raise ValueError(f"Argument `{name}` must have shape [n >= 1, K >= 2]. Received shape: {outputs.shape}")
    outputs = outputs.astype(np.float32, copy=False)
    if not np.isfinite(outputs.sum(dtype=np.float64)):
        bad = int(np.sum(~np.isfinite(outputs)))
        raise ValueError(f"Argument `{name}` must be finite. Received {bad} NaN or infinite values.")
    labels = ops.convert_to_numpy(_labels.hard_labels(labels, outputs.shape[1], y_pred_rank=2))
    if len(labels) != len(outputs):
        raise ValueError(f"`{name}` and `labels` must have the same length. Received: {len(outputs)} and {len(labels)}")
    return outputs, labels


def _solve(data, estimator, prior_scale, bounds, searched, max_passes=solver.MAX_PASSES):
    """`(T* [M], the maximum-likelihood T within `searched` [M], the last search's Root, passes)`.

    `searched` holds `bounds`: the NLL is convex in `1 / T`, so its minimiser
    within `bounds` is the one within `searched` clipped to them.
    """
    models = data.array.shape[0]
    ends = np.full(models, -math.log(searched[1])), np.full(models, -math.log(searched[0]))  # u = log(1 / T)
    likelihood = solver.maximum_likelihood(data, *ends, max_passes=max_passes)
    likelihood_t = _temperatures(likelihood.u, ends, searched)
    if estimator != "map":
        return np.clip(likelihood_t, *bounds), likelihood_t, likelihood, likelihood.passes
    weight = 1.0 / (data.count * prior_scale**2)
    limits = np.full(models, -math.log(bounds[1])), np.full(models, -math.log(bounds[0]))
    posterior = solver.maximum_a_posteriori(data, likelihood, ends, limits, weight, max_passes=max_passes)
    return _temperatures(posterior.u, limits, bounds), likelihood_t, posterior, likelihood.passes + posterior.passes


def _temperatures(u, ends, bounds):
    """`T = exp(-u)`, and exactly `bounds[1]` / `bounds[0]` where `u` is an end of the search (`ends`)."""
    return np.where(u == ends[0], bounds[1], np.where(u == ends[1], bounds[0], np.exp(-u)))


def _fit_temperatures(logits, labels, estimator="map", prior_scale=DEFAULT_PRIOR_SCALE, bounds=None,
                      max_passes=solver.MAX_PASSES) -> np.ndarray:  # fmt: skip
    """Temperature scaling's `T*` for many models at once: `[M, n, K]` logits, `[M, n]` labels -> `[M]`.

    Every estimator of `fit_calibrator("temperature", ...)`, vectorised over
    models (each pass covers them all); no warnings and no status.
    """
    low, high = _check_estimator(estimator, prior_scale, bounds)
    return _solve(_models_data(logits, labels), estimator, prior_scale, (low, high), (low, high), max_passes)[0]


def _models_data(logits, labels) -> solver.Logits:
    """The solver's data of `[M, n, K]` logits and `[M, n]` labels (or labels that broadcast to it), checked."""
    logits = _labels.as_numpy(logits)
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
    return solver.Logits(logits.astype(np.float32, copy=False), labels)


def _temperature_fits(logits, labels, estimator="map", prior_scale=DEFAULT_PRIOR_SCALE, bounds=None) -> list:
    """Temperature scaling's reports for many models at once: `[M, n, K]` logits, `[M, n]` labels -> `M` fits.

    Each is the `CalibratorFit` that `fit_calibrator("temperature", logits[m],
    labels[m], return_fit=True)` reports (its `warning` not issued), from one
    solve over all the models; `iterations` counts the passes they shared.
    """
    return _reports(_models_data(logits, labels), estimator, prior_scale, bounds)


def _reports(data, estimator, prior_scale, bounds) -> list:
    """`_temperature_fits` on the solver's data of checked logits and labels."""
    low, high = _check_estimator(estimator, prior_scale, bounds)
    searched = (min(low, SEARCH_BOUNDS[0]), max(high, SEARCH_BOUNDS[1]))
    temperatures, likelihoods, root, passes = _solve(data, estimator, prior_scale, (low, high), searched)
    nlls = solver.nll_at(data, root, -np.log(temperatures))
    n, fits = data.array.shape[1], []
    for temperature, likelihood, nll in zip(temperatures.tolist(), likelihoods.tolist(), nlls.tolist(), strict=True):
        likelihood = float(np.clip(likelihood, *SEARCH_BOUNDS))
        prior = math.log(temperature) ** 2 / (2 * n * prior_scale**2) if estimator == "map" else 0.0
        status, message = _diagnosis(temperature, likelihood, n, estimator, prior_scale, low, high)
        fits.append(CalibratorFit(
            "temperature", status, n, nll, nll + prior, passes, message,
            temperature=temperature, maximum_likelihood=likelihood, estimator=estimator,
        ))  # fmt: skip
    return fits


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


def _estimate(logits, labels, estimator, prior_scale, bounds) -> CalibratorFit:
    """Temperature scaling's fit on logits `[n, K]` (checked here): its report, without warning.

    The report's `temperature` is `T*`, `maximum_likelihood` the NLL's
    minimiser within `SEARCH_BOUNDS` (for the diagnosis), `iterations` the
    passes over the logits, `objective` the mean NLL plus, for `"map"`, the
    prior's `(log T)^2 / (2 n prior_scale^2)`.
    """
    return _fit(*_checked(logits, labels), estimator, prior_scale, bounds)


def _fit(logits, labels, estimator, prior_scale, bounds) -> CalibratorFit:
    """`_estimate` on `_checked` logits and labels."""
    return _reports(solver.Logits(logits[None], labels[None]), estimator, prior_scale, bounds)[0]


def _warn(fit: CalibratorFit) -> None:
    """The fit's `TemperatureFitWarning`, if it has one, pointing at the caller of the public function."""
    if fit.warning:
        warnings.warn(fit.warning, TemperatureFitWarning, stacklevel=3)


def _deprecated(name: str, replacement: str) -> None:
    """The `DeprecationWarning` of an old name, issued once its call has passed the checks (bad input raises as
    before, even where warnings are errors)."""
    warnings.warn(
        f"`keras_ils.{name}` is deprecated and will be removed in the next release. Use {replacement}.",
        DeprecationWarning,
        stacklevel=3,
    )


_REPORT = '`keras_ils.fit_calibrator("temperature", logits, labels, return_fit=True)`, whose report has'


def fit_temperature(logits, labels, *, estimator: str = "map", prior_scale: float = DEFAULT_PRIOR_SCALE,
                    bounds: tuple | None = None) -> float:  # fmt: skip
    """Deprecated: `fit_calibrator("temperature", logits, labels, return_fit=True)[1].temperature` is `T*`.

    Returns temperature scaling's `T*` as a Python float and issues the
    fit's `TemperatureFitWarning`, as `fit_calibrator` does (see it for the
    estimators and options).
    """
    fit = _estimate(logits, labels, estimator, prior_scale, bounds)
    _deprecated("fit_temperature", f"{_REPORT} `.temperature` (T*; the layer holds it too)")
    _warn(fit)
    return fit.temperature


def estimate_temperature(logits, labels, *, estimator: str = "map", prior_scale: float = DEFAULT_PRIOR_SCALE,
                         bounds: tuple | None = None) -> CalibratorFit:  # fmt: skip
    """Deprecated: `fit_calibrator("temperature", logits, labels, return_fit=True)` returns this report.

    Returns the fit's `CalibratorFit` (`temperature`, `status`,
    `num_examples`, `maximum_likelihood`, ...) and issues its
    `TemperatureFitWarning`.
    """
    fit = _estimate(logits, labels, estimator, prior_scale, bounds)
    _deprecated("estimate_temperature", f"{_REPORT} `.temperature`, `.status` and `.maximum_likelihood`")
    _warn(fit)
    return fit


def fit_temperatures(logits, labels, *, estimator: str = "map", prior_scale: float = DEFAULT_PRIOR_SCALE,
                     bounds: tuple | None = None, iterations: int = solver.MAX_PASSES) -> np.ndarray:  # fmt: skip
    """Deprecated: fit each model with `fit_calibrator("temperature", logits[m], labels[m])`.

    Temperature scaling's `T*` of many models at once: `[M, n, K]` logits
    and `[M, n]` labels -> `[M]`, without warnings or status; `iterations`
    caps the passes over the logits of each search.
    """
    integer_at_least("iterations", iterations, 1)
    temperatures = _fit_temperatures(logits, labels, estimator, prior_scale, bounds, max_passes=iterations)
    _deprecated("fit_temperatures", 'one `keras_ils.fit_calibrator("temperature", logits[m], labels[m])` per model')
    return temperatures


def _report_alias():
    """`CalibratorFit`, the deprecated `TemperatureFit`, with its warning pointing at the module attribute's reader."""
    warnings.warn(
        "`TemperatureFit` is deprecated and will be removed in the next release: temperature scaling reports a "
        "`keras_ils.calibration.CalibratorFit`, as every calibrator does (with `temperature`, `maximum_likelihood` "
        "and `estimator`).",
        DeprecationWarning,
        stacklevel=3,
    )
    return CalibratorFit


def __getattr__(name):
    if name == "TemperatureFit":
        return _report_alias()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
