"""The one table of post-hoc calibration methods, and `fit_calibrator`, which fits any of them on arrays.

| `method`                 | layer                        | fit                                 | options          |
|--------------------------|------------------------------|-------------------------------------|------------------|
| `"temperature"`          | `TemperatureScaling`         | Newton on log T (1-D, MAP)          | temperature fit  |
| `"vector"`               | `VectorScaling`              | `affine_fit` (L-BFGS, Newton)       | L-BFGS           |
| `"matrix"`               | `MatrixScaling`              | L-BFGS with ODIR                    | ODIR, L-BFGS     |
| `"dirichlet"`            | `DirichletCalibration`       | L-BFGS with ODIR                    | ODIR, L-BFGS     |
| `"histogram"`            | `HistogramBinning`           | equal-mass bins' class frequencies  | `num_bins`       |
| `"isotonic"`             | `IsotonicCalibration`        | pool adjacent violators, per class  | -                |
| `"ensemble_temperature"` | `EnsembleTemperatureScaling` | temperature, then simplex weights   | temperature fit  |
| `"venn_abers"`           | `VennAbersCalibration`       | inductive Venn-Abers, top label     | -                |

(temperature fit: `estimator`, `prior_scale`, `bounds`; L-BFGS: `max_iterations`,
`tolerance`, `prior_precision` (the affine maps' prior, `small_data`); ODIR:
`off_diagonal_l2`, `intercept_l2`.) `METHODS` lists them
and `LAYERS` maps each to its layer class; `calibrate`, `fit_calibrator` and
the main job's `--calibrators` read this table.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal, NamedTuple

import keras
import numpy as np

from keras_ils import _labels, _outputs
from keras_ils._checks import invalid, odir_refused
from keras_ils.calibration import affine_fit, ensemble, histogram, isotonic, maps, temperature, venn_abers
from keras_ils.calibration.reports import CalibratorFitWarning, message
from keras_ils.calibration.temperature import DEFAULT_PRIOR_SCALE, TemperatureFitWarning, TemperatureScaling

__all__ = ["LAYERS", "METHODS", "Method", "fit_calibrator"]

Method = Literal[
    "temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "ensemble_temperature", "venn_abers"
]


def _fit_temperature(
    outputs, labels, *, from_logits=True, estimator="map", prior_scale=DEFAULT_PRIOR_SCALE, bounds=None
):
    """`(TemperatureScaling(T*), CalibratorFit)`; probabilities are read as `log p`, unclipped
    (`_outputs.log_probabilities`): a softmax model gets its logit twin's `T*`."""
    if not from_logits:
        outputs = _outputs.log_probabilities(_labels.as_numpy(outputs))
    logits, labels = temperature._checked(outputs, labels, name="outputs")
    fit = temperature._fit(logits, labels, estimator, prior_scale, bounds)
    layer = TemperatureScaling(fit.temperature, from_logits=from_logits, trainable=False, name="temperature_scaling")
    layer.build((None, logits.shape[-1]))
    return layer, fit


class _Entry(NamedTuple):
    layer: type
    fit: Any  # fit(outputs, labels, *, from_logits, **options) -> (layer, report)
    options: tuple
    warning: type


_TEMPERATURE_OPTIONS = ("estimator", "prior_scale", "bounds")
_LBFGS_OPTIONS = ("max_iterations", "tolerance", "prior_precision")
_ODIR_OPTIONS = ("off_diagonal_l2", "intercept_l2")


def _affine(method):
    return lambda outputs, labels, **options: affine_fit.fit_affine(method, outputs, labels, **options)


_CALIBRATORS = {
    "temperature": _Entry(TemperatureScaling, _fit_temperature, _TEMPERATURE_OPTIONS, TemperatureFitWarning),
    "vector": _Entry(maps.VectorScaling, _affine("vector"), _LBFGS_OPTIONS, CalibratorFitWarning),
    "matrix": _Entry(maps.MatrixScaling, _affine("matrix"), _ODIR_OPTIONS + _LBFGS_OPTIONS, CalibratorFitWarning),
    "dirichlet": _Entry(
        maps.DirichletCalibration, _affine("dirichlet"), _ODIR_OPTIONS + _LBFGS_OPTIONS, CalibratorFitWarning
    ),
    "histogram": _Entry(histogram.HistogramBinning, histogram.fit_histogram, ("num_bins",), CalibratorFitWarning),
    "isotonic": _Entry(isotonic.IsotonicCalibration, isotonic.fit_isotonic, (), CalibratorFitWarning),
    "ensemble_temperature": _Entry(
        ensemble.EnsembleTemperatureScaling,
        ensemble.fit_ensemble_temperature,
        _TEMPERATURE_OPTIONS,
        CalibratorFitWarning,
    ),
    "venn_abers": _Entry(venn_abers.VennAbersCalibration, venn_abers.fit_venn_abers, (), CalibratorFitWarning),
}

METHODS = tuple(_CALIBRATORS)
LAYERS = {method: entry.layer for method, entry in _CALIBRATORS.items()}  # each method's layer class


def check_method_and_options(method, options: dict) -> None:
    """Refuses an unknown `method`, and options that `method` does not take, before any work."""
    if method not in _CALIBRATORS:
        raise invalid("method", f"one of {METHODS}", method)
    allowed = _CALIBRATORS[method].options
    for name in options:
        if name in allowed:
            continue
        if name in _ODIR_OPTIONS:
            raise odir_refused(method)
        takers = [m for m, entry in _CALIBRATORS.items() if name in entry.options]
        if not takers:
            raise TypeError(f"Unknown calibration option `{name}`. Options of method={method!r}: {allowed or 'none'}")
        raise ValueError(
            f"Argument `{name}` is an option of method={' or '.join(map(repr, takers))}, not of method={method!r} "
            f"(whose options are {allowed or 'none'})."
        )


def fit(method, outputs, labels, *, from_logits: bool = True, **options):
    """`(layer, report, warning class)` of a checked fit, without warning: for callers that warn in their own name.

    The door of every calibrator: `outputs` must be of the kind `from_logits`
    declares (`keras_ils._outputs.check_outputs_kind`), and a class absent
    from the validation labels adds a clause to the report's warning.
    """
    check_method_and_options(method, options)
    if from_logits not in (True, False):
        raise TypeError(f"Argument `from_logits` must be True or False. Received: from_logits={from_logits!r}")
    outputs = _labels.as_numpy(outputs)
    _outputs.check_outputs_kind(outputs, bool(from_logits), name="outputs")
    entry = _CALIBRATORS[method]
    layer, report = entry.fit(outputs, labels, from_logits=bool(from_logits), **options)
    absent = _absent_classes(labels, outputs.shape[-1], len(outputs))
    if absent:
        report = report._replace(warning=" ".join(filter(None, [report.warning, message(method, [absent])])))
    return layer, report, entry.warning


def _absent_classes(labels, num_classes: int, num_examples: int) -> str | None:
    """The warning clause for classes without a validation example (the fit has checked `labels`), else `None`."""
    labels = keras.ops.convert_to_numpy(_labels.hard_labels(labels, num_classes, y_pred_rank=2))
    absent = np.flatnonzero(np.bincount(labels, minlength=num_classes) == 0)
    if not len(absent):
        return None
    listed = ", ".join(map(str, absent[:10])) + (", ..." if len(absent) > 10 else "")
    one = len(absent) == 1
    return (
        f"{'class' if one else f'{len(absent)} classes,'} {listed} (of {num_classes}) {'has' if one else 'have'} no "
        f"example among the {num_examples} validation examples, so the map was fitted without "
        f"{'it' if one else 'them'} and {'its' if one else 'their'} calibrated probabilities rest on no data; "
        "calibrate on a validation set that holds every class"
    )


def fit_calibrator(
    method: Method,
    outputs,
    labels,
    *,
    from_logits: bool = True,
    return_fit: bool = False,
    **options,
):
    """Fits a calibration map on validation outputs and returns it as a fixed layer.

    The one way to fit a calibrator on arrays (`calibrate` does it on a
    model). Every method reports a `CalibratorFit` (`return_fit=True`) and
    issues a `CalibratorFitWarning` (temperature scaling its subclass
    `TemperatureFitWarning`) when the fit did not converge, the map is
    extreme, the fit rests on too few examples, or a class has no
    validation example; the report's `status` and `warning` say which.

    Checked at the door: `outputs` must be of the kind `from_logits`
    declares (rows in `[0, 1]` that sum to 1 declared as logits, or values
    outside `[0, 1]` declared as probabilities, get a `ValueError` that says
    which argument to change), finite, `[n >= 1, K >= 2]`, with labels in
    `[0, K)`. A class that no validation label holds is named in the warning
    of every method: the map is fitted without it, so its calibrated
    probabilities rest on no data (what each map does for such a class is
    the map's own: temperature scaling treats every class alike).

    Temperature scaling (`"temperature"`, and the `T` of
    `"ensemble_temperature"`) has three estimators:

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
      `1 / T`, so that is the bounded optimum).

    The fit is a safeguarded Newton method on `log T` whose every step is
    one pass over the logits, in `keras.ops` (on the Keras backend's device,
    the GPU when it has one), float32 data with float64 sums over
    examples; it finds the optimum to about 1e-7 relative. Whenever `T*`
    is not an interior optimum that the data pin down (status
    `"regularised"` or `"at_bound"`), or lies outside
    `EXTREME_TEMPERATURES`, the warning says why and what was done.

    The affine maps (`"vector"`, `"matrix"`, `"dirichlet"`) are fitted by
    the rule of `keras_ils.calibration.small_data`: the maximum a posteriori
    map under a Gaussian prior centred on temperature scaling's map, its
    precision chosen on validation folds (5 folds; one held-out fold of 5
    from 10,000 examples; matrix and Dirichlet then choose the off-diagonal
    entries' own precision in a second stage, as ODIR has two weights; the
    folds share a time budget, `small_data.CROSS_VALIDATION_SECONDS`)
    (status `"regularised"`, or `"temperature"` when temperature scaling's
    map is best within one standard error, or when the chosen map
    classifies every validation example correctly, which no held-out
    example can then bound). A trained network's validation logits are
    often nearly separable, and a plain fit on them overfits at any size.
    ODIR's weights or `prior_precision=0` give the plain fit. The
    one-vs-rest methods choose their bins from the data and keep every
    probability off 0; Venn-Abers (`"venn_abers"`) merges two isotonic fits
    of the top label's probability, strictly inside (0, 1), and shares the
    rest among the other classes in the model's proportions. A fit that
    rests on too few examples warns.

    Args:
        method: one of `METHODS`; see the module's table.
        outputs: `[n, K]` validation logits (probabilities with
            `from_logits=False`).
        labels: sparse labels `[n]`, one-hot/soft `[n, K]` or teacher targets.
        from_logits: whether `outputs` are logits; the layer takes and
            returns the same kind (the binning and ensemble layers return
            log-probabilities for logits). Defaults to `True`.
        return_fit: also return the report, a `CalibratorFit` (for
            `"temperature"` with `temperature`, `maximum_likelihood` and
            `estimator`). Defaults to `False`.
        **options: the method's own options (a method refuses the others):
            `estimator` (`"map"`, `"mle"` or `"authors"`), `prior_scale`
            (the prior's standard deviation on `log T`, `> 0`, default
            `0.5`: `T` within `[0.37, 2.7]` at two standard deviations a
            priori; Guo et al. report fitted `T` of about 1-3), `bounds`
            (`(low, high)` searched, default `SEARCH_BOUNDS`, or
            `AUTHORS_BOUNDS` for `"authors"`) of the temperature fit
            (`"temperature"`, `"ensemble_temperature"`);
            `off_diagonal_l2`, `intercept_l2` (ODIR's weights, `>= 0`,
            `"matrix"` and `"dirichlet"`; default `0.01`);
            `max_iterations` (`>= 1`, default `1000`) and `tolerance`
            (the largest gradient entry at convergence, `> 0`, default
            `1e-8`) of the L-BFGS fits; `prior_precision` (`None`, the
            default: chosen by cross-validation; a float `>= 0`, `0` for
            the plain fit; `math.inf` for temperature scaling's map;
            `"vector"`, `"matrix"`, `"dirichlet"`); `num_bins` (`>= 1`, default `15`;
            on small sets as many as hold 3 examples each; `"histogram"`).

    Returns:
        The fitted layer, built and with `trainable=False`; `(layer, report)`
        with `return_fit=True`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, 20000)
    >>> calibrated_logits = 2.0 * (rng.normal(size=(20000, 3)) + 2.0 * np.eye(3)[labels])
    >>> layer, fit = fit_calibrator("temperature", 3.0 * calibrated_logits, labels, return_fit=True)
    >>> round(fit.temperature, 1), fit.status   # 3x over-confident
    (3.0, 'fitted')
    >>> _, fit = fit_calibrator("temperature", 3.0 * calibrated_logits[:40], labels[:40], return_fit=True)
    >>> round(fit.maximum_likelihood, 2), round(fit.temperature, 2)   # 40 examples: MAP pulled towards 1
    (2.82, 2.19)
    >>> fit_calibrator("temperature", calibrated_logits, labels, from_logits=False)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `outputs`: it was declared as probabilities (`from_logits=False`), ...
    >>> logits = rng.normal(size=(20000, 3)) * 2.0   # calibrated: labels are drawn from their softmax
    >>> p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    >>> labels = (rng.random((20000, 1)) < p.cumsum(axis=1)).argmax(axis=1)
    >>> miscalibrated = logits * np.array([3.0, 1.0, 0.5])   # each class its own way
    >>> layer, fit = fit_calibrator("vector", miscalibrated, labels, return_fit=True)
    >>> np.round(keras.ops.convert_to_numpy(layer.scale), 1), fit.status   # shrunk a little toward one temperature
    (array([0.3, 1. , 1.9], dtype=float32), 'regularised')
    >>> plain = fit_calibrator("vector", miscalibrated, labels, prior_precision=0)   # the maximum-likelihood map
    >>> np.round(keras.ops.convert_to_numpy(plain.scale), 1)
    array([0.3, 1. , 2. ], dtype=float32)
    >>> calibrated_logits = layer(logits)   # apply it to test logits
    >>> type(fit_calibrator("isotonic", 3.0 * logits, labels)).__name__
    'IsotonicCalibration'
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:   # 30 examples: the small-data rule
    ...     warnings.simplefilter("always")
    ...     _, fit = fit_calibrator("dirichlet", logits[:30], labels[:30], return_fit=True)
    >>> fit.status, fit.prior_precision, caught[0].category.__name__   # temperature scaling's map was chosen
    ('temperature', inf, 'CalibratorFitWarning')

    References:
        Guo et al. (2017); Kull et al. (2019); Zadrozny & Elkan (2001, 2002);
        Zhang et al. (2020).
    """
    layer, report, category = fit(method, outputs, labels, from_logits=from_logits, **options)
    if report.warning:
        warnings.warn(report.warning, category, stacklevel=2)
    return (layer, report) if return_fit else layer
