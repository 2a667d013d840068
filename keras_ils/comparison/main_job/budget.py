"""What a KerasTuner search costs before it runs: its grid, Hyperband's models and epochs, the planned fits."""

from __future__ import annotations

import math

import numpy as np

from keras_ils import methods
from keras_ils.comparison.engine import students

__all__ = ["HYPERBAND_FACTOR", "fixed_space", "grid_size", "hyperband_epochs", "planned_fits", "search_cost"]

HYPERBAND_FACTOR = 3


def fixed_space(method: str, search_space, fixed: dict) -> dict:
    """`{hyperparameter: values}` that `method` tries: its grid's, one value where `fixed` has it; `{}` when it
    tunes nothing (the values it borrows come from their lender's choice).

    Example:

    >>> fixed_space("ils2", "paper", {"epsilon": 0.1})
    {'epsilon': (0.1,), 'temperature': (1.0, 2.0, 4.0, 8.0, 16.0)}
    """
    if not methods.get(method).tunable:
        return {}
    space = students.method_space(method, search_space)
    return {name: (fixed[name],) if name in fixed else values for name, values in space.items()}


def grid_size(space: dict) -> int:
    """The number of points of a grid `{hyperparameter: values}` (1 for `{}`)."""
    return int(np.prod([len(values) for values in space.values()])) if space else 1


def hyperband_epochs(max_epochs: int, factor: int = HYPERBAND_FACTOR) -> tuple[int, int]:
    """`(models, epochs)` at most that one iteration of KerasTuner's Hyperband trains for `max_epochs`.

    KerasTuner's `HyperbandOracle` runs brackets `b = B-1, ..., 0` (`B` the
    number of times `max_epochs` divides by `factor` down to 1), each with
    rounds `r = 0..b` of `ceil(ceil(1 + log_factor(max_epochs)) / (b + 1) * factor^(b - r))`
    models trained to `ceil(max_epochs / factor^(b - r))` epochs; a model
    carried into the next round resumes from its checkpoint, so a round costs
    only its extra epochs. Early stopping makes the real cost lower.

    Example:

    >>> hyperband_epochs(9)   # brackets of 9 models (1, 3, 9 epochs), 5 (3, 9) and 3 (9): 21 + 27 + 27 epochs
    (17, 75)
    """
    models_total = epochs_total = 0
    for round_, size, extra_epochs in _hyperband_rounds(max_epochs, factor):
        models_total += size if round_ == 0 else 0
        epochs_total += size * extra_epochs
    return models_total, epochs_total


def _hyperband_rounds(max_epochs, factor=HYPERBAND_FACTOR):
    """`(round, trials, extra epochs per trial)` of every round of every bracket of one Hyperband iteration."""
    brackets, epochs = 0, float(max_epochs)
    while epochs >= 1:
        epochs, brackets = epochs / factor, brackets + 1
    end_size = math.ceil(1 + math.log(max_epochs, factor))
    for bracket in range(brackets):
        done = 0
        for round_ in range(bracket + 1):
            size = math.ceil(end_size / (bracket + 1) * factor ** (bracket - round_))
            target = math.ceil(max_epochs / factor ** (bracket - round_))
            yield round_, size, target - done
            done = target


def planned_fits(space, algorithm, max_epochs, max_trials=None) -> int:
    """How many `fit`s (KerasTuner trials) a search of `space` plans: the progress bar's share of it."""
    if grid_size(space) <= 1:
        return 1
    if algorithm == "hyperband":
        return sum(size for _, size, _ in _hyperband_rounds(max_epochs))
    return min(max_trials or grid_size(space), grid_size(space))


def search_cost(method, space, algorithm, max_epochs) -> str:
    """The line `run` logs before a KerasTuner search: what it will train at most, in the trials the progress
    counts (`planned_fits`).

    Example:

    >>> space = {"epsilon": (0.01, 0.05, 0.1, 0.15, 0.2)}
    >>> search_cost("ls", space, "hyperband", 20)[:63], planned_fits(space, "hyperband", 20)
    ('LS: Hyperband over 5 candidates, at most 22 models in 30 trials', 30)
    """
    candidates, name = grid_size(space), methods.get(method).name
    if algorithm == "grid":
        return (
            f"{name}: the full grid, {candidates} models of up to {max_epochs} epochs "
            f"(at most {candidates * max_epochs} epochs)"
        )
    models_total, epochs_total = hyperband_epochs(max_epochs)
    trials = planned_fits(space, algorithm, max_epochs)
    return (
        f"{name}: Hyperband over {candidates} candidates, at most {models_total} models in {trials} trials (a model "
        f"promoted to a longer round trains on as a new trial) and {epochs_total} epochs (= "
        f"{epochs_total / max_epochs:.1f} full trainings; --search full: {candidates})"
    )
