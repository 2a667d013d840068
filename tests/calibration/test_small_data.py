"""Small validation sets are the normal case: about 30 examples of 6 classes must never give an absurd calibrator.

The bound (issue 24): a calibrated test NLL within 2x the uncalibrated one, plus 0.1, computed here with scipy.
The rule that keeps it (keras_ils.calibration.small_data): the affine maps' prior centred on temperature
scaling's map, its precision cross-validated; the one-vs-rest maps mixed with the model's distribution.
"""

import math
import warnings

import keras
import numpy as np
import pytest
from affine_reference import affine_map, one_standard_error, package_folds, scipy_map_fit
from scipy.special import log_softmax, softmax
from sklearn.datasets import load_digits, load_wine
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from keras_ils.calibration import (
    METHODS,
    CalibratorFitWarning,
    HistogramBinning,
    IsotonicCalibration,
    fit_calibrator,
    fit_temperature,
    solvers,
)
from keras_ils.calibration._affine_passes import Passes
from keras_ils.calibration.one_vs_rest import PRIOR_EXAMPLES_PER_CLASS as PRIORS
from keras_ils.calibration.small_data import PRIOR_PRECISIONS

# (model's logits = scale * true log-posteriors, signal of the true log-posteriors): under-confident, calibrated and
# over-confident models of weak, medium and strong classifiers
REGIMES = [(scale, signal) for scale in (0.5, 1.0, 3.0) for signal in (1.0, 2.0, 4.0)]
AFFINE = ("vector", "matrix", "dirichlet")


def _draw(rng, n, scale, signal, k=6):
    """A known distribution: true log-posteriors `signal * N(0, 1)`, labels drawn from them, the model's logits."""
    s = signal * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return scale * s, labels


def _nll(logits, labels):
    log_p = log_softmax(np.asarray(logits, np.float64), axis=1)
    return float(-np.mean(log_p[np.arange(len(labels)), labels]))


def _quiet_fit(method, logits, labels, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_calibrator(method, logits, labels, return_fit=True, **options)


def _excess(method, fit_logits, fit_labels, test_logits, test_labels):
    """Calibrated test NLL minus the bound `2 * uncalibrated + 0.1` (scipy's log-softmax of the layer's output)."""
    layer, _ = _quiet_fit(method, fit_logits, fit_labels)
    calibrated = keras.ops.convert_to_numpy(layer(test_logits.astype("float32")))
    assert np.isfinite(calibrated).all()
    return _nll(calibrated, test_labels) - (2 * _nll(test_logits, test_labels) + 0.1)


def _sklearn_splits(loader, classes, seed):
    """30 validation examples of a scikit-learn data set and the rest as test, logits of a weakly regularised model."""
    x, y = loader(return_X_y=True)
    keep = y < classes
    x, y = x[keep], y[keep]
    x_train, x_rest, y_train, y_rest = train_test_split(x, y, train_size=150 if classes > 3 else 70, stratify=y,
                                                        random_state=seed)  # fmt: skip
    x_val, x_test, y_val, y_test = train_test_split(x_rest, y_rest, train_size=30, stratify=y_rest, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1000.0, max_iter=10000)).fit(x_train, y_train)
    return model.decision_function(x_val), y_val, model.decision_function(x_test), y_test


class TestTheBound:
    @pytest.mark.parametrize("method", METHODS)
    def test_thirty_examples_of_six_classes(self, method):
        worst = (-np.inf, None)
        for seed, regime in enumerate(REGIMES):
            rng = np.random.default_rng(seed)
            worst = max(worst, (_excess(method, *_draw(rng, 30, *regime), *_draw(rng, 3000, *regime)), regime))
        assert worst[0] <= 0, f"calibrated NLL above 2x uncalibrated + 0.1 by {worst[0]:.3f} at {worst[1]}"

    @pytest.mark.slow
    @pytest.mark.parametrize("method", METHODS)
    def test_more_seeds_and_scikit_learn_data(self, method):
        cases = [
            (_draw(rng, 30, *r), _draw(rng, 3000, *r)) for r in REGIMES for rng in map(np.random.default_rng, range(5))
        ]
        for loader, classes in ((load_digits, 6), (load_wine, 3)):
            cases += [(s[:2], s[2:]) for s in (_sklearn_splits(loader, classes, seed) for seed in range(5))]
        worst = max(_excess(method, *fit, *test) for fit, test in cases)
        assert worst <= 0


def _centred(logits):
    """Calibrated logits without each row's mean, which the softmax ignores."""
    return logits - logits.mean(axis=1, keepdims=True)


def _weights(layer):
    return np.concatenate([np.ravel(w) for w in layer.get_weights()]).astype(np.float64)


def _per_class_miscalibrated():
    """Three classes, each miscalibrated by its own scale: 50 examples (fewer than 10 per parameter of 6)."""
    rng = np.random.default_rng(0)
    s = 2.0 * rng.normal(size=(50, 3))
    labels = (rng.random((50, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return s / np.array([0.25, 1.0, 4.0]), labels


def _cross_validated_strength(p, labels, held_out_map):
    """The one-vs-rest prior's strength `m` by the package's folds and the one-SE rule, computed here."""
    folds, (n, k) = package_folds(labels), p.shape
    losses = np.zeros((len(PRIORS), n))
    for fold in range(5):
        train, test = folds != fold, folds == fold
        mapped, n_train = held_out_map(p[train], labels[train], p[test]), train.sum()
        for c, m in enumerate(PRIORS):
            w, floor = k * m / (n_train + k * m), 1 / (k * n_train)
            q = (1 - w) * (mapped + floor) / (mapped + floor).sum(axis=1, keepdims=True) + w * p[test]
            losses[c, test] = -np.log(q[np.arange(test.sum()), labels[test]])
    return PRIORS[one_standard_error(losses)]


class TestAffineRule:
    @pytest.mark.parametrize("method", AFFINE)
    def test_thirty_examples_warn_and_fall_back_to_temperature_scaling(self, method):
        logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
        with pytest.warns(CalibratorFitWarning, match="rests on too few examples: 30 validation examples for the"):
            layer, fit = fit_calibrator(method, logits, labels, return_fit=True)
        assert fit.status == "temperature" and fit.prior_precision == math.inf and fit.num_examples == 30
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            temperature = fit_temperature(logits, labels)  # the maximum a posteriori temperature
        got = softmax(keras.ops.convert_to_numpy(layer(logits)).astype(np.float64), axis=1)
        np.testing.assert_allclose(got, softmax(logits / temperature, axis=1), atol=1e-5)

    def test_a_chosen_prior_is_the_maximum_a_posteriori_map(self):
        z, labels = _per_class_miscalibrated()
        layer, fit = _quiet_fit("vector", z, labels)
        assert fit.status == "regularised" and fit.prior_precision in PRIOR_PRECISIONS[1:]
        assert "precision" in fit.warning and "5-fold cross-validation" in fit.warning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            beta = 1.0 / fit_temperature(z, labels)
        weight = fit.prior_precision / (2 * 50)  # each parameter ~ N(temperature scaling's map, 1 / precision)
        want = scipy_map_fit("vector", z, labels, (0.0, weight, weight, beta))
        np.testing.assert_allclose(_weights(layer), want, atol=1e-4)

    @pytest.mark.parametrize("method", ["matrix", "dirichlet"])
    def test_given_odir_weights_are_used_as_they_are_and_warned(self, method):
        logits, labels = _draw(np.random.default_rng(1), 30, 1.0, 2.0, k=3)
        layer, fit = _quiet_fit(method, logits, labels, off_diagonal_l2=1.0, intercept_l2=0.5)
        assert fit.status == "few_examples" and "the plain fit was asked for" in fit.warning
        want = scipy_map_fit(method, logits, labels, (1.0 / 6, 0.0, 0.5 / 3, 0.0))  # ODIR: lambda / (K (K - 1))
        np.testing.assert_allclose(_centred(affine_map(method, _weights(layer), logits)),
                                   _centred(affine_map(method, want, logits)), atol=2e-4)  # fmt: skip

    @pytest.mark.parametrize("method", AFFINE)
    def test_prior_precision_zero_is_the_plain_fit(self, method):
        k = 3
        n = 10 * (2 * k if method == "vector" else k * k + k)  # exactly 10 per parameter: no warning
        logits, labels = _draw(np.random.default_rng(2), n, 2.0, 1.0, k=k)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer, fit = fit_calibrator(method, logits, labels, return_fit=True, prior_precision=0)
        assert fit.status == "fitted" and fit.prior_precision is None
        odir = (0.0, 0.0, 0.0, 0.0) if method == "vector" else (0.01 / 6, 0.0, 0.01 / 3, 0.0)
        want = scipy_map_fit(method, logits, labels, odir)
        np.testing.assert_allclose(_centred(affine_map(method, _weights(layer), logits)),
                                   _centred(affine_map(method, want, logits)), atol=2e-4)  # fmt: skip

    @pytest.mark.parametrize("method", AFFINE)
    def test_enough_examples_are_cross_validated_in_silence(self, method):
        k = 3
        n = 10 * (2 * k if method == "vector" else k * k + k)
        logits, labels = _draw(np.random.default_rng(2), n, 2.0, 1.0, k=k)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _, fit = fit_calibrator(method, logits, labels, return_fit=True)
        assert fit.status in ("regularised", "temperature") and fit.prior_precision in PRIOR_PRECISIONS

    def test_plain_fit_on_too_few_examples_warns(self):
        logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
        with pytest.warns(CalibratorFitWarning, match="rests on too few examples.*the plain fit was asked for"):
            layer, fit = fit_calibrator("vector", logits, labels, return_fit=True, prior_precision=0)
        assert fit.prior_precision is None
        want = scipy_map_fit("vector", logits, labels, (0.0, 0.0, 0.0, 0.0))
        got, expected = affine_map("vector", _weights(layer), logits), affine_map("vector", want, logits)
        assert _nll(got, labels) <= _nll(expected, labels) + 1e-6

    @pytest.mark.parametrize("method", AFFINE)
    def test_a_fixed_prior_precision_is_that_maximum_a_posteriori_map(self, method):
        logits, labels = _draw(np.random.default_rng(3), 200, 2.0, 1.5, k=3)
        layer, fit = _quiet_fit(method, logits, labels, prior_precision=3.0)
        assert fit.status == "regularised" and fit.prior_precision == 3.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            beta = 1.0 / fit_temperature(log_softmax(logits, axis=1) if method == "dirichlet" else logits, labels)
        weight = 3.0 / (2 * 200)
        want = scipy_map_fit(method, logits, labels, (weight, weight, weight, beta))
        np.testing.assert_allclose(_weights(layer), want, atol=1e-4)
        layer, fit = _quiet_fit(method, logits, labels, prior_precision=math.inf)
        assert fit.status == "temperature"
        np.testing.assert_allclose(softmax(keras.ops.convert_to_numpy(layer(logits)).astype(np.float64), axis=1),
                                   softmax(logits * beta, axis=1) if method != "dirichlet" else
                                   softmax(log_softmax(logits, axis=1) * beta, axis=1), atol=1e-5)  # fmt: skip

    @pytest.mark.parametrize("method", AFFINE)
    def test_a_map_that_separates_the_validation_set_is_temperature_scaling(self, method):
        # two classes whose four validation errors sit at the boundary: a bias separates them, and a sharper map
        # then always scores better on held-out folds, though a test error far from the boundary pays for it
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 2, 80)
        logits = (2 * labels - 1)[:, None] * np.array([-8.0, 8.0]) + rng.normal(size=(80, 2))
        logits[:4] = [[0.2, -0.4], [0.1, -0.3], [0.4, -0.5], [0.1, -0.2]]
        labels[:4] = 1
        with pytest.warns(CalibratorFitWarning, match="classifies all 80 validation examples correctly, so no "):
            layer, fit = fit_calibrator(method, logits, labels, return_fit=True)
        assert fit.status == "temperature" and fit.prior_precision == math.inf
        mapped = keras.ops.convert_to_numpy(layer(logits.astype("float32")))
        np.testing.assert_array_equal(mapped.argmax(axis=1), logits.argmax(axis=1))  # the model's decisions kept

    @pytest.mark.parametrize("method", AFFINE)
    def test_newton_reaches_scipys_optimum_of_the_prior(self, method):
        logits, labels = _draw(np.random.default_rng(4), 40, 2.0, 2.0, k=4)
        features = log_softmax(logits, axis=1) if method == "dirichlet" else logits
        full, weight = method != "vector", 3.0 / 80  # precision 3 on 40 examples, centred on 0.7 * identity
        start = np.concatenate([np.eye(4).ravel() if full else np.ones(4), np.zeros(4)])
        penalty = solvers.Penalty(weight, weight, weight, 0.7)
        passes = Passes(features, labels, full)
        got, iterations, converged = solvers.newton(passes, penalty, start, 100, 1e-10)
        assert converged and iterations <= 20  # Newton's method with an exact Hessian: a few steps
        want = scipy_map_fit(method, logits, labels, (weight, weight, weight, 0.7))
        np.testing.assert_allclose(got, want, atol=1e-4)

    def test_a_single_example_is_temperature_scaling(self):
        logits, labels = _draw(np.random.default_rng(5), 1, 1.0, 2.0, k=12)
        _, fit = _quiet_fit("dirichlet", logits, labels)
        assert fit.status == "temperature" and "one example leaves none to hold out" in fit.warning

    def test_no_cost_cap_a_large_map_is_cross_validated(self):
        # 12 classes, 1000 examples: n P^2 = 1000 * 156^2 > 2e7 took temperature scaling's map without
        # cross-validation before; the folds now choose (L-BFGS), and the warning says only that 1000 examples are
        # fewer than 10 per parameter
        logits, labels = _draw(np.random.default_rng(5), 1000, 1.0, 2.0, k=12)
        _, fit = _quiet_fit("matrix", logits, labels)
        assert "not cross-validated" not in fit.warning and "5-fold cross-validation" in fit.warning
        assert fit.status in ("regularised", "temperature") and fit.prior_precision in PRIOR_PRECISIONS

    def test_a_validation_set_the_network_gets_right_is_temperature_scaling(self):
        # 10 classes, 1,700 examples, a network right on every one: the plain matrix map separates them and
        # diverges; the folds, whose held-out examples are all right too, choose temperature scaling's map
        rng = np.random.default_rng(6)
        labels = np.arange(1700) % 10
        logits = 4.0 * np.eye(10)[labels] + rng.normal(size=(1700, 10))
        logits[labels != logits.argmax(axis=1), labels[labels != logits.argmax(axis=1)]] += 10.0
        _, plain = _quiet_fit("matrix", logits, labels, prior_precision=0)
        assert plain.status in ("separated", "extreme", "not_converged")  # the premise: the plain map diverges
        layer, fit = _quiet_fit("matrix", logits, labels)
        assert fit.status == "temperature" and fit.prior_precision == math.inf
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            temperature = fit_temperature(logits, labels)
        got = softmax(keras.ops.convert_to_numpy(layer(logits.astype("float32"))).astype(np.float64), axis=1)
        np.testing.assert_allclose(got, softmax(logits / temperature, axis=1), atol=1e-5)

    def test_a_fixed_prior_precision_warns_on_too_few_examples_and_on_separation(self):
        logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
        with pytest.warns(CalibratorFitWarning, match=r"too few examples.*the prior's precision 3 is the one given"):
            _, fit = fit_calibrator("vector", logits, labels, return_fit=True, prior_precision=3.0)
        assert fit.status == "regularised" and fit.prior_precision == 3.0
        rng = np.random.default_rng(0)  # separable by a bias (test_a_map_that_separates_...), 80 examples
        labels = rng.integers(0, 2, 80)
        logits = (2 * labels - 1)[:, None] * np.array([-8.0, 8.0]) + rng.normal(size=(80, 2))
        logits[:4], labels[:4] = [[0.2, -0.4], [0.1, -0.3], [0.4, -0.5], [0.1, -0.2]], 1
        with pytest.warns(CalibratorFitWarning, match="only the prior's precision 0.001 bounds its sharpness"):
            layer, fit = fit_calibrator("vector", logits, labels, return_fit=True, prior_precision=1e-3)
        mapped = keras.ops.convert_to_numpy(layer(logits.astype("float32")))
        assert fit.prior_precision == 1e-3 and np.all(mapped.argmax(axis=1) == labels)  # not replaced: as asked

    def test_the_chosen_precision_is_scipys_five_fold_one_standard_error_choice(self):
        # every fold's map by scipy, centred on the training folds' temperature scaling; held-out NLLs; the most
        # regularised within one standard error
        z, labels = _per_class_miscalibrated()
        _, fit = _quiet_fit("vector", z, labels)
        folds = package_folds(labels)
        losses = np.zeros((len(PRIOR_PRECISIONS), 50))
        for fold in range(5):
            train, test = folds != fold, folds == fold
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                beta = 1.0 / fit_temperature(z[train], labels[train])
            for c, precision in enumerate(PRIOR_PRECISIONS):
                if math.isinf(precision):
                    params = np.concatenate([np.full(3, beta), np.zeros(3)])
                else:
                    weight = precision / (2 * train.sum())
                    params = scipy_map_fit("vector", z[train], labels[train], (0.0, weight, weight, beta))
                held_out = log_softmax(affine_map("vector", params, z[test]), axis=1)
                losses[c, test] = -held_out[np.arange(test.sum()), labels[test]]
        chosen = one_standard_error(losses)
        assert 0 < chosen and fit.prior_precision == PRIOR_PRECISIONS[chosen]

    @pytest.mark.parametrize("value", [-1, float("nan"), "10"])
    def test_bad_prior_precision(self, value):
        with pytest.raises(ValueError, match="Invalid value for argument `prior_precision`"):
            fit_calibrator("matrix", np.zeros((4, 3)), [0, 1, 2, 0], prior_precision=value)

    def test_prior_precision_and_odir_weights_are_refused_together(self):
        with pytest.raises(ValueError, match="give ODIR's weights .* or `prior_precision`"):
            fit_calibrator("matrix", np.zeros((4, 3)), [0, 1, 2, 0], prior_precision=1.0, off_diagonal_l2=0.1)

    def test_prior_precision_is_refused_elsewhere(self):
        with pytest.raises(ValueError, match="`prior_precision` is an option of method="):
            fit_calibrator("histogram", np.zeros((4, 3)), [0, 1, 2, 0], prior_precision=5)


class TestOneVsRestRule:
    def test_histogram_on_thirty_examples(self):
        logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
        with pytest.warns(CalibratorFitWarning, match="rests on too few examples") as record:
            layer, fit = fit_calibrator("histogram", logits, labels, return_fit=True)
        assert "fill 10 equal-mass bins per class of at least 3" in str(record[0].message)
        assert fit.status == "few_examples" and layer.num_bins == 10
        w = layer.model_weight  # m K / (n + m K), m cross-validated (test_the_prior_strength_is_cross_validated)
        assert layer.floor == pytest.approx(1 / 180) and any(w == pytest.approx(6 * m / (30 + 6 * m)) for m in PRIORS)
        p = softmax(logits, axis=1)
        edges, values = (w.astype(np.float64) for w in layer.get_weights())
        for j in range(6):  # every bin holds at least 3 fitting examples: none empty
            assert np.bincount(np.searchsorted(edges[j], p[:, j], side="left"), minlength=10).min() >= 3
        test = _draw(np.random.default_rng(1), 500, 3.0, 2.0)[0]
        pt = softmax(test, axis=1)
        looked_up = np.stack([values[j][np.searchsorted(edges[j], pt[:, j], side="left")] for j in range(6)], 1)
        renormalised = (looked_up + 1 / 180) / (looked_up + 1 / 180).sum(axis=1, keepdims=True)
        want = (1 - w) * renormalised + w * pt
        np.testing.assert_allclose(np.exp(keras.ops.convert_to_numpy(layer(test))), want, atol=2e-5)

    def test_isotonic_on_thirty_examples_keeps_scikit_learn_maps(self):
        logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
        with pytest.warns(CalibratorFitWarning, match=r"isotonic\): it rests on too few examples"):
            layer, fit = fit_calibrator("isotonic", logits, labels, return_fit=True)
        w = layer.model_weight
        assert fit.status == "few_examples" and any(w == pytest.approx(6 * m / (30 + 6 * m)) for m in PRIORS)
        p, test = softmax(logits, axis=1), 30.0 * _draw(np.random.default_rng(1), 500, 3.0, 2.0)[0]
        pt = keras.ops.convert_to_numpy(keras.ops.softmax(test.astype("float32"))).astype(np.float64)
        mapped = np.stack([IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[:, j], labels == j)
                           .predict(pt[:, j]) for j in range(6)], axis=1)  # fmt: skip
        renormalised = (mapped + 1 / 180) / (mapped + 1 / 180).sum(axis=1, keepdims=True)
        q = np.exp(keras.ops.convert_to_numpy(layer(test)).astype(np.float64))
        np.testing.assert_allclose(q, (1 - w) * renormalised + w * pt, atol=5e-5)
        assert q.min() >= (1 - w) * (1 / 180) / (6 + 6 / 180) - 1e-6  # off 0 however far out the logits

    @pytest.mark.parametrize("seed", range(4))
    def test_the_prior_strength_is_cross_validated(self, seed):
        # scikit-learn's isotonic maps on the training folds, read at the held-out fold
        def isotonic(train_p, train_labels, test_p):
            fitted = [IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(train_p[:, j], train_labels == j)
                      for j in range(4)]  # fmt: skip
            return np.stack([r.predict(test_p[:, j]) for j, r in enumerate(fitted)], axis=1)

        logits, labels = _draw(np.random.default_rng(seed), 40, 3.0, 2.0, k=4)
        layer, _ = _quiet_fit("isotonic", logits, labels)
        m = _cross_validated_strength(softmax(logits, axis=1), labels, isotonic)
        assert layer.model_weight == pytest.approx(4 * m / (40 + 4 * m))

    @pytest.mark.parametrize("seed", range(4))
    def test_the_histograms_prior_strength_is_cross_validated(self, seed):
        # equal-mass bins fitted on the training folds only (32 examples: 10 bins of 3 or more, cut at the
        # midpoints of round(i n / B); scores without ties), read at the held-out fold. An under-confident model,
        # so that the choice varies: m = 16, 64, 64, 4 over the four seeds
        def histogram(train_p, train_labels, test_p):
            mapped = np.zeros((len(test_p), 4))
            for j in range(4):
                ordered = np.sort(train_p[:, j])
                cuts = np.round(np.arange(1, 10) * len(ordered) / 10).astype(int)
                edges = 0.5 * (ordered[cuts - 1] + ordered[cuts])
                bins = np.searchsorted(edges, train_p[:, j], side="left")
                counts = np.bincount(bins, minlength=10)
                frequency = np.bincount(bins, weights=train_labels == j, minlength=10) / counts
                mapped[:, j] = frequency[np.searchsorted(edges, test_p[:, j], side="left")]
            return mapped

        logits, labels = _draw(np.random.default_rng(seed), 40, 0.3, 4.0, k=4)
        layer, _ = _quiet_fit("histogram", logits, labels)
        m = _cross_validated_strength(softmax(logits, axis=1), labels, histogram)
        assert layer.model_weight == pytest.approx(4 * m / (40 + 4 * m))

    @pytest.mark.parametrize("method", ["histogram", "isotonic"])
    def test_below_ten_examples_the_strongest_prior_without_cross_validation(self, method):
        logits, labels = _draw(np.random.default_rng(0), 9, 3.0, 2.0, k=3)
        with pytest.warns(CalibratorFitWarning, match="m = 64 examples per class, the strongest: too few examples"):
            layer, _ = fit_calibrator(method, logits, labels, return_fit=True)
        assert layer.model_weight == pytest.approx(3 * 64 / (9 + 3 * 64))

    @pytest.mark.parametrize("method", ["histogram", "isotonic"])
    def test_large_sets_are_the_plain_maps(self, method):
        logits, labels = _draw(np.random.default_rng(0), 3000, 3.0, 2.0, k=4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer, fit = fit_calibrator(method, logits, labels, return_fit=True)
        assert fit.status == "fitted" and layer.floor == pytest.approx(1 / 3000) and layer.model_weight == 0.0

    @pytest.mark.parametrize("layer_class", [HistogramBinning, IsotonicCalibration])
    @pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
    def test_bad_model_weight(self, layer_class, value):
        with pytest.raises(ValueError, match="Invalid value for argument `model_weight`"):
            layer_class(model_weight=value)


@pytest.mark.parametrize("method", ["histogram", "isotonic", "ensemble_temperature"])
def test_a_fit_on_thirty_examples_warns(method):
    logits, labels = _draw(np.random.default_rng(0), 30, 3.0, 2.0)
    with pytest.warns(CalibratorFitWarning, match="rests on too few examples"):
        _, fit = fit_calibrator(method, logits, labels, return_fit=True)
    assert fit.status == "few_examples" and np.isfinite(fit.nll)


@pytest.mark.parametrize("method", ["histogram", "isotonic", "ensemble_temperature"])
def test_enough_examples_do_not_warn(method):
    logits, labels = _draw(np.random.default_rng(0), 2000, 3.0, 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, fit = fit_calibrator(method, logits, labels, return_fit=True)
    assert fit.status == "fitted" and fit.warning is None
