"""The one-vs-rest fits at scale: ties, near-ties, a class absent from the fitting set, and the layers' lookup."""

import warnings

import keras
import numpy as np
import pytest
from scipy.special import softmax
from sklearn.isotonic import IsotonicRegression

from keras_ils.calibration import CalibratorFitWarning, fit_calibrator
from keras_ils.calibration.one_vs_rest import count_below


def _task(rng, n, k, scale=3.0):
    """Over-confident logits (`scale` times the true log-posteriors) and labels drawn from the true posteriors."""
    s = 1.5 * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return scale * s, labels


def _quiet_fit(method, outputs, labels, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibratorFitWarning)
        return fit_calibrator(method, outputs, labels, **options)


def _equal_mass_edges(scores, num_bins):
    """The bins' rule, one class at a time, as a loop: midpoints at round(i n / B), then while a bin is empty
    the edge below the first empty bin (the first edge, when it is bin 0) goes."""
    ordered = np.sort(scores)
    n = len(ordered)
    cuts = np.unique(np.round(np.arange(1, num_bins) * n / num_bins).astype(int))
    cuts = cuts[(cuts > 0) & (cuts < n)]
    edges = np.unique(0.5 * (ordered[cuts - 1] + ordered[cuts]))
    while len(edges):
        counts = np.bincount(np.searchsorted(edges, scores, side="left"), minlength=len(edges) + 1)
        if counts.min() > 0:
            break
        edges = np.delete(edges, max(np.flatnonzero(counts == 0)[0] - 1, 0))
    return edges


@pytest.mark.parametrize("width", [0, 1, 2, 3, 5, 16, 17])
def test_count_below_is_searchsorted(rng, width):
    table = np.sort(rng.integers(0, 6, size=(4, width)) / 5.0, axis=1).astype("float32")  # repeated entries
    x = (rng.integers(0, 11, size=(50, 4)) / 10.0).astype("float32")  # some equal to entries
    got = keras.ops.convert_to_numpy(count_below(table, x))
    want = np.stack([np.searchsorted(table[j], x[:, j], side="left") for j in range(4)], axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", ["histogram", "isotonic"])
def test_layers_take_any_leading_axes(rng, method):
    # [..., K]: a sequence of outputs reads as its rows do, also with an unknown length in a model
    logits, labels = _task(rng, 400, 5)
    layer = fit_calibrator(method, logits, labels)
    x = logits[:12].astype("float32")
    want = keras.ops.convert_to_numpy(layer(x)).reshape(3, 4, 5)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x.reshape(3, 4, 5))), want)
    inputs = keras.Input((None, 5))
    np.testing.assert_allclose(
        keras.Model(inputs, layer(inputs)).predict(x.reshape(3, 4, 5), verbose=0), want, atol=1e-6
    )


@pytest.mark.parametrize("levels", [3, 7, 40])
def test_histogram_ties_follow_the_rule(rng, levels):
    # many tied probabilities per class: the fitted edges are the loop's, class by class
    p = rng.integers(1, levels + 1, size=(500, 4)) + 0.5 * rng.random((500, 4)) * (rng.random((500, 4)) < 0.2)
    p /= p.sum(axis=1, keepdims=True)
    labels = rng.integers(0, 4, 500)
    layer = fit_calibrator("histogram", p, labels, from_logits=False)
    edges, values = layer.get_weights()
    for j in range(4):
        want = _equal_mass_edges(p[:, j], 15)
        np.testing.assert_array_equal(edges[j, : len(want)], want.astype("float32"))
        assert np.all(edges[j, len(want) :] == 1.0)
        bins = np.searchsorted(want, p[:, j], side="left")
        frequencies = np.bincount(bins, weights=labels == j) / np.bincount(bins)
        np.testing.assert_allclose(values[j, : len(frequencies)], frequencies, rtol=1e-6)


def test_isotonic_near_ties_are_scikit_learns(rng):
    # scores closer than scikit-learn's resolution (1e-15): tiny ones, and ones a few ulps below 1
    n = 300
    tiny = rng.integers(0, 60, n) * 3e-17
    near_one = 1.0 - rng.integers(0, 25, n) * 1.1e-16
    p = np.stack([tiny, near_one - tiny, 1.0 - near_one], axis=1)
    labels = rng.integers(0, 3, n)
    layer = fit_calibrator("isotonic", p, labels, from_logits=False)
    thresholds, values = layer.get_weights()
    for j in range(3):
        reference = IsotonicRegression(y_min=0, y_max=1).fit(p[:, j], labels == j)
        m = len(reference.X_thresholds_)
        assert np.all(thresholds[j, m:] == thresholds[j, m - 1])  # no other point
        np.testing.assert_array_equal(thresholds[j, :m], reference.X_thresholds_.astype("float32"))
        np.testing.assert_allclose(values[j, :m], reference.y_thresholds_, atol=1e-7)


def _cluster_spans(column):
    """Each score's cluster span: the sorted scores split wherever a gap reaches scikit-learn's resolution, 1e-15."""
    order = np.argsort(column)
    ordered = column[order]
    cluster = np.append(0, np.cumsum(np.diff(ordered) >= 1e-15))
    first = ordered[np.searchsorted(cluster, cluster)]
    last = ordered[np.searchsorted(cluster, cluster, side="right") - 1]
    spans = np.empty_like(column)
    spans[order] = last - first
    return spans


def test_isotonic_chains_of_near_ties_are_scikit_learns(rng):
    # float32 softmax of 8x over-confident logits: tiny probabilities in clusters of gaps below the resolution that
    # span many resolutions, so that scikit-learn's runs (each within 1e-15 of its FIRST score) chain within them
    logits, labels = _task(rng, 2000, 50, scale=8.0)
    p = softmax(logits.astype("float32"), axis=1).astype(np.float64)
    spans = np.stack([_cluster_spans(p[:, j]) for j in range(50)], axis=1)
    assert np.sum(spans[np.arange(2000), labels] >= 5e-15) >= 20  # positives inside such clusters: the rule matters
    layer = fit_calibrator("isotonic", p, labels, from_logits=False)
    thresholds, values = layer.get_weights()
    for j in range(50):
        reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[:, j], labels == j)
        m = len(reference.X_thresholds_)
        assert np.all(thresholds[j, m:] == thresholds[j, m - 1])  # no other point
        np.testing.assert_array_equal(thresholds[j, :m], reference.X_thresholds_.astype("float32"))
        np.testing.assert_allclose(values[j, :m], reference.y_thresholds_, atol=1e-7)


class TestAbsentClass:
    """A class with no fitting example gets the map of every class's `(p_k, y == k)` pooled."""

    def _without_class_2(self, rng, n=600, k=5):
        logits, labels = _task(rng, 3 * n, k)
        keep = labels != 2
        return logits[keep][:n], labels[keep][:n]

    def test_isotonic(self, rng):
        logits, labels = self._without_class_2(rng)
        layer = _quiet_fit("isotonic", logits, labels)
        p = softmax(logits, axis=1)
        pooled = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")
        pooled.fit(p.ravel(), (labels[:, None] == np.arange(5)).ravel())
        own = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[:, 0], labels == 0)
        test = softmax(_task(rng, 400, 5)[0], axis=1).astype("float32")
        got = keras.ops.convert_to_numpy(layer.one_vs_rest(test)).astype(np.float64)
        x = test.astype(np.float64)
        np.testing.assert_allclose(got[:, 2], pooled.predict(x[:, 2]), atol=2e-5)
        np.testing.assert_allclose(got[:, 0], own.predict(x[:, 0]), atol=2e-5)  # the others: their own maps

    def test_histogram(self, rng):
        logits, labels = self._without_class_2(rng)
        layer = _quiet_fit("histogram", logits, labels)
        p = softmax(logits, axis=1)
        scores, positives = p.ravel(), (labels[:, None] == np.arange(5)).ravel()
        order = np.argsort(scores)
        chunks = np.split(order, np.round(np.arange(1, 15) * len(order) / 15).astype(int))  # 15 pooled bins
        edges, values = layer.get_weights()
        np.testing.assert_allclose(values[2], [positives[c].mean() for c in chunks], rtol=1e-6)
        for b in range(14):
            assert scores[chunks[b]].max() <= edges[2, b] <= scores[chunks[b + 1]].min()

    @pytest.mark.parametrize("method", ["histogram", "isotonic"])
    def test_the_class_keeps_its_share(self, rng, method):
        # a zero map would leave class 2 (a fifth of the test set) only the floor and the model's share
        logits, labels = self._without_class_2(rng, n=2000)
        layer = _quiet_fit(method, logits, labels)
        test_logits, test_labels = _task(rng, 4000, 5)
        q = np.exp(keras.ops.convert_to_numpy(layer(test_logits)).astype(np.float64))
        share = np.mean(test_labels == 2)
        assert 0.5 * share < q[:, 2].mean() < 1.5 * share


@pytest.mark.slow  # 20,000 x 200, and scikit-learn 200 times: about 10 s on 2 cores
@pytest.mark.parametrize("method", ["histogram", "isotonic"])
def test_large_fits_match_the_references(method):
    rng = np.random.default_rng(0)
    logits, labels = _task(rng, 20_000, 200)
    p = softmax(logits, axis=1)
    layer, fit = fit_calibrator(method, logits, labels, return_fit=True)
    assert fit.status == "fitted"
    first, second = layer.get_weights()
    for j in range(200):
        if method == "isotonic":
            reference = IsotonicRegression(y_min=0, y_max=1).fit(p[:, j], labels == j)
            m = len(reference.X_thresholds_)
            np.testing.assert_allclose(first[j, :m], reference.X_thresholds_, rtol=1e-6)
            np.testing.assert_allclose(second[j, :m], reference.y_thresholds_, atol=1e-7)
        else:
            chunks = np.split(np.argsort(p[:, j]), np.round(np.arange(1, 15) * 20_000 / 15).astype(int))
            np.testing.assert_allclose(second[j], [np.mean(labels[c] == j) for c in chunks], rtol=1e-6)
