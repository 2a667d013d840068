import numpy as np
import pytest
import tensorflow as tf

from keras_ils import ILSLoss, data, teacher_targets
from keras_ils.teacher import TeacherLogits


def _source(n=40, k=4, seed=0):
    rng = np.random.default_rng(seed)
    x = np.arange(n, dtype="float32")[:, None] * np.ones((1, 3), "float32")  # x identifies the example
    y = rng.integers(0, k, n).astype("int32")
    logits = rng.normal(size=(n, k)).astype("float32")
    return x, y, logits


def test_each_example_keeps_its_own_row_through_shuffle_cache_batch():
    x, y, logits = _source()
    ds = data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), TeacherLogits(logits, y, {}))
    ds = ds.cache().shuffle(40, seed=7).batch(6).prefetch(tf.data.AUTOTUNE)
    seen = 0
    for _ in range(2):
        for xb, yb in ds:
            index = xb.numpy()[:, 0].astype(int)
            np.testing.assert_array_equal(yb.numpy()[:, :4], np.eye(4)[y[index]])
            np.testing.assert_allclose(yb.numpy()[:, 4:], logits[index])
            seen += len(index)
    assert seen == 80


def test_direct_call_map_and_batched_map_agree():
    x, y, logits = _source(n=12)
    direct = teacher_targets(y, logits).numpy()
    mapped = np.stack(
        [t.numpy() for _, t in data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), logits)]
    )
    np.testing.assert_array_equal(mapped, direct)


def test_chunked_attach_across_chunks_keeps_order_and_cardinality():
    x, y, logits = _source(n=600)  # more examples than one chunk of the vectorised attach
    ds = data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), TeacherLogits(logits, y, {}))
    assert int(ds.cardinality()) == 600 and ds.element_spec[1].shape == (8,)
    xs, ts = zip(*[(a.numpy(), t.numpy()) for a, t in ds], strict=True)
    np.testing.assert_array_equal(np.stack(xs), x)
    np.testing.assert_array_equal(np.stack(ts), teacher_targets(y, logits).numpy())


def test_examples_of_different_shapes():
    lengths = [3, 1, 4, 1, 5]
    signature = (tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32))
    source = tf.data.Dataset.from_generator(
        lambda: ((np.full(n, i, "float32"), np.int32(i % 2)) for i, n in enumerate(lengths)), output_signature=signature
    )
    logits = np.arange(10, dtype="float32").reshape(5, 2)
    out = list(data.with_teacher_targets(source, logits))
    assert [len(a) for a, _ in out] == lengths
    np.testing.assert_array_equal(np.stack([t for _, t in out]), teacher_targets([0, 1, 0, 1, 0], logits).numpy())


def test_tfds_dict_form():
    x, y, logits = _source(n=8)
    ds = tf.data.Dataset.from_tensor_slices({"image": x, "label": y.astype("int64"), "id": np.arange(8)})
    out = list(data.with_teacher_targets(ds, logits))
    np.testing.assert_array_equal(np.stack([t for _, t in out])[:, :4], np.eye(4)[y])
    hard = list(data.with_hard_labels(ds, num_classes=4))
    assert [int(label) for _, label in hard] == y.tolist() and hard[0][1].dtype == tf.int32


def test_reordered_source_fails_loudly():
    x, y, logits = _source()
    shuffled_first = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=3)
    ds = data.with_teacher_targets(shuffled_first, TeacherLogits(logits, y, {}))
    with pytest.raises(tf.errors.InvalidArgumentError, match="order changed"):
        list(ds)


def test_labels_out_of_range_fail():
    x, y, logits = _source(k=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid value for argument `labels`"):
        list(data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y + 4)), logits))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid value for argument `labels`"):
        list(data.with_hard_labels(tf.data.Dataset.from_tensor_slices((x, y + 4)), num_classes=4))


def test_mismatched_count_and_batched_input():
    x, y, logits = _source()
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    with pytest.raises(ValueError, match="40 examples but `teacher_logits` has 39 rows"):
        data.with_teacher_targets(ds, logits[:-1])
    with pytest.raises(ValueError, match="before `.batch"):
        data.with_teacher_targets(ds.batch(4), logits)


def test_dataset_without_labels():
    with pytest.raises(ValueError, match="without labels"):
        data.as_pairs(tf.data.Dataset.from_tensor_slices(np.zeros((3, 2))))
    with pytest.raises(ValueError, match="without labels"):
        data.as_pairs(tf.data.Dataset.from_tensor_slices({"image": np.zeros((3, 2))}))


def test_fit_on_attached_targets_under_mirrored_strategy(mirrored_strategy):
    import keras

    x, y, logits = _source(n=64)
    strategy = mirrored_strategy
    train = data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), logits).shuffle(64).batch(16)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss=ILSLoss(method="ils"))
    history = model.fit(train, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    distributed = strategy.experimental_distribute_dataset(train)
    per_replica = next(iter(distributed))[1]
    shapes = [t.shape[-1] for t in strategy.experimental_local_results(per_replica)]
    assert shapes == [8, 8]
