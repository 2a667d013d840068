import calibration
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import evaluation
from keras_ils.targets import teacher_targets

import reference


def _model_and_data(n=300, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = rng.integers(0, k, n).astype("int32")
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(k)]), x, y


def _predictions(seed, n=3000, k=3):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = (rng.normal(size=(n, k)) * (1 + seed) + 2 * np.eye(k)[labels]).astype(np.float32)
    return logits, labels


def _reference_scores(probs, labels):
    return dict(
        accuracy=(probs.argmax(1) == labels).mean(),
        nll=reference.nll(probs, labels),
        ece=reference.ece(probs, labels),
        cwece=reference.classwise_ece(probs, labels),
        class_conditional_ece=reference.class_conditional_ece(probs, labels),
        brier=reference.brier(probs, labels),
        mce=reference.mce(probs, labels),
        adaptive_ece=reference.adaptive_ece(probs, labels),
    )


class TestScores:
    @pytest.mark.parametrize("from_logits", [True, False])
    @pytest.mark.parametrize("seed, k", [(0, 3), (1, 3), (2, 5)])
    def test_against_reference(self, seed, k, from_logits):
        logits, labels = _predictions(seed, k=k)
        probs = reference.softmax(logits)
        result = evaluation.scores(logits if from_logits else probs, labels, from_logits=from_logits)
        assert tuple(result) == evaluation.COLUMNS
        for name, expected in _reference_scores(probs, labels).items():
            np.testing.assert_allclose(result[name], expected, rtol=1e-4, atol=1e-7, err_msg=name)

    def test_a_class_absent_from_the_labels(self):
        logits, labels = _predictions(0, k=4)
        labels = np.minimum(labels, 2)  # class 3 never the true class
        result = evaluation.scores(logits, labels)
        expected = reference.class_conditional_ece(reference.softmax(logits), labels)
        np.testing.assert_allclose(result["class_conditional_ece"], expected, rtol=1e-4)

    @pytest.mark.parametrize("num_bins", [1, 4, 30])
    def test_num_bins(self, num_bins):
        logits, labels = _predictions(1)
        probs = reference.softmax(logits)
        result = evaluation.scores(logits, labels, num_bins=num_bins)
        np.testing.assert_allclose(result["ece"], reference.ece(probs, labels, num_bins), rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(result["mce"], reference.mce(probs, labels, num_bins), rtol=1e-4, atol=1e-7)
        expected = reference.classwise_ece(probs, labels, num_bins)
        np.testing.assert_allclose(result["cwece"], expected, rtol=1e-4, atol=1e-7)

    def test_every_label_form_and_sequence_outputs_give_the_same_scores(self):
        logits, labels = _predictions(0, n=600)
        expected = evaluation.scores(logits, labels)
        assert evaluation.scores(logits, np.eye(3)[labels]) == expected
        assert evaluation.scores(logits, labels[:, None]) == expected
        assert evaluation.scores(logits, np.asarray(teacher_targets(labels, logits))) == expected
        assert evaluation.scores(logits.reshape(20, 30, 3), labels.reshape(20, 30)) == expected

    def test_one_label_per_prediction(self):
        logits, labels = _predictions(0, n=10)
        with pytest.raises(ValueError, match="one prediction per label"):
            evaluation.scores(logits, labels[:7])

    def test_labels_out_of_range(self):
        logits, labels = _predictions(0, n=10)
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            evaluation.scores(logits, labels + 3)


class TestTopLabelBins:
    def test_against_a_loop_over_the_papers_bins(self):
        rng = np.random.default_rng(0)
        probs = rng.dirichlet(np.ones(4), size=500)
        labels = rng.integers(0, 4, 500)
        counts, correct_sums, confidence_sums = evaluation.top_label_bins(probs, labels, num_bins=10)
        confidence, correct = probs.max(1), probs.argmax(1) == labels
        bins = np.clip(np.ceil(confidence * 10) - 1, 0, 9)  # B_n = ((n-1)/N, n/N], paper §2.2
        for n in range(10):
            np.testing.assert_array_equal(counts[n], (bins == n).sum())
            np.testing.assert_allclose(correct_sums[n], correct[bins == n].sum())
            np.testing.assert_allclose(confidence_sums[n], confidence[bins == n].sum())

    def test_per_class_sums_add_up_to_the_overall_sums(self):
        rng = np.random.default_rng(1)
        probs = rng.dirichlet(np.ones(3), size=400)
        labels = rng.integers(0, 3, 400)
        overall = evaluation.top_label_bins(probs, labels)
        per_class = evaluation.top_label_bins(probs, labels, per_class=True)
        for total, split in zip(overall, per_class, strict=True):
            assert split.shape == (3, 15)
            np.testing.assert_allclose(split.sum(axis=0), total)
        np.testing.assert_array_equal(per_class[0].sum(axis=1), np.bincount(labels))


def test_evaluate_against_reference():
    model, x, y = _model_and_data()
    probs = reference.softmax(model.predict(x, verbose=0))
    result = evaluation.evaluate(model, (x, y))["all"]
    np.testing.assert_allclose(result["accuracy"], (probs.argmax(1) == y).mean(), rtol=1e-6)
    np.testing.assert_allclose(result["nll"], reference.nll(probs, y), rtol=1e-5)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, y), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, y), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["brier"], reference.brier(probs, y), rtol=1e-5)
    np.testing.assert_allclose(result["mce"], reference.mce(probs, y), rtol=1e-4)
    np.testing.assert_allclose(result["class_conditional_ece"], reference.class_conditional_ece(probs, y), rtol=1e-4)
    assert result["count"] == 300


def test_groups_and_dataset_input():
    model, x, y = _model_and_data()
    mask = x[:, 0] > 0
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    result = evaluation.evaluate(model, ds, groups={"pos": mask, "neg": ~mask})
    probs = reference.softmax(model.predict(x, verbose=0))
    for name, m in (("pos", mask), ("neg", ~mask)):
        assert result[name]["count"] == m.sum()
        np.testing.assert_allclose(result[name]["nll"], reference.nll(probs[m], y[m]), rtol=1e-5)
        np.testing.assert_allclose(result[name]["ece"], reference.ece(probs[m], y[m]), rtol=1e-4, atol=1e-7)


def test_bad_group_mask():
    model, x, y = _model_and_data()
    with pytest.raises(ValueError, match="mask of group 'g'"):
        evaluation.evaluate(model, (x, y), groups={"g": np.ones(3, bool)})


class TestEvaluateReadsTheModel:
    """`evaluate(model, data)` reads a model ending in a softmax as probabilities (issue 29 item 2)."""

    @staticmethod
    def _twins():
        logits_model, x, y = _model_and_data(n=200)
        softmax_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        weights = [3.0 * w + 0.1 for w in logits_model.get_weights()]  # confident enough for the scores to differ
        logits_model.set_weights(weights)
        softmax_model.set_weights(weights)
        return logits_model, softmax_model, x, y

    def test_a_softmax_model_and_its_logit_twin_get_the_same_scores(self):
        logits_model, softmax_model, x, y = self._twins()
        from_logits = evaluation.evaluate(logits_model, (x, y))["all"]
        from_probabilities = evaluation.evaluate(softmax_model, (x, y))["all"]
        for name in evaluation.COLUMNS:
            np.testing.assert_allclose(from_probabilities[name], from_logits[name], rtol=1e-4, atol=1e-6, err_msg=name)
        probs = reference.softmax(logits_model.predict(x, verbose=0))
        np.testing.assert_allclose(from_probabilities["nll"], reference.nll(probs, y), rtol=1e-5)
        # Keras' own loss of the softmax model: what the 0.885 against Keras' 0.598 got wrong
        softmax_model.compile(loss=keras.losses.SparseCategoricalCrossentropy())
        keras_nll = softmax_model.evaluate(x, y, batch_size=len(x), verbose=0)
        np.testing.assert_allclose(from_probabilities["nll"], keras_nll, rtol=1e-5)
        assert abs(from_probabilities["nll"] - reference.nll(reference.softmax(probs), y)) > 0.05  # read as logits

    def test_a_declaration_that_contradicts_the_model_is_refused(self):
        logits_model, softmax_model, x, y = self._twins()
        with pytest.raises(ValueError, match="declared as logits.*Pass `from_logits=False`"):
            evaluation.evaluate(softmax_model, (x, y), from_logits=True)
        with pytest.raises(ValueError, match="declared as probabilities.*Pass `from_logits=True`"):
            evaluation.evaluate(logits_model, (x, y), from_logits=False)
        explicit = evaluation.evaluate(softmax_model, (x, y), from_logits=False)["all"]
        assert explicit == evaluation.evaluate(softmax_model, (x, y))["all"]


def test_logits_given_as_probabilities_are_refused():
    logits = np.array([[2.0, -1.0, 0.5], [0.1, 3.0, -2.0]])
    with pytest.raises(ValueError, match="Invalid value for argument `outputs`.*Pass `from_logits=True`"):
        evaluation.scores(logits, [0, 1], from_logits=False)


class TestPinnedNumbers:
    """Hand-computed values (no confidence on a bin edge, so netcal's and torchmetrics' bins agree with ours)."""

    PROBS = np.array([[0.95, 0.05], [0.94, 0.06], [0.62, 0.38], [0.61, 0.39], [0.55, 0.45]])
    LABELS = np.array([0, 1, 0, 0, 1])

    def test_ece_and_mce(self):
        # 15 bins: {0.95, 0.94} in bin 14 (1 correct, confidence 1.89), {0.62, 0.61} in bin 9 (2, 1.23), 0.55 in 8
        result = evaluation.scores(self.PROBS, self.LABELS, from_logits=False)
        np.testing.assert_allclose(result["ece"], (0.89 + 0.77 + 0.55) / 5, rtol=1e-6)
        np.testing.assert_allclose(result["mce"], 0.55, rtol=1e-6)

    def test_adaptive_ece(self):
        # 2 equal-mass bins by rank: {0.55, 0.61, 0.62} (2 correct, 1.78) and {0.94, 0.95} (1 correct, 1.89)
        got = evaluation.adaptive_ece(self.PROBS, self.LABELS, num_bins=2)
        np.testing.assert_allclose(got, (0.22 + 0.89) / 5, rtol=1e-6)
        # 5 bins of one row each: the mean |correct - confidence|
        want = np.mean(np.abs(np.array([1, 0, 1, 1, 0]) - self.PROBS.max(1)))
        np.testing.assert_allclose(evaluation.adaptive_ece(self.PROBS, self.LABELS, num_bins=5), want, rtol=1e-6)


class TestAdaptiveECE:
    @pytest.mark.parametrize("num_bins", [1, 4, 15, 50])
    def test_against_reference(self, num_bins):
        logits, labels = _predictions(2, n=1003)
        probs = reference.softmax(logits)
        want = reference.adaptive_ece(probs, labels, num_bins)
        np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels, num_bins), want, rtol=1e-6)
        got = evaluation.scores(logits, labels, num_bins=num_bins)["adaptive_ece"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)

    def test_fewer_rows_than_bins_and_ties(self):
        probs = np.array([[0.7, 0.3], [0.7, 0.3], [0.7, 0.3]])
        labels = np.array([0, 1, 0])
        for num_bins in (2, 10):  # one block of ties, never split: one bin, |2/3 - 0.7|
            np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels, num_bins), 0.7 - 2 / 3, rtol=1e-12)
            want = calibration.get_ece_em(probs, labels, num_bins=num_bins)
            np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels, num_bins), want, rtol=1e-12)
        # distinct confidences, fewer than the bins: one row a bin, the mean |correct - confidence|
        probs = np.array([[0.7, 0.3], [0.8, 0.2], [0.9, 0.1]])
        want = np.mean(np.abs([1, 0, 1] - probs[:, 0]))
        np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels, 10), want, rtol=1e-12)

    def test_bins_hold_equal_mass_where_equal_width_bins_do_not(self):
        probs = np.column_stack([np.linspace(0.9, 0.999, 600), 1 - np.linspace(0.9, 0.999, 600)])
        labels = np.zeros(600, dtype=int)
        counts, _, _ = evaluation.top_label_bins(probs, labels)
        assert (counts > 0).sum() == 2  # equal width: two of 15 bins hold every row
        # equal mass: 15 bins of 40 rows, each row correct, so the gap is 1 - mean confidence in every bin
        np.testing.assert_allclose(evaluation.adaptive_ece(probs, labels), 1 - probs[:, 0].mean(), rtol=1e-6)

    def test_bad_num_bins(self):
        with pytest.raises(ValueError, match="Invalid value for argument `num_bins`"):
            evaluation.adaptive_ece([[0.5, 0.5]], [0], num_bins=0)


def _bootstrap_reference(score, arrays, seed, bootstrap, confidence):
    """The percentile interval, written out: resample b takes default_rng(seed)'s b-th integers(0, n, n)."""
    rng = np.random.default_rng(seed)
    n = len(arrays[0])
    values = []
    for _ in range(bootstrap):
        index = rng.integers(0, n, n)
        values.append(score(*(a[index] for a in arrays)))
    return np.percentile(values, [50 * (1 - confidence), 50 * (1 + confidence)])


REFERENCE_SCORES = {
    "accuracy": lambda p, y: (p.argmax(1) == y).mean(),
    "nll": reference.nll,
    "ece": reference.ece,
    "brier": reference.brier,
    # a resample repeats rows, so its confidences tie: uncertainty-calibration's equal-mass ECE pools ties as ours
    "adaptive_ece": lambda p, y: calibration.get_ece_em(p, y, num_bins=15),
    "cwece": reference.classwise_ece,
}


class TestBootstrap:
    def test_intervals_against_a_numpy_bootstrap(self):
        logits, labels = _predictions(1, n=300)
        probs = reference.softmax(logits)
        result = evaluation.evaluate_outputs(logits, labels, confidence=0.9, bootstrap=200, seed=3)["all"]
        assert set(result["intervals"]) == set(evaluation.COLUMNS)
        for name, score in REFERENCE_SCORES.items():
            interval = result["intervals"][name]
            assert interval.value == result[name]
            want = _bootstrap_reference(score, (probs, labels), 3, 200, 0.9)
            np.testing.assert_allclose((interval.low, interval.high), want, rtol=1e-4, atol=1e-7, err_msg=name)

    def test_groups_are_resampled_on_their_own(self):
        logits, labels = _predictions(0, n=200)
        mask = np.arange(200) < 120
        result = evaluation.evaluate_outputs(logits, labels, groups={"g": mask}, confidence=0.8, bootstrap=50, seed=1)
        want = _bootstrap_reference(reference.nll, (reference.softmax(logits[mask]), labels[mask]), 1, 50, 0.8)
        np.testing.assert_allclose(result["g"]["intervals"]["nll"][1:], want, rtol=1e-5)

    def test_evaluate_passes_them_through_and_is_unchanged_without(self):
        model, x, y = _model_and_data(n=120)
        plain = evaluation.evaluate(model, (x, y))
        assert "intervals" not in plain["all"]
        result = evaluation.evaluate(model, (x, y), confidence=0.95, bootstrap=30, seed=2)
        want = evaluation.evaluate_outputs(model.predict(x, verbose=0), y, confidence=0.95, bootstrap=30, seed=2)
        assert result["all"]["intervals"]["ece"] == pytest.approx(want["all"]["intervals"]["ece"])
        assert {k: v for k, v in result["all"].items() if k != "intervals"} == pytest.approx(plain["all"])

    @pytest.mark.parametrize(
        "kwargs, name",
        [
            (dict(confidence=1.0), "confidence"),
            (dict(confidence=0.0), "confidence"),
            (dict(confidence=0.9, bootstrap=0), "bootstrap"),
            (dict(confidence=0.9, seed=-1), "seed"),
        ],
    )
    def test_bad_arguments(self, kwargs, name):
        logits, labels = _predictions(0, n=10)
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            evaluation.evaluate_outputs(logits, labels, **kwargs)
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            evaluation.paired_difference(logits, logits, labels, **kwargs)


class TestPairedDifference:
    def test_against_a_numpy_paired_bootstrap(self):
        logits, labels = _predictions(1, n=300)
        sharper = 2.0 * logits
        result = evaluation.paired_difference(logits, sharper, labels, confidence=0.9, bootstrap=100, seed=5)
        assert set(result) == set(evaluation.COLUMNS)
        p_a, p_b = reference.softmax(logits), reference.softmax(sharper)
        for name, score in REFERENCE_SCORES.items():
            difference = lambda a, b, y, score=score: score(a, y) - score(b, y)  # noqa: E731
            np.testing.assert_allclose(result[name].value, score(p_a, labels) - score(p_b, labels), rtol=1e-4,
                                       atol=1e-7, err_msg=name)  # fmt: skip
            want = _bootstrap_reference(difference, (p_a, p_b, labels), 5, 100, 0.9)
            np.testing.assert_allclose((result[name].low, result[name].high), want, rtol=1e-4, atol=1e-6, err_msg=name)

    def test_a_model_against_itself_is_exactly_zero(self):
        logits, labels = _predictions(0, n=100)
        for interval in evaluation.paired_difference(logits, logits, labels, bootstrap=20).values():
            assert tuple(interval) == (0.0, 0.0, 0.0)

    def test_pairing_narrows_the_interval(self):
        # two models whose errors share the examples' difficulty: the paired interval is far narrower
        logits, labels = _predictions(0, n=500)
        paired = evaluation.paired_difference(logits, 1.2 * logits, labels, bootstrap=100)["nll"]
        a = evaluation.evaluate_outputs(logits, labels, confidence=0.95, bootstrap=100)["all"]["intervals"]["nll"]
        assert paired.high - paired.low < 0.2 * (a.high - a.low)

    def test_different_lengths(self):
        logits, labels = _predictions(0, n=10)
        with pytest.raises(ValueError, match="must score the same examples"):
            evaluation.paired_difference(logits, logits[:5], labels)


def test_ece_matches_netcal_and_torchmetrics():
    # 15 equal-width bins, top-label ECE of float64 softmax probabilities. The literals were computed with
    # netcal 1.4.0 (`netcal.metrics.ECE(bins=15).measure(probs, labels)`) and torchmetrics 1.9.0 on torch 2.13.0
    # (`multiclass_calibration_error(..., num_classes=4, n_bins=15, norm="l1")`, which computes in float32),
    # numpy 2.4.6; neither package is a dependency, so only their numbers are here.
    netcal_ece, torchmetrics_ece = 0.052835263097461345, 0.05283527448773384
    rng = np.random.default_rng(20261125)
    n, k = 2000, 4
    logits = rng.normal(size=(n, k)) * 2.0
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    # labels drawn from a sharper softmax: nearly calibrated, so the bins' gaps take both signs and the ECE is not
    # just |accuracy - mean confidence| (11 bins filled; the two lowest are overconfident, the rest underconfident)
    sharper = np.exp(1.2 * shifted) / np.exp(1.2 * shifted).sum(axis=1, keepdims=True)
    labels = (rng.random((n, 1)) < sharper.cumsum(axis=1)).argmax(axis=1)
    # no confidence within 1e-5 of a bin edge: netcal's [a, b), torchmetrics' and our (a, b] bins hold the same rows
    assert np.abs(probs.max(1)[:, None] - np.arange(16) / 15).min() > 1e-5
    counts, correct_sums, confidence_sums = evaluation.top_label_bins(probs, labels)
    gaps = (correct_sums - confidence_sums)[counts > 0]
    assert (gaps < 0).any() and (gaps > 0).any()
    float64_ece = np.abs(correct_sums - confidence_sums).sum() / counts.sum()
    for got in (evaluation.scores(probs, labels, from_logits=False)["ece"], float64_ece):
        assert got == pytest.approx(netcal_ece, abs=1e-7)
        assert got == pytest.approx(torchmetrics_ece, abs=1e-7)
