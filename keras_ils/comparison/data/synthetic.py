"""The paper's synthetic task: 3 classes, each a mixture of a dense and a sparse Gaussian.

Class `c` has density `0.8 * N(x; dense_c, I) + 0.2 * N(x; sparse_c, I)` in
two dimensions, with equal class priors (paper §3, Fig. 1):

| class | dense (80 %) mean | sparse (20 %) mean |
|-------|-------------------|--------------------|
| 0     | (-4,  1)          | (2,  1)            |
| 1     | (-4, -1)          | (2, -1)            |
| 2     | (-1,  0)          | (5,  0)            |

The paper numbers the classes 1-3; here they are 0-2.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from keras_ils._checks import integer_at_least
from keras_ils.calibration import fit_calibrator

NUM_CLASSES = 3
DENSE_WEIGHT = 0.8
# [class, (dense, sparse), feature]
COMPONENT_MEANS = np.array([[[-4.0, 1.0], [2.0, 1.0]], [[-4.0, -1.0], [2.0, -1.0]], [[-1.0, 0.0], [5.0, 0.0]]])


class SyntheticData(NamedTuple):
    """Features `x [n, 2]` float32, labels `y [n]` int32, and `dense [n]` bool (drawn from the dense part)."""

    x: np.ndarray
    y: np.ndarray
    dense: np.ndarray


def make_dataset(n_per_class: int, seed: int | None = None) -> SyntheticData:
    """Samples `n_per_class` points of each class, shuffled.

    Each point comes from its class's dense Gaussian with probability 0.8,
    else from the sparse one.

    Args:
        n_per_class: points per class, `>= 1`.
        seed: seed of `numpy.random.default_rng`. Defaults to `None`.

    Returns:
        `SyntheticData(x, y, dense)`.

    Example:

    >>> x, y, dense = make_dataset(50, seed=0)
    >>> x.shape, np.bincount(y).tolist(), x.dtype.name
    ((150, 2), [50, 50, 50], 'float32')
    """
    integer_at_least("n_per_class", n_per_class, 1)
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(NUM_CLASSES), n_per_class)
    dense = rng.random(len(y)) < DENSE_WEIGHT
    means = COMPONENT_MEANS[y, np.where(dense, 0, 1)]
    x = means + rng.standard_normal(means.shape)
    order = rng.permutation(len(y))
    return SyntheticData(x[order].astype("float32"), y[order].astype("int32"), dense[order])


def bayes_logits(x) -> np.ndarray:
    """Log-posteriors `log P(class | x)` of the true generative model: the Bayes-optimal logits.

    Example:

    >>> np.round(np.exp(bayes_logits(np.array([[5.0, 0.0]]))), 3)
    array([[0.007, 0.007, 0.987]])
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"Argument `x` must have shape [n, 2]. Received shape: {x.shape}")
    squared = ((x[:, None, None, :] - COMPONENT_MEANS[None]) ** 2).sum(-1)  # [n, class, component]
    log_weights = np.log([DENSE_WEIGHT, 1.0 - DENSE_WEIGHT])
    log_density = np.logaddexp(*np.moveaxis(log_weights - 0.5 * squared, -1, 0))
    return log_density - np.logaddexp.reduce(log_density, axis=1, keepdims=True)


def bayes_probabilities(x) -> np.ndarray:
    """`P(class | x)` of the true generative model, `[n, 3]`, rows summing to 1.

    Example:

    >>> p = bayes_probabilities(np.zeros((1, 2)))
    >>> np.round(p, 3), round(float(p.sum()), 6)
    (array([[0.032, 0.032, 0.936]]), 1.0)
    """
    return np.exp(bayes_logits(x))


def bayes_temperature(x, y, *, estimator: str = "map") -> float:
    """The `T*` that temperature scaling fits to the Bayes-optimal logits on `(x, y)`: what the draw alone does.

    The Bayes-optimal model is calibrated on the population (its best `T`
    is 1), so a `T*` away from 1 on a sample is the sample's doing, not a
    network's. On a validation set of 50 per class (the paper's, `150`
    examples) this `T*` varies from draw to draw: 5-95 % of draws give
    `[0.83, 1.22]` (300 draws, `estimator="map"`). A draw with `T* < 1` is
    easier than the population, and a network's `T*` fitted on it sharpens
    predictions that the test set would leave as they are.

    Args:
        x: `[n, 2]` features.
        y: `[n]` labels in `{0, 1, 2}`.
        estimator: temperature scaling's estimator (`"map"`, `"mle"`,
            `"authors"`: `keras_ils.calibration.fit_calibrator`'s). Defaults to `"map"`.

    Returns:
        `T*` as a float.

    Example:

    >>> draw = make_dataset(50, seed=10_000)   # the validation set of `keras-ils run --seed 0`
    >>> round(bayes_temperature(draw.x, draw.y), 3)
    0.811
    >>> round(bayes_temperature(*make_dataset(20_000, seed=0)[:2]), 2)
    1.0
    """
    fit = fit_calibrator("temperature", bayes_logits(x), y, estimator=estimator, return_fit=True)[1]
    return float(fit.temperature)


__all__ = [
    "COMPONENT_MEANS",
    "DENSE_WEIGHT",
    "NUM_CLASSES",
    "SyntheticData",
    "bayes_logits",
    "bayes_probabilities",
    "bayes_temperature",
    "make_dataset",
]
