"""What a calibrator fit reports: `CalibratorFit`, `CalibratorFitWarning`, and the small-data diagnosis they share."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils.calibration import small_data

__all__ = [
    "MIN_EXAMPLES_PER_CLASS",
    "CalibratorFit",
    "CalibratorFitWarning",
    "few_examples",
    "mean_nll",
    "message",
    "rare_classes",
    "small_set_clause",
]

# a fit whose smallest class has fewer fitting examples rests on too few: 10 per parameter (the rule of
# keras_ils.calibration.small_data) for the simplest one-vs-rest map of a class, two levels
MIN_EXAMPLES_PER_CLASS = 20


class CalibratorFitWarning(UserWarning):
    """A calibrator fit that did not converge, whose map is extreme, or that rests on too few examples.

    Every calibrator issues it (temperature scaling its subclass
    `TemperatureFitWarning`), and so does every fit whose validation set
    lacks a class (`fit_calibrator`).
    """


class CalibratorFit(NamedTuple):
    """What `fit_calibrator` found, for reports: one type for every method.

    Attributes:
        method: the calibration method (`keras_ils.calibration.METHODS`).
        status: `"fitted"`; for `"temperature"` also `"regularised"` (the
            prior of the MAP fit moved the estimate: the validation NLL has
            no interior optimum, or too few examples pin `T` down) and
            `"at_bound"` (`T*` is an end of the searched range); for the
            affine maps also `"separated"` (the map
            classifies every validation example correctly: their NLL has no
            optimum they pin down), `"extreme"` (a parameter beyond
            `EXTREME_PARAMETER` in size: the map overfits a validation set it
            nearly separates) or `"not_converged"`; for `"histogram"`,
            `"isotonic"`, `"ensemble_temperature"` and `"venn_abers"` also
            `"few_examples"` (some class has fewer than
            `MIN_EXAMPLES_PER_CLASS` fitting examples, or histogram binning
            has fewer than `num_bins` per bin or a class that fills fewer
            than two bins: the small-data fit of
            `keras_ils.calibration.one_vs_rest`; Venn-Abers only warns);
            the affine maps fitted by their default rule
            (`keras_ils.calibration.small_data`) are `"regularised"` (the
            prior's precision chosen by cross-validation) or `"temperature"`
            (temperature scaling's map chosen), and plain fits (ODIR's
            weights or `prior_precision=0` given) on fewer than 10 examples
            per parameter `"few_examples"`.
        num_examples: validation examples the fit saw.
        nll: the calibrated validation mean NLL.
        objective: what the fit minimised, at its optimum: `nll` plus the
            prior's `(log T)^2 / (2 n prior_scale^2)` for `"temperature"`
            (`nll` alone for its `"mle"` and `"authors"` estimators), plus the
            ODIR terms for the affine maps, the weights' mean squared error
            for `"ensemble_temperature"`, `nll` for the binning methods (which
            minimise nothing).
        iterations: solver iterations (L-BFGS, or Newton's method for the
            small-data rule; for `"temperature"` the passes over the logits
            of its Newton steps; `0` for the closed forms).
        warning: the warning issued, or `None`.
        prior_precision: for an affine map fitted under the prior, the
            precision of its prior, chosen by cross-validation or given
            (`math.inf`: temperature scaling's map); else `None`.
        temperature: `T*` for `"temperature"` and `"ensemble_temperature"`;
            else `None`.
        maximum_likelihood: for `"temperature"`, the unregularised optimum
            within `SEARCH_BOUNDS` (an end of that range when the NLL has no
            interior optimum); else `None`.
        estimator: the temperature fit's estimator (`"map"`, `"mle"` or
            `"authors"`) for `"temperature"` and `"ensemble_temperature"`;
            else `None`.
    """

    method: str
    status: str
    num_examples: int
    nll: float
    objective: float
    iterations: int
    warning: str | None
    prior_precision: float | None = None
    temperature: float | None = None
    maximum_likelihood: float | None = None
    estimator: str | None = None


def rare_classes(labels, num_classes: int) -> str | None:
    """`"3 of 6 classes have fewer than 20 examples (class 0: 5, ...)"`, or `None` when no class does."""
    counts = np.bincount(labels, minlength=num_classes)
    if counts.min() >= MIN_EXAMPLES_PER_CLASS:
        return None
    rare = np.flatnonzero(counts < MIN_EXAMPLES_PER_CLASS)
    listed = ", ".join(f"class {j}: {counts[j]}" for j in rare[:5]) + (", ..." if len(rare) > 5 else "")
    return f"{len(rare)} of {num_classes} classes have fewer than {MIN_EXAMPLES_PER_CLASS} examples ({listed})"


def few_examples(labels, num_classes: int) -> str | None:
    """The clause for a fit whose smallest class has fewer than `MIN_EXAMPLES_PER_CLASS` examples, else `None`."""
    rare = rare_classes(labels, num_classes)
    if rare is None:
        return None
    return f"it rests on too few examples: {len(labels)} validation examples, and {rare}"


def small_set_clause(reasons, floor: float, model_weight: float, prior_examples: float, num_examples: int) -> str:
    """What a one-vs-rest fit on `num_examples` does on a small set (`keras_ils.calibration.one_vs_rest`), and why."""
    if num_examples >= small_data.MIN_CROSS_VALIDATED:
        chosen = "chosen by cross-validation"
    else:
        chosen = "the strongest: too few examples to cross-validate"
    return (
        f"it rests on too few examples ({'; '.join(r for r in reasons if r)}), so its maps are mixed with the "
        f"model's own probabilities (weight m K / (n + m K) = {model_weight:.3g}, a prior worth m = "
        f"{prior_examples:g} examples per class, {chosen}) and floored at 1 / (n K) = "
        f"{floor:.3g}, which keeps them off 0, but they are rough (temperature scaling needs less data)"
    )


def message(method: str, clauses) -> str | None:
    """One warning text of a fit's clauses (`None` entries skipped), or `None` when there is none."""
    clauses = [clause for clause in clauses if clause]
    return f"Calibrator fit ({method}): {'; '.join(clauses)}." if clauses else None


def mean_nll(probabilities, labels) -> float:
    """Mean `-log p[label]` of float64 probabilities (floored at the smallest positive float64, never infinite)."""
    chosen = probabilities[np.arange(len(labels)), labels]
    return float(-np.mean(np.log(np.maximum(chosen, np.finfo(np.float64).tiny))))
