"""Vector, matrix and Dirichlet maps fitted at any size: class-wise miscalibration, the TensorFlow passes, the two-stage
choice on the folds, a class absent from the validation set, and the folds' budget (keras_ils.calibration.affine_fit).

Every expected value is computed here with scipy (affine_reference), apart from the package's fits.
"""

import math
import warnings

import keras
import numpy as np
import pytest
from affine_reference import (
    affine_map,
    features_of,
    nll,
    one_standard_error,
    package_folds,
    penalised_objective,
    scipy_map_fit,
    scipy_temperature,
)
from scipy.special import softmax

from keras_ils.calibration import CalibratorFitWarning, _affine_passes, fit_calibrator, fit_temperature, small_data
from keras_ils.calibration.small_data import PRIOR_PRECISIONS

AFFINE = ("vector", "matrix", "dirichlet")


def _draw(rng, n, k, signal=2.0):
    """Calibrated log-posteriors `s` and labels drawn from `softmax(s)`."""
    s = signal * rng.normal(size=(n, k))
    return s, (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)


def _classwise(seed, n, k, test_n=20000):
    """A known class-wise miscalibration (each class's logit scaled and shifted its own way): `(z, y, z_t, y_t)`."""
    rng = np.random.default_rng(seed)
    scale, shift = rng.uniform(0.4, 2.5, k), rng.normal(scale=0.5, size=k)
    (s, y), (s_test, y_test) = _draw(rng, n, k), _draw(rng, test_n, k)
    return ((s - shift) / scale).astype("float32"), y, ((s_test - shift) / scale).astype("float32"), y_test


def _quiet_fit(method, z, labels, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_calibrator(method, z, labels, return_fit=True, **options)


def _weights(layer):
    return np.concatenate([np.ravel(w) for w in layer.get_weights()]).astype(np.float64)


def _map_temperature(z, labels):
    """Temperature scaling's maximum a posteriori map, the prior's centre (temperature scaling's own fit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_temperature(z, labels)


class TestClasswiseMiscalibration:
    def _beats_temperature_scaling(self, method, z, y, z_test, y_test):
        layer, fit = _quiet_fit(method, z, y)
        calibrated = nll(keras.ops.convert_to_numpy(layer(z_test)), y_test)
        temperature = nll(z_test / scipy_temperature(z, y), y_test)  # temperature scaling fitted by scipy
        assert fit.status == "regularised" and calibrated < temperature - 0.05, (calibrated, temperature)
        return fit

    @pytest.mark.parametrize("method", AFFINE)
    def test_each_map_beats_temperature_scaling(self, method):
        self._beats_temperature_scaling(method, *_classwise(0, 1000, 5))

    @pytest.mark.slow  # about a minute per map on 2 busy cores (a 10,100-parameter map on 5-fold cross-validation)
    @pytest.mark.parametrize("method", AFFINE)
    def test_at_cifar100_size_without_a_cap(self, method):
        z, y, z_test, y_test = _classwise(1, 5000, 100)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = self._beats_temperature_scaling(method, z, y, z_test, y_test)
        # a matrix map has more parameters than 10 per example: that is said; no cost cap is
        assert not any("cross-validated" in str(w.message) or "not cross" in str(w.message) for w in caught)
        assert fit.prior_precision in PRIOR_PRECISIONS[1:]


class TestDevicePasses:
    @pytest.mark.parametrize(
        "method, float32",
        [("matrix", False), ("matrix", True), ("dirichlet", True)]
        + [
            pytest.param(*case, marks=pytest.mark.slow)
            for case in (("vector", False), ("vector", True), ("dirichlet", False))
        ],
    )  # ~1-2 s each on 2 cores: the three maps share the passes (float32 covered by two, float64 by one)
    def test_fit_matches_scipy(self, monkeypatch, method, float32):
        # the passes forced onto the backend's device (compiled keras.ops; float32 features with float64 sums too),
        # in blocks of 300 rows on the CPU (the third padded with 100 rows of zeros)
        monkeypatch.setattr(_affine_passes, "NUMPY_MAX_WORK", 0)
        monkeypatch.setattr(_affine_passes, "_CPU_BLOCK", 3000)
        monkeypatch.setattr(_affine_passes, "_CPU_BLOCK_FULL", 3000)
        if float32:
            monkeypatch.setattr(_affine_passes, "FLOAT64_MAX_ENTRIES", 0)
        z, y, *_ = _classwise(2, 800, 10, test_n=10)
        options = dict(prior_precision=0) if method == "vector" else dict(off_diagonal_l2=2.0, intercept_l2=0.5)
        layer, fit = _quiet_fit(method, z, y, **options)
        penalty = (0, 0, 0, 0) if method == "vector" else (2.0 / (10 * 9), 0.0, 0.5 / 10, 0.0)
        z = z.astype(np.float64)
        objective = penalised_objective(method, z, y, penalty)
        want = scipy_map_fit(method, z, y, penalty)
        gap = objective(_weights(layer))[0] - objective(want)[0]
        got, expected = affine_map(method, _weights(layer), z), affine_map(method, want, z)
        got, expected = got - got.mean(axis=1, keepdims=True), expected - expected.mean(axis=1, keepdims=True)
        assert gap <= (1e-5 if float32 else 1e-9)
        if not float32:  # float64 sums: the same map, up to the softmax's free shift and L-BFGS's stop; along
            # Dirichlet's flattest direction the order of the sums over blocks moved the stop by 1.2e-4 in a logit
            # (JAX, 300-row blocks) while the objectives agreed to 1e-11
            np.testing.assert_allclose(got, expected, atol=2e-4)
        assert fit.objective == pytest.approx(objective(_weights(layer))[0], abs=1e-6 if float32 else 1e-10)


def _stage(form, x, y, folds, candidates):
    """One stage of the rule on the package's folds, by scipy: the one-standard-error choice and each fold's map.

    `form` is `"vector"` (the diagonal map) or `"matrix"` (the full map) of the features `x`;
    `candidates(train x, train y) -> [params per precision]`, most regularised first.
    """
    losses, maps = np.zeros((len(PRIOR_PRECISIONS), len(y))), []
    for fold in range(5):
        train, test = folds != fold, folds == fold
        fitted = candidates(x[train], y[train])
        for c, params in enumerate(fitted):
            logits = affine_map(form, params, x[test])
            losses[c, test] = -np.log(softmax(logits, axis=1)[np.arange(test.sum()), y[test]])
        maps.append(fitted)
    chosen = one_standard_error(losses)
    return chosen, [fitted[chosen] for fitted in maps]


class TestTwoStageChoice:
    @pytest.mark.parametrize("method", ["matrix", pytest.param("dirichlet", marks=pytest.mark.slow)])  # ~5 s each
    def test_both_precisions_are_the_folds_choice(self, method):
        # 3 classes mixed by a full matrix, 300 examples: the diagonal's precision, then the off-diagonal's, each
        # chosen by 5-fold cross-validation (one-standard-error rule), recomputed here with scipy on the package's
        # folds; the map is then refitted on every example
        rng = np.random.default_rng(0)
        s, y = _draw(rng, 300, 3)
        mixing, shift = 1.3 * np.eye(3) + 0.6 * rng.normal(size=(3, 3)), rng.normal(scale=0.5, size=3)
        z = (s - shift) @ np.linalg.inv(mixing)
        x, folds = features_of(method, z), package_folds(y)

        def diagonal(xs, ys):  # temperature scaling's map, then the diagonal map under each finite precision
            beta = 1.0 / _map_temperature(xs, ys)
            weights = [p / (2 * len(ys)) for p in PRIOR_PRECISIONS[1:]]
            return [np.concatenate([np.full(3, beta), np.zeros(3)])] + [
                scipy_map_fit("vector", xs, ys, (0, w, w, beta)) for w in weights
            ]

        chosen, fold_maps = _stage("vector", x, y, folds, diagonal)
        assert 0 < chosen  # the premise: a finite diagonal precision
        fold_iter = iter(fold_maps)

        def off_diagonal(xs, ys):  # the chosen diagonal map, then the full map under each off-diagonal precision
            vector_map, beta = next(fold_iter), 1.0 / _map_temperature(xs, ys)
            d = PRIOR_PRECISIONS[chosen] / (2 * len(ys))
            start = np.concatenate([np.diag(vector_map[:3]).ravel(), vector_map[3:]])
            return [start] + [
                scipy_map_fit("matrix", xs, ys, (p / (2 * len(ys)), d, d, beta), start=start)
                for p in PRIOR_PRECISIONS[1:]
            ]

        off_chosen, _ = _stage("matrix", x, y, folds, off_diagonal)
        assert 0 < off_chosen  # the premise: a finite off-diagonal precision
        layer, fit = _quiet_fit(method, z, y)
        beta, n = 1.0 / _map_temperature(x, y), 300
        precision, off = PRIOR_PRECISIONS[chosen] / (2 * n), PRIOR_PRECISIONS[off_chosen] / (2 * n)
        want = scipy_map_fit("matrix", x, y, (off, precision, precision, beta))
        assert fit.status == "regularised" and fit.prior_precision == PRIOR_PRECISIONS[chosen]
        np.testing.assert_allclose(_weights(layer), want, atol=1e-4)


class TestAbsentClass:
    def _without_class_two(self):
        """An over-confident model on 3 classes whose validation set has no example of class 2 (the test set has)."""
        rng = np.random.default_rng(3)
        s, y = _draw(rng, 4000, 3, signal=1.5)
        s_test, y_test = _draw(rng, 20000, 3, signal=1.5)
        keep = np.flatnonzero(y != 2)[:300]
        return 3.0 * s[keep], y[keep], 3.0 * s_test, y_test

    @pytest.mark.parametrize("method", AFFINE)
    def test_the_absent_class_keeps_temperature_scalings_map(self, method):
        z, y, z_test, y_test = self._without_class_two()
        layer, fit = _quiet_fit(method, z, y)
        beta = 1.0 / _map_temperature(features_of(method, z), y)
        weights, bias = (w.astype(np.float64) for w in layer.get_weights())
        own = weights[2] if method == "vector" else weights[:, 2]
        np.testing.assert_allclose(own, beta if method == "vector" else beta * np.eye(3)[2], rtol=1e-5, atol=1e-6)
        assert bias[2] == 0.0
        # class 2's mean probability on test data stays near temperature scaling's (a plain vector scaling took it
        # from 0.30 to 0.005)
        calibrated = softmax(keras.ops.convert_to_numpy(layer(z_test)).astype(np.float64), axis=1)[:, 2].mean()
        temperature = softmax(features_of(method, z_test) * beta, axis=1)[:, 2].mean()
        assert 0.5 * temperature < calibrated < 2.0 * temperature, (calibrated, temperature)
        if method == "vector":  # the others: the maximum a posteriori fit of the two classes' softmax
            w = fit.prior_precision / (2 * 300)
            start = np.concatenate([np.full(3, beta), np.zeros(3)])
            absent = np.array([False, False, True])
            want = scipy_map_fit("vector", z, y, (0, w, w, beta), absent=absent, start=start)
            np.testing.assert_allclose(_weights(layer), want, atol=1e-4)


class TestBudget:
    def test_a_spent_budget_ends_the_search_and_says_so(self, monkeypatch):
        # no time at all: the first candidate after temperature scaling's map (which costs no fit) is cut short, so
        # the map is temperature scaling's, and the warning says why
        z, y, *_ = _classwise(0, 1000, 5, test_n=10)
        monkeypatch.setattr(small_data, "CROSS_VALIDATION_SECONDS", 0.0)
        with pytest.warns(CalibratorFitWarning, match="the folds' time budget .* ended the search there"):
            layer, fit = fit_calibrator("vector", z, y, return_fit=True)
        assert fit.status == "temperature" and fit.prior_precision == math.inf
        beta = 1.0 / _map_temperature(z, y)
        np.testing.assert_allclose(_weights(layer), np.concatenate([np.full(5, beta), np.zeros(5)]), rtol=1e-6)
