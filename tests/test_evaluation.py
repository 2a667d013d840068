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


def test_logits_given_as_probabilities_are_refused():
    logits = np.array([[2.0, -1.0, 0.5], [0.1, 3.0, -2.0]])
    with pytest.raises(ValueError, match="Invalid value for argument `y_pred`.*from_logits=True"):
        evaluation.scores(logits, [0, 1], from_logits=False)
