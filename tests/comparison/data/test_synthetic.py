import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax
from scipy.stats import multivariate_normal

from keras_ils.comparison.data import synthetic

import reference

MEANS = {0: [(-4, 1), (2, 1)], 1: [(-4, -1), (2, -1)], 2: [(-1, 0), (5, 0)]}  # paper §3, classes renumbered 0-2


def test_dataset_shape_balance_and_seed():
    x, y, dense = synthetic.make_dataset(50, seed=3)
    assert x.shape == (150, 2) and y.shape == (150,) and dense.shape == (150,)
    assert np.bincount(y).tolist() == [50, 50, 50]
    again = synthetic.make_dataset(50, seed=3)
    np.testing.assert_array_equal(x, again.x)
    assert not np.array_equal(x, synthetic.make_dataset(50, seed=4).x)


def test_components_have_the_papers_means_and_weights():
    x, y, dense = synthetic.make_dataset(20000, seed=0)
    assert dense.mean() == pytest.approx(0.8, abs=0.01)
    for c, (dense_mean, sparse_mean) in MEANS.items():
        np.testing.assert_allclose(x[(y == c) & dense].mean(0), dense_mean, atol=0.05)
        np.testing.assert_allclose(x[(y == c) & ~dense].mean(0), sparse_mean, atol=0.05)
        np.testing.assert_allclose(np.cov(x[(y == c) & dense].T), np.eye(2), atol=0.05)


def test_bayes_probabilities_match_scipy_densities(rng):
    x = rng.normal(scale=3.0, size=(200, 2))
    density = np.stack(
        [0.8 * multivariate_normal(d).pdf(x) + 0.2 * multivariate_normal(s).pdf(x) for d, s in MEANS.values()], 1
    )
    np.testing.assert_allclose(synthetic.bayes_probabilities(x), density / density.sum(1, keepdims=True), rtol=1e-9)


def test_bayes_optimal_model_reproduces_table_1():
    # Paper Table 1, Bayes-optimal row (mean of 100 replicates): acc 81.98 %, CE 0.4444, ECE 0.0067.
    acc, ce, ece = [], [], []
    for seed in range(4):
        x, y, _ = synthetic.make_dataset(5000, seed=seed)
        p = synthetic.bayes_probabilities(x)
        acc.append((p.argmax(1) == y).mean())
        ce.append(reference.nll(p, y))
        ece.append(reference.ece(p, y))
    assert np.mean(acc) == pytest.approx(0.8198, abs=0.006)
    assert np.mean(ce) == pytest.approx(0.4444, abs=0.012)
    assert np.mean(ece) == pytest.approx(0.0067, abs=0.003)


def _posterior(x):
    density = [0.8 * multivariate_normal(d).pdf(x) + 0.2 * multivariate_normal(s).pdf(x) for d, s in MEANS.values()]
    density = np.stack(density, 1)
    return density / density.sum(1, keepdims=True)


@pytest.mark.parametrize("estimator, prior_scale", [("map", 0.5), ("mle", None)])
def test_bayes_temperature_is_the_nll_minimiser_on_the_draw(estimator, prior_scale):
    # `keras-ils run --seed 0`'s validation draw (50 per class, seed 10_000): an easy draw, so T* < 1.
    x, y, _ = synthetic.make_dataset(50, seed=10_000)
    log_p = np.log(_posterior(x))

    def objective(u):  # mean NLL at T = exp(u), plus the MAP fit's prior (log T)^2 / (2 n scale^2)
        nll = -log_softmax(log_p / np.exp(u), axis=1)[np.arange(len(y)), y].mean()
        return nll + (u**2 / (2 * len(y) * prior_scale**2) if prior_scale else 0.0)

    expected = np.exp(minimize_scalar(objective, bounds=(-3, 3), method="bounded", options={"xatol": 1e-8}).x)
    assert synthetic.bayes_temperature(x, y, estimator=estimator) == pytest.approx(expected, rel=1e-4)
    assert expected < 0.85


def test_bayes_temperature_is_one_on_the_population():
    # sd(log T*) is about 0.116 * sqrt(150 / n): 0.004 at n = 150,000, so 0.015 is about 4 sd.
    x, y, _ = synthetic.make_dataset(50_000, seed=1)
    assert synthetic.bayes_temperature(x, y) == pytest.approx(1.0, abs=0.015)


@pytest.mark.parametrize("n", [0, -5, 2.5, True])
def test_bad_size(n):
    with pytest.raises(ValueError, match="Invalid value for argument `n_per_class`"):
        synthetic.make_dataset(n)


def test_bad_features():
    with pytest.raises(ValueError, match="shape"):
        synthetic.bayes_probabilities(np.zeros((3, 3)))
