"""What a calibrator fit reports: `CalibratorFit`, `CalibratorFitWarning`, and the small-data diagnosis they share."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["MIN_EXAMPLES_PER_CLASS", "CalibratorFit", "CalibratorFitWarning", "few_examples", "mean_nll", "message"]

MIN_EXAMPLES_PER_CLASS = 10  # a fit whose smallest class has fewer fitting examples is reported as resting on too few


class CalibratorFitWarning(UserWarning):
    """A calibrator fit that did not converge, whose map is extreme, or that rests on too few examples."""


class CalibratorFit(NamedTuple):
    """What `fit_calibrator` found, for reports.

    Attributes:
        method: the calibration method (`keras_ils.calibration.METHODS`).
        status: `"fitted"`; for the affine maps also `"separated"` (the map
            classifies every validation example correctly: their NLL has no
            optimum they pin down), `"extreme"` (a parameter beyond
            `EXTREME_PARAMETER` in size: the map overfits a validation set it
            nearly separates) or `"not_converged"`; for `"histogram"`,
            `"isotonic"` and `"ensemble_temperature"` also `"few_examples"`
            (some class has fewer than `MIN_EXAMPLES_PER_CLASS` fitting
            examples, or the bins were fewer than asked for).
        num_examples: validation examples the fit saw.
        nll: the calibrated validation mean NLL.
        objective: what the fit minimised, at its optimum: `nll` plus the
            ODIR terms for the affine maps, the weights' mean squared error
            for `"ensemble_temperature"`, `nll` for the binning methods (which
            minimise nothing).
        iterations: solver iterations (L-BFGS; `0` for the closed forms).
        warning: the warning issued, or `None`.
    """

    method: str
    status: str
    num_examples: int
    nll: float
    objective: float
    iterations: int
    warning: str | None


def few_examples(labels, num_classes: int) -> str | None:
    """The clause for a fit whose smallest class has fewer than `MIN_EXAMPLES_PER_CLASS` examples, else `None`."""
    counts = np.bincount(labels, minlength=num_classes)
    if counts.min() >= MIN_EXAMPLES_PER_CLASS:
        return None
    rare = np.flatnonzero(counts < MIN_EXAMPLES_PER_CLASS)
    listed = ", ".join(f"class {j}: {counts[j]}" for j in rare[:5]) + (", ..." if len(rare) > 5 else "")
    return (
        f"it rests on too few examples: {len(labels)} validation examples, and {len(rare)} of {num_classes} "
        f"classes have fewer than {MIN_EXAMPLES_PER_CLASS} ({listed}); its probabilities are kept off 0, but "
        "they are rough (temperature scaling needs less data)"
    )


def message(method: str, clauses) -> str | None:
    """One warning text of a fit's clauses (`None` entries skipped), or `None` when there is none."""
    clauses = [clause for clause in clauses if clause]
    return f"Calibrator fit ({method}): {'; '.join(clauses)}." if clauses else None


def mean_nll(probabilities, labels) -> float:
    """Mean `-log p[label]` of float64 probabilities (floored at the smallest positive float64, never infinite)."""
    chosen = probabilities[np.arange(len(labels)), labels]
    return float(-np.mean(np.log(np.maximum(chosen, np.finfo(np.float64).tiny))))
