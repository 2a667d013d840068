"""Histogram binning and isotonic regression, one-vs-rest: against numpy written here and against scikit-learn."""

import warnings

import keras
import numpy as np
import pytest
from scipy.special import softmax
from sklearn.isotonic import IsotonicRegression

from keras_ils.calibration import (
    CalibratorFitWarning,
    HistogramBinning,
    IsotonicCalibration,
    fit_calibrator,
)
from keras_ils.calibration.one_vs_rest import PRIOR_EXAMPLES_PER_CLASS


def _task(rng, n, k=4, scale=3.0):
    """Over-confident logits (`scale` times the true log-posteriors) and labels drawn from the true posteriors."""
    s = 1.5 * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return scale * s, labels


def _renormalised_log(values, floor):
    q = (values + floor) / (values + floor).sum(axis=1, keepdims=True)
    return np.log(q)


def _np(x):
    return keras.ops.convert_to_numpy(x).astype(np.float64)


def _isotonic_reference(scores, targets, x):
    """scikit-learn's prediction at `x`, and the float32 layer's allowed error there.

    The layer stores the thresholds and reads `x` in float32, each rounded by
    up to 6e-8 (half an ulp below 1); on a segment of slope `s` the map
    moves by `s` times that.
    """
    reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(scores, targets)
    t, v = reference.X_thresholds_, reference.y_thresholds_
    slopes = np.abs(np.diff(v)) / np.maximum(np.diff(t), 1e-300) if len(t) > 1 else np.zeros(1)
    segment = np.clip(np.searchsorted(t, x, side="left"), 1, max(len(t) - 1, 1)) - 1
    return reference.predict(x), 1e-5 + 2e-7 * slopes[np.minimum(segment, len(slopes) - 1)]


class TestHistogram:
    def test_equal_mass_bins_hold_their_class_frequencies(self, rng):
        n, k, bins = 3000, 4, 15
        logits, labels = _task(rng, n, k)
        layer, fit = fit_calibrator("histogram", logits, labels, return_fit=True)
        assert fit.status == "fitted" and layer.num_bins == bins and layer.floor == pytest.approx(1 / n)
        p = softmax(logits, axis=1)
        edges, values = layer.get_weights()
        for j in range(k):
            order = np.argsort(p[:, j])
            chunks = np.split(order, bins)  # 15 equal-mass bins of 200, written here
            want = [np.mean(labels[c] == j) for c in chunks]
            np.testing.assert_allclose(values[j], want, rtol=1e-6)
            for b in range(bins - 1):  # each edge between the last score of a bin and the first of the next
                assert p[chunks[b], j].max() <= edges[j, b] <= p[chunks[b + 1], j].min()

    def test_call_is_the_renormalised_lookup(self, rng):
        logits, labels = _task(rng, 1000)
        layer = fit_calibrator("histogram", logits, labels)
        test_logits, _ = _task(rng, 500)
        edges, values = (w.astype(np.float64) for w in layer.get_weights())
        p = softmax(test_logits, axis=1)
        looked_up = np.stack([values[j][np.searchsorted(edges[j], p[:, j], side="left")] for j in range(4)], axis=1)
        np.testing.assert_allclose(_np(layer(test_logits)), _renormalised_log(looked_up, 1 / 1000), atol=2e-5)
        np.testing.assert_allclose(_np(layer.one_vs_rest(p.astype("float32"))), looked_up, atol=1e-6)

    def test_ties_never_leave_a_bin_empty(self, rng):
        logits, labels = _task(rng, 600)
        probabilities = np.round(softmax(logits, axis=1), 1)  # many tied scores
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        layer = fit_calibrator("histogram", probabilities, labels, from_logits=False)
        edges = layer.get_weights()[0]
        for j in range(4):
            real = edges[j][edges[j] < 1.0]
            counts = np.bincount(np.searchsorted(real, probabilities[:, j], side="left"), minlength=len(real) + 1)
            assert counts.min() > 0 and len(real) < 14  # merged, not empty

    @pytest.mark.parametrize(
        "n, k, bins, small",
        [(30, 6, 10, True), (12, 3, 4, True), (100, 4, 15, True), (300, 3, 15, False), (3000, 4, 15, False)],
    )
    def test_bins_from_the_data(self, rng, n, k, bins, small):
        # small sets (fewer than 15 examples a bin, or a class under 20): bins of at least 3, mixed with the model
        logits, labels = _task(rng, n, k=k)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            layer, fit = fit_calibrator("histogram", logits, labels, return_fit=True)
        assert layer.num_bins == bins and fit.status == ("few_examples" if small else "fitted")
        assert layer.floor == pytest.approx(1 / (n * k) if small else 1 / n)
        # the prior's strength m (examples per class) is cross-validated: test_small_data checks the choice
        weights = [m * k / (n + m * k) for m in PRIOR_EXAMPLES_PER_CLASS] if small else [0.0]
        assert any(layer.model_weight == pytest.approx(w) for w in weights)
        assert len(record) == small and (not small or "rests on too few examples" in str(record[0].message))

    def test_one_bin_is_the_base_rates(self, rng, tmp_path):
        logits, labels = _task(rng, 200)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CalibratorFitWarning)
            layer = fit_calibrator("histogram", logits, labels, num_bins=1)
        rates = np.bincount(labels, minlength=4) / 200
        got = _np(layer(logits[:3]))
        np.testing.assert_allclose(got, np.tile(_renormalised_log(rates[None], 1 / 200), (3, 1)), atol=1e-6)
        model = keras.Sequential([keras.Input((4,)), layer])  # no edges at all: an empty weight saves and loads
        model.save(tmp_path / "one_bin.keras")
        np.testing.assert_array_equal(keras.saving.load_model(tmp_path / "one_bin.keras").predict(logits[:3]), got)

    def test_probabilities_in_and_out(self, rng):
        logits, labels = _task(rng, 800)
        on_logits = fit_calibrator("histogram", logits, labels)
        on_probabilities = fit_calibrator("histogram", softmax(logits, axis=1), labels, from_logits=False)
        test = _task(rng, 100)[0]
        got = _np(on_probabilities(softmax(test, axis=1)))
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-6)
        np.testing.assert_allclose(got, np.exp(_np(on_logits(test))), rtol=1e-5)

    @pytest.mark.parametrize("num_bins", [0, -3, 2.5, True])
    def test_bad_num_bins(self, num_bins):
        with pytest.raises(ValueError, match="Invalid value for argument `num_bins`"):
            fit_calibrator("histogram", np.zeros((4, 3)), [0, 1, 2, 0], num_bins=num_bins)
        with pytest.raises(ValueError, match="Invalid value for argument `num_bins`"):
            HistogramBinning(num_bins=num_bins)


class TestIsotonic:
    @pytest.mark.parametrize("ties", [False, True])
    def test_each_class_equals_scikit_learn(self, rng, ties):
        logits, labels = _task(rng, 400)
        if ties:  # few distinct logits: many tied probabilities per class
            logits = np.round(logits / 3.0) * 3.0
        p = softmax(logits, axis=1)
        layer = fit_calibrator("isotonic", p, labels, from_logits=False)
        test = np.concatenate([softmax(_task(rng, 300)[0], axis=1), np.eye(4), np.full((1, 4), 0.25)])
        got = _np(layer.one_vs_rest(test.astype("float32")))
        for j in range(4):
            reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[:, j], labels == j)
            want, tolerance = _isotonic_reference(p[:, j], labels == j, test[:, j].astype("float32").astype(float))
            assert np.all(np.abs(got[:, j] - want) <= tolerance)
            m = len(reference.X_thresholds_)
            thresholds, values = layer.get_weights()
            np.testing.assert_allclose(thresholds[j, :m], reference.X_thresholds_, rtol=1e-6)
            np.testing.assert_allclose(values[j, :m], reference.y_thresholds_, atol=1e-7)

    def test_call_is_the_renormalised_map(self, rng):
        logits, labels = _task(rng, 500)
        layer = fit_calibrator("isotonic", logits, labels)
        p_fit, test = softmax(logits, axis=1), _task(rng, 200)[0]
        p = keras.ops.convert_to_numpy(keras.ops.softmax(test.astype("float32"))).astype(np.float64)  # as the layer
        mapped, tolerance = zip(
            *(_isotonic_reference(p_fit[:, j], labels == j, p[:, j]) for j in range(4)), strict=True
        )
        mapped, tolerance = np.stack(mapped, axis=1), np.stack(tolerance, axis=1)
        q = np.exp(_np(layer(test)))
        want = np.exp(_renormalised_log(mapped, 1 / 500))
        # a map error of e moves each renormalised probability by at most e / (row total)
        total = (mapped + 1 / 500).sum(axis=1, keepdims=True)
        assert np.all(np.abs(q - want) <= 2 * tolerance.sum(axis=1, keepdims=True) / total + 1e-6)

    def test_small_sets_warn_and_stay_off_zero(self, rng):
        logits, labels = _task(rng, 30, k=6)
        with pytest.warns(CalibratorFitWarning, match=r"Calibrator fit \(isotonic\): it rests on too few examples"):
            layer, fit = fit_calibrator("isotonic", logits, labels, return_fit=True)
        assert fit.status == "few_examples"
        test = 30.0 * _task(rng, 2000, k=6)[0]  # far outside the fitted range too
        log_q = _np(layer(test))
        # the maps' share, (1 - model_weight), of a floor 1 / (n K) over a row total of at most K + K floors
        share = 1.0 - layer.model_weight
        assert np.isfinite(log_q).all() and log_q.min() >= np.log(share * (1 / 180) / (6 + 6 / 180)) - 1e-5

    def test_identity_when_built_directly(self, rng):
        layer = IsotonicCalibration(num_thresholds=3, from_logits=False)
        p = softmax(rng.normal(size=(5, 3)), axis=1)
        np.testing.assert_allclose(_np(layer(p)), p, rtol=1e-5)

    @pytest.mark.parametrize("value", [1, 0, 2.0])
    def test_bad_num_thresholds(self, value):
        with pytest.raises(ValueError, match="Invalid value for argument `num_thresholds`"):
            IsotonicCalibration(num_thresholds=value)


@pytest.mark.parametrize("layer_class", [HistogramBinning, IsotonicCalibration])
@pytest.mark.parametrize("floor", [-0.1, 1.5, float("nan")])
def test_bad_floor(layer_class, floor):
    with pytest.raises(ValueError, match="Invalid value for argument `floor`"):
        layer_class(floor=floor)
