"""Inductive Venn-Abers of the top label: against scikit-learn's isotonic regression and the `venn-abers` package.

The top label's probability is the `venn-abers` package's binary Venn-Abers
(`VennAbers`) fitted on the pairs (largest probability, whether its class is
the label); the layer computes in float32, so it matches to float32
precision. The per-class reductions of both packages (one-vs-rest as
`va_tpe="one_vs_all"`, one-vs-one) are the reason the layer does not use
them: `test_per_class_reductions_break_at_many_classes`.
"""

import warnings

import keras
import numpy as np
import pytest
from scipy.special import softmax
from sklearn.isotonic import IsotonicRegression
from venn_abers.venn_abers import VennAbers
from venn_abers.venn_abers import predict_proba_prefitted_va as package_prefitted

from keras_ils.calibration import CalibratorFitWarning
from keras_ils.calibration.reports import MIN_EXAMPLES_PER_CLASS
from keras_ils.calibration.venn_abers import VennAbersCalibration, fit_venn_abers, venn_abers_tables


def _task(rng, n, k=3, scale=2.0):
    """Over-confident logits (`scale` times the log-posteriors the labels are drawn from)."""
    s = 1.5 * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(s, axis=1).cumsum(axis=1)).argmax(axis=1)
    return (scale * s).astype(np.float32), labels


def _np(x):
    return keras.ops.convert_to_numpy(x).astype(np.float64)


def _float32_probabilities(logits):
    return _np(keras.ops.softmax(keras.ops.convert_to_tensor(logits)))


def _isotonic_with(scores, targets, s, label):
    """The isotonic fit, refitted with `(s, label)` added, at `s`: Venn-Abers' definition, written here."""
    return IsotonicRegression().fit(np.append(scores, s), np.append(targets, label)).predict([s])[0]


class TestTables:
    @pytest.mark.parametrize("decimals", [None, 1])  # rounded scores: many ties, and test scores equal to them
    def test_each_place_by_refitting_isotonic_regression(self, rng, decimals):
        scores = rng.random(60)
        targets = (rng.random(60) < scores).astype(float)
        if decimals:
            scores = np.round(scores, decimals)
        distinct, p0, p1 = venn_abers_tables(scores, targets)
        for s in np.concatenate([rng.random(25), scores[:10], [0.0, 1.0]]):
            assert p0[np.sum(distinct <= s)] == pytest.approx(_isotonic_with(scores, targets, s, 0), abs=1e-12)
            assert p1[np.sum(distinct < s)] == pytest.approx(_isotonic_with(scores, targets, s, 1), abs=1e-12)

    def test_above_every_score_with_labels_0(self):
        scores, targets = np.array([0.1, 0.5, 0.8]), np.array([1.0, 0.0, 0.0])
        _, p0, p1 = venn_abers_tables(scores, targets)
        assert p1[-1] == _isotonic_with(scores, targets, 0.9, 1) == 1.0  # MAPIE 1.6 gives 0.5 here
        assert p0[0] == _isotonic_with(scores, targets, 0.05, 0) == 0.0


def _top_label_reference(p_cal, labels, p_test):
    """`(probabilities, (p0, p1))` by the `venn-abers` package's binary predictor on the top label, the other classes
    sharing the rest in proportion to `p_test`."""
    pairs = lambda p: np.stack([1.0 - p.max(axis=1), p.max(axis=1)], axis=1)  # noqa: E731
    reference = VennAbers().fit(pairs(p_cal), p_cal.argmax(axis=1) == labels)
    merged, interval = reference.predict_proba(pairs(p_test))
    top = p_test.argmax(axis=1)
    others = p_test.copy()
    others[np.arange(len(top)), top] = 0.0
    probabilities = merged[:, :1] * others / others.sum(axis=1, keepdims=True)  # 1 - q, shared
    probabilities[np.arange(len(top)), top] = merged[:, 1]
    return probabilities, interval


class TestAgainstPackages:
    @pytest.mark.parametrize("k", [2, 3, 10])
    def test_the_top_label_against_the_venn_abers_package(self, rng, k):
        logits, labels = _task(rng, 300, k=k)
        test, _ = _task(rng, 300, k=k)
        layer = fit_venn_abers(logits, labels)[0]
        p_cal, p_test = _float32_probabilities(logits), _float32_probabilities(test)
        probabilities, interval = _top_label_reference(p_cal, labels, p_test)
        np.testing.assert_allclose(np.exp(_np(layer(test))), probabilities, atol=1e-6)
        p0, p1 = layer.interval(p_test.astype(np.float32))
        np.testing.assert_allclose(np.hstack([_np(p0), _np(p1)]), interval, atol=1e-12)

    def test_per_class_reductions_break_at_many_classes(self):
        """Why the top label: 32 classes, 18 validation examples a class, a network 99.7 % accurate. Each class's
        one-vs-rest problem has 18 positives; the `p1` of the 31 classes a row rules out add up after renormalising
        and take mass from the true class (the README's bound: no calibrated row worse than 2x the network's test
        NLL + 0.1)."""
        rng = np.random.default_rng(0)

        def draw(n):
            latent = rng.integers(0, 32, n)
            scores = 10.0 * np.eye(32)[latent] + rng.normal(size=(n, 32))
            labels = (rng.random((n, 1)) < softmax(scores, axis=1).cumsum(axis=1)).argmax(axis=1)
            return (1.5 * scores).astype(np.float32), labels

        (logits, labels), (test, test_labels) = draw(576), draw(3000)
        p_cal, p_test = _float32_probabilities(logits), _float32_probabilities(test)
        nll = lambda p: -np.mean(np.log(p[np.arange(3000), test_labels]))  # noqa: E731
        bound = 2 * nll(p_test) + 0.1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # their 0 / 0 slopes
            for reduction in ("one_vs_all", "one_vs_one"):
                assert nll(package_prefitted(p_cal, labels, p_test, va_tpe=reduction)[0]) > bound
        assert nll(np.exp(_np(fit_venn_abers(logits, labels)[0](test)))) < bound / 2

    def test_probabilities_in_and_out(self, rng):
        logits, labels = _task(rng, 300)
        p = _float32_probabilities(logits).astype(np.float32)
        from_logits = fit_venn_abers(logits, labels)[0]
        from_probabilities = fit_venn_abers(p, labels, from_logits=False)[0]
        out = _np(from_probabilities(p))
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
        np.testing.assert_allclose(out, np.exp(_np(from_logits(logits))), atol=1e-6)


class TestFit:
    def test_the_top_label_stays_off_0_and_1_and_the_others_keep_their_ratios(self, rng):
        logits, labels = _task(rng, 300, scale=20.0)  # extreme logits: many probabilities near 0 and 1
        layer, fit = fit_venn_abers(logits, labels)
        test = 100.0 * _task(rng, 300)[0]
        log_q = _np(layer(test))
        top = np.take_along_axis(np.exp(log_q), test.argmax(axis=1)[:, None], axis=1)
        assert np.isfinite(log_q).all() and np.isfinite(fit.nll) and 1e-4 < top.min() and top.max() < 1 - 1e-4
        lowest = np.argsort(test, axis=1)[:, :2]  # two classes below the top: their log ratio is the logits'
        ratio = lambda x: np.diff(np.take_along_axis(x, lowest, axis=1), axis=1)  # noqa: E731
        np.testing.assert_allclose(ratio(log_q), ratio(test), rtol=1e-5, atol=1e-2)

    def test_report(self, rng):
        logits, labels = _task(rng, 300)
        layer, fit = fit_venn_abers(logits, labels)
        assert (fit.method, fit.status, fit.num_examples, fit.iterations, fit.warning) == (
            "venn_abers", "fitted", 300, 0, None)  # fmt: skip
        q = np.exp(_np(layer(logits)))
        assert fit.nll == pytest.approx(-np.mean(np.log(q[np.arange(300), labels])), rel=1e-5)
        assert layer.num_points == len(np.unique(_float32_probabilities(logits).max(axis=1)))

    def test_small_sets_warn_in_the_report(self, rng):
        logits, labels = _task(rng, 30)
        _, fit = fit_venn_abers(logits, labels)
        assert fit.status == "few_examples"
        assert fit.warning.startswith("Calibrator fit (venn_abers): it rests on too few examples (30 validation")
        assert f"fewer than {MIN_EXAMPLES_PER_CLASS} examples" in fit.warning and "p1 - p0 = " in fit.warning
        assert issubclass(CalibratorFitWarning, UserWarning)

    def test_bad_outputs(self, rng):
        logits, labels = _task(rng, 50)
        with pytest.raises(ValueError, match=r"must have shape \[n >= 1, K >= 2\]"):
            fit_venn_abers(logits[:0], labels[:0])
        with pytest.raises(ValueError, match="the same length"):
            fit_venn_abers(logits, labels[:-1])
        with pytest.raises(ValueError, match="Invalid value for argument `num_points`"):
            VennAbersCalibration(num_points=0)


class TestLayer:
    def test_config_round_trip_and_registration(self):
        layer = VennAbersCalibration(num_points=7, from_logits=False)
        config = layer.get_config()
        assert "floor" not in config and VennAbersCalibration.from_config(config).get_config() == config
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(rebuilt) is VennAbersCalibration and rebuilt.get_config() == config

    def test_keras_file_round_trip(self, rng, tmp_path):
        logits, labels = _task(rng, 300)
        layer = fit_venn_abers(logits, labels)[0]
        model = keras.Sequential([keras.Input((3,)), layer])
        model.save(tmp_path / "va.keras")
        loaded = keras.saving.load_model(tmp_path / "va.keras")
        np.testing.assert_allclose(_np(loaded(logits)), _np(model(logits)), rtol=1e-6)

    def test_a_directly_built_layer_gives_the_top_label_one_half(self):
        layer = VennAbersCalibration(num_points=3, from_logits=False)
        layer.build((None, 4))
        np.testing.assert_allclose(_np(layer(np.array([[0.7, 0.2, 0.05, 0.05]]))), [[0.5, 1 / 3, 1 / 12, 1 / 12]],
                                   atol=1e-7)  # fmt: skip

    def test_float32_under_mixed_precision(self, rng):
        logits, labels = _task(rng, 300)
        reference = fit_venn_abers(logits, labels)[0]
        policy = keras.config.dtype_policy()
        keras.config.set_dtype_policy("mixed_bfloat16")
        try:
            layer = fit_venn_abers(logits, labels)[0]
            got = layer(keras.ops.convert_to_tensor(logits, "bfloat16"))
        finally:
            keras.config.set_dtype_policy(policy)
        assert layer.compute_dtype == "float32" and keras.backend.standardize_dtype(got.dtype) == "float32"
        np.testing.assert_array_equal(layer.get_weights()[0], reference.get_weights()[0])
        rounded = _np(keras.ops.cast(keras.ops.cast(logits, "bfloat16"), "float32"))  # what the bfloat16 input holds
        np.testing.assert_allclose(_np(got), _np(reference(rounded)), atol=1e-6)
