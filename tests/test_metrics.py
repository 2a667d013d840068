import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ils import metrics, teacher_targets

import reference

K = 4


def _data(rng, n=500, k=K):
    labels = rng.integers(0, k, n)
    logits = 2.0 * rng.normal(size=(n, k)) + 1.5 * np.eye(k)[labels]
    return labels, reference.softmax(logits).astype("float32"), logits.astype("float32")


def _reference(name, probs, labels, n_bins=15):
    return {
        "ece": lambda: reference.ece(probs, labels, n_bins),
        "mce": lambda: reference.mce(probs, labels, n_bins),
        "cwece": lambda: reference.classwise_ece(probs, labels, n_bins),
        "class_conditional_ece": lambda: reference.class_conditional_ece(probs, labels, n_bins),
        "nll": lambda: reference.nll(probs, labels),
        "brier": lambda: reference.brier(probs, labels),
        "top_label_accuracy": lambda: float((probs.argmax(1) == labels).mean()),
    }[name]()


def _metric(name, from_logits=False, n_bins=15, k=K):
    return {
        "ece": lambda: metrics.ExpectedCalibrationError(n_bins, from_logits),
        "mce": lambda: metrics.MaximumCalibrationError(n_bins, from_logits),
        "cwece": lambda: metrics.ClasswiseExpectedCalibrationError(k, n_bins, from_logits),
        "class_conditional_ece": lambda: metrics.ClassConditionalECE(k, n_bins, from_logits),
        "nll": lambda: metrics.NegativeLogLikelihood(from_logits),
        "brier": lambda: metrics.BrierScore(from_logits),
        "top_label_accuracy": lambda: metrics.TopLabelAccuracy(from_logits),
    }[name]()


NAMES = ["ece", "mce", "cwece", "class_conditional_ece", "nll", "brier", "top_label_accuracy"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch_size", [1, 37, 500])
def test_streaming_equals_whole_set_reference(rng, name, batch_size):
    labels, probs, _ = _data(rng, n=120 if batch_size == 1 else 500)  # 120 eager one-example updates, not 500
    order = rng.permutation(len(labels))
    metric = _metric(name)
    for start in range(0, len(labels), batch_size):
        idx = order[start : start + batch_size]
        metric.update_state(labels[idx], probs[idx])
    np.testing.assert_allclose(float(metric.result()), _reference(name, probs, labels), rtol=1e-4, atol=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_every_y_true_form_and_logits(rng, name):
    labels, probs, logits = _data(rng, n=200)
    want = _reference(name, reference.softmax(logits), labels)
    forms = [labels, labels[:, None], np.eye(K)[labels], ops.convert_to_numpy(teacher_targets(labels, logits))]
    for y in forms:
        metric = _metric(name, from_logits=True)
        metric.update_state(y, logits)
        np.testing.assert_allclose(float(metric.result()), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_sequence_predictions_count_every_position(rng, name):
    # [batch, steps, K] predictions with [batch, steps] labels: one row per position
    labels, probs, _ = _data(rng, n=240)
    metric = _metric(name)
    metric.update_state(labels.reshape(24, 10), probs.reshape(24, 10, K))
    np.testing.assert_allclose(float(metric.result()), _reference(name, probs, labels), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("n_bins", [1, 5, 15, 30])
def test_bin_counts(rng, n_bins):
    labels, probs, _ = _data(rng)
    for name in ("ece", "cwece", "class_conditional_ece"):
        metric = _metric(name, n_bins=n_bins)
        metric.update_state(labels, probs)
        np.testing.assert_allclose(
            float(metric.result()), _reference(name, probs, labels, n_bins), rtol=1e-4, atol=1e-6
        )


def test_bin_edges_follow_the_paper():
    # B_1 = [0, 1/N], B_n = ((n-1)/N, n/N]
    got = ops.convert_to_numpy(metrics.bin_index(np.array([0.0, 0.2, 0.2001, 0.4, 0.9999, 1.0]), 5))
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 4, 4])


def test_sample_weight_ece(rng):
    labels, probs, _ = _data(rng)
    w = rng.random(len(labels))
    metric = metrics.ExpectedCalibrationError()
    metric.update_state(labels, probs, sample_weight=w)
    np.testing.assert_allclose(float(metric.result()), reference.ece(probs, labels, weights=w), rtol=1e-4)


def test_weighted_means(rng):
    labels, probs, _ = _data(rng)
    w = rng.random(len(labels))
    nll = metrics.NegativeLogLikelihood()
    nll.update_state(labels, probs, sample_weight=w)
    want = np.average(-np.log(probs[np.arange(len(labels)), labels]), weights=w)
    np.testing.assert_allclose(float(nll.result()), want, rtol=1e-5)


def test_classwise_ece_is_eq2_and_differs_from_the_authors_variant(rng):
    labels, probs, _ = _data(rng, n=3000)
    cw, cc = metrics.ClasswiseExpectedCalibrationError(K), metrics.ClassConditionalECE(K)
    cw.update_state(labels, probs)
    cc.update_state(labels, probs)
    assert abs(float(cw.result()) - float(cc.result())) > 1e-3


def test_lower_is_better_for_early_stopping(rng):
    for name in NAMES:
        assert _metric(name)._direction == ("up" if name == "top_label_accuracy" else "down")
    labels, probs, logits = _data(rng, n=64)
    model = keras.Sequential([keras.Input((K,)), keras.layers.Dense(K)])
    model.compile(loss="sparse_categorical_crossentropy", metrics=[metrics.ExpectedCalibrationError(from_logits=True)])
    stop = keras.callbacks.EarlyStopping(monitor="val_ece", mode="auto", patience=100)
    model.fit(logits, labels, validation_data=(logits, labels), epochs=1, verbose=0, callbacks=[stop])
    assert stop.monitor_op is ops.less


def test_mirrored_strategy_two_devices_equals_reference(rng, mirrored_strategy):
    labels, probs, logits = _data(rng, n=300)
    assert mirrored_strategy.num_replicas_in_sync == 2
    with mirrored_strategy.scope():
        model = keras.Sequential([keras.Input((K,)), keras.layers.Identity()])
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[_metric(n, from_logits=True) for n in NAMES],
        )
    ds = tf.data.Dataset.from_tensor_slices((logits, labels)).batch(32)
    got = model.evaluate(ds, verbose=0, return_dict=True)
    probs64 = reference.softmax(logits)
    for name in NAMES:
        np.testing.assert_allclose(got[name], _reference(name, probs64, labels), rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "policy, jit_compile",
    [
        # each XLA compile costs ~3 s: bfloat16 under XLA by default, the others with -m slow (issue 22: <= 5 min)
        pytest.param("float32", True, marks=pytest.mark.slow),
        ("mixed_float16", False),
        pytest.param("mixed_float16", True, marks=pytest.mark.slow),
        ("mixed_bfloat16", False),
        ("mixed_bfloat16", True),
    ],
)
def test_jit_compile_and_mixed_precision_equal_reference(rng, policy, jit_compile):
    # half-precision logits are read in float32: the values are those of the rounded logits
    labels, _, logits = _data(rng, n=300)
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = keras.Sequential([keras.Input((K,)), keras.layers.Identity()])
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[_metric(n, from_logits=True) for n in NAMES],
            jit_compile=jit_compile,
        )
        got = model.evaluate(logits, labels, batch_size=32, verbose=0, return_dict=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    compute_dtype = "float32" if policy == "float32" else policy.split("_")[1]
    rounded = ops.convert_to_numpy(ops.cast(ops.cast(logits, compute_dtype), "float64"))
    for name in NAMES:
        want = _reference(name, reference.softmax(rounded), labels)
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-6, err_msg=name)


class TestSerialization:
    @pytest.mark.parametrize("name", NAMES)
    def test_config_round_trip(self, name):
        metric = _metric(name, from_logits=True, n_bins=10)
        config = metric.get_config()
        assert type(metric).from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
        assert type(restored) is type(metric) and restored.get_config() == config

    def test_keras_file_round_trip(self, tmp_path, rng):
        labels, _, logits = _data(rng, n=64)
        model = keras.Sequential([keras.Input((K,)), keras.layers.Dense(K)])
        model.compile(
            optimizer="sgd",
            loss="sparse_categorical_crossentropy",
            metrics=metrics.calibration_metrics(K, from_logits=True),
        )
        before = model.evaluate(logits, labels, verbose=0, return_dict=True)
        model.save(tmp_path / "m.keras")
        loaded = keras.saving.load_model(tmp_path / "m.keras")
        after = loaded.evaluate(logits, labels, verbose=0, return_dict=True)
        assert before.keys() == after.keys()
        for key in before:
            np.testing.assert_allclose(after[key], before[key], rtol=1e-6)

    def test_accuracy_does_not_shadow_keras_and_old_files_still_load(self):
        assert not hasattr(metrics, "Accuracy")
        saved_before_the_rename = {
            "module": None,
            "class_name": "keras_ils>Accuracy",
            "config": {"name": "accuracy", "dtype": "float32", "from_logits": True},
            "registered_name": "keras_ils>Accuracy",
        }
        restored = keras.saving.deserialize_keras_object(saved_before_the_rename)
        assert type(restored) is metrics.TopLabelAccuracy and restored.name == "accuracy"


class TestBadInput:
    def test_num_bins(self):
        with pytest.raises(ValueError, match="Invalid value for argument `num_bins`"):
            metrics.ExpectedCalibrationError(num_bins=0)

    @pytest.mark.parametrize("num_classes", [1, 2.5, None])
    def test_num_classes(self, num_classes):
        with pytest.raises(ValueError, match="Invalid value for argument `num_classes`"):
            metrics.ClasswiseExpectedCalibrationError(num_classes)

    def test_class_count_mismatch(self, rng):
        labels, probs, _ = _data(rng)
        with pytest.raises(ValueError, match="num_classes=3"):
            metrics.ClasswiseExpectedCalibrationError(3).update_state(labels, probs)

    def test_labels_out_of_range(self, rng):
        labels, probs, _ = _data(rng)
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            metrics.ExpectedCalibrationError().update_state(labels + K, probs)


class TestNonProbabilities:
    @pytest.mark.parametrize("name", ["ece", "mce", "cwece", "class_conditional_ece", "nll", "brier"])
    def test_logits_passed_as_probabilities_are_refused(self, rng, name):
        labels, _, logits = _data(rng, n=50)
        with pytest.raises(ValueError, match="Invalid value for argument `y_pred`.*from_logits=True"):
            _metric(name).update_state(labels, logits)

    @pytest.mark.parametrize("rows", [[[0.5, 0.4, 0.3]], [[0.2, 0.2, 0.2]], [[1.2, -0.1, -0.1]]])
    def test_rows_off_the_simplex_are_refused(self, rows):
        with pytest.raises(ValueError, match="row sums"):
            metrics.ExpectedCalibrationError().update_state([0], np.array(rows))

    def test_rounded_probabilities_pass(self, rng):
        labels, probs, _ = _data(rng, n=200)
        half = ops.convert_to_numpy(ops.cast(ops.cast(probs, "bfloat16"), "float32"))
        metric = metrics.ExpectedCalibrationError()
        metric.update_state(labels, half)
        np.testing.assert_allclose(float(metric.result()), reference.ece(half.astype(np.float64), labels), atol=1e-5)

    def test_refused_at_the_end_of_a_compiled_evaluate(self, rng):
        """Counted in the compiled step, raised by `result()` when Keras reads it on the host."""
        labels, _, logits = _data(rng, n=64)
        model = keras.Sequential([keras.Input((K,)), keras.layers.Identity()])
        model.compile(loss="sparse_categorical_crossentropy", metrics=[metrics.ExpectedCalibrationError()])
        with pytest.raises(ValueError, match="expects probabilities") as info:
            model.evaluate(logits, labels, verbose=0, batch_size=16)
        bad = np.sum((logits < -0.01).any(1) | (logits > 1.01).any(1) | (np.abs(logits.sum(1) - 1) > 0.01))
        assert f"Received: {bad} such rows in the batches read by the metric `ece`" in str(info.value)

    def test_accuracy_reads_logits_either_way(self, rng):
        labels, _, logits = _data(rng, n=50)
        metric = metrics.TopLabelAccuracy()
        metric.update_state(labels, logits)
        np.testing.assert_allclose(float(metric.result()), np.mean(logits.argmax(1) == labels))
