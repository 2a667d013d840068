import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import ILSLoss, data, teacher_targets
from keras_ils.teacher import OnlineTeacher, StaleCacheError, cache_teacher_logits, compute_teacher_logits


def _teacher(seed=0, k=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(k)])


def _data(n=50, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)).astype("float32"), rng.integers(0, 3, n).astype("int32")


class TestComputeTeacherLogits:
    def test_one_pass_equals_predict_over_temperature(self):
        teacher, (x, y) = _teacher(), _data()
        computed = compute_teacher_logits(
            teacher, tf.data.Dataset.from_tensor_slices((x, y)), temperature=2.0, batch_size=16
        )
        np.testing.assert_allclose(computed.logits, teacher.predict(x, verbose=0) / 2.0, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(computed.labels, y)
        assert computed.fingerprint["count"] == 50 and computed.fingerprint["num_classes"] == 3

    def test_cache_is_written_then_reused_without_running_the_teacher(self, tmp_path, monkeypatch):
        teacher, (x, y) = _teacher(), _data()
        path = str(tmp_path / "cache" / "teacher.npz")
        first = compute_teacher_logits(teacher, (x, y), cache_path=path)
        assert os.listdir(tmp_path / "cache") == ["teacher.npz"]
        calls = []
        monkeypatch.setattr(teacher, "predict_on_batch", lambda *a: calls.append(1))
        second = compute_teacher_logits(teacher, (x, y), cache_path=path)
        assert calls == []
        np.testing.assert_array_equal(second.logits, first.logits)

    def test_stale_cache_raises(self, tmp_path):
        teacher, (x, y) = _teacher(), _data()
        path = str(tmp_path / "teacher.npz")
        compute_teacher_logits(teacher, (x, y), cache_path=path)
        with pytest.raises(StaleCacheError, match="labels_sha256"):
            compute_teacher_logits(teacher, (x, np.roll(y, 1)), cache_path=path)
        with pytest.raises(StaleCacheError, match="count"):
            compute_teacher_logits(teacher, (x[:40], y[:40]), cache_path=path)
        with pytest.raises(StaleCacheError, match="teacher_sha256"):
            compute_teacher_logits(_teacher(seed=1), (x, y), cache_path=path)
        with pytest.raises(StaleCacheError, match="teacher_sha256"):
            compute_teacher_logits(teacher, (x, y), temperature=1.5, cache_path=path)
        with pytest.raises(StaleCacheError, match="data_sha256"):
            compute_teacher_logits(teacher, (10 * x, y), cache_path=path)
        assert issubclass(StaleCacheError, ValueError)

    @pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not a zip", None])
    def test_a_file_that_is_no_cache_raises(self, tmp_path, content):
        teacher, (x, y) = _teacher(), _data()
        path = tmp_path / "teacher.npz"
        if content is None:
            np.savez(path, something=np.zeros(3))
        else:
            path.write_bytes(content)
        with pytest.raises(StaleCacheError, match="not a readable teacher-logits cache"):
            compute_teacher_logits(teacher, (x, y), cache_path=str(path))

    def test_cache_file_gets_ordinary_permissions(self, tmp_path):
        teacher, (x, y) = _teacher(), _data()
        old = os.umask(0o022)
        try:
            compute_teacher_logits(teacher, (x, y), cache_path=str(tmp_path / "teacher.npz"))
        finally:
            os.umask(old)
        assert oct((tmp_path / "teacher.npz").stat().st_mode & 0o777) == oct(0o644)

    def test_a_crash_while_writing_leaves_nothing(self, tmp_path, monkeypatch):
        teacher, (x, y) = _teacher(), _data()

        def crash(file, **arrays):
            file.write(b"PK\x03\x04 half a zip")
            raise KeyboardInterrupt

        monkeypatch.setattr(np, "savez", crash)
        with pytest.raises(KeyboardInterrupt):
            compute_teacher_logits(teacher, (x, y), cache_path=str(tmp_path / "teacher.npz"))
        assert os.listdir(tmp_path) == []

    def test_bad_input(self):
        teacher, (x, y) = _teacher(), _data()
        with pytest.raises(ValueError, match="Invalid value for argument `temperature`"):
            compute_teacher_logits(teacher, (x, y), temperature=0)
        with pytest.raises(ValueError, match="Invalid value for argument `labels`"):
            compute_teacher_logits(teacher, (x, y + 3))
        with pytest.raises(ValueError, match="unbatched"):
            compute_teacher_logits(teacher, tf.data.Dataset.from_tensor_slices((x, y)).batch(4))


class TestCacheTeacherLogits:
    """Logits computed elsewhere (the vectorised engine's) written as `compute_teacher_logits`' cache."""

    def test_the_cache_is_the_one_compute_teacher_logits_writes_and_reads(self, tmp_path, monkeypatch):
        teacher, (x, y) = _teacher(), _data()
        logits = teacher.predict(x, verbose=0) / 2.0
        path = str(tmp_path / "given.npz")
        calls = []
        monkeypatch.setattr(teacher, "predict_on_batch", lambda *a: calls.append(1))
        written = cache_teacher_logits(teacher, (x, y), logits, temperature=2.0, cache_path=path)
        assert calls == []  # the teacher is not run
        monkeypatch.undo()
        computed = compute_teacher_logits(teacher, (x, y), temperature=2.0, cache_path=str(tmp_path / "run.npz"))
        assert written.fingerprint == computed.fingerprint
        np.testing.assert_allclose(written.logits, computed.logits, rtol=1e-5, atol=1e-6)
        read = compute_teacher_logits(teacher, (x, y), temperature=2.0, cache_path=path)  # a hit, not stale
        np.testing.assert_array_equal(read.logits, logits.astype("float32"))
        np.testing.assert_array_equal(read.labels, y)

    def test_an_existing_cache_of_another_teacher_is_stale(self, tmp_path):
        teacher, (x, y) = _teacher(), _data()
        path = str(tmp_path / "teacher.npz")
        compute_teacher_logits(_teacher(seed=1), (x, y), cache_path=path)
        with pytest.raises(StaleCacheError, match="differs in: teacher_sha256"):
            cache_teacher_logits(teacher, (x, y), np.zeros((50, 3)), cache_path=path)

    def test_logits_that_do_not_fit_the_data_are_refused(self, tmp_path):
        teacher, (x, y) = _teacher(), _data()
        with pytest.raises(ValueError, match=r"`logits` must have shape \[N, K\] = \(50, 3\).*\(49, 3\)"):
            cache_teacher_logits(teacher, (x, y), np.zeros((49, 3)), cache_path=str(tmp_path / "t.npz"))
        assert not (tmp_path / "t.npz").exists()


class TestOnlineTeacher:
    def test_same_loss_as_cached_path_without_augmentation(self):
        teacher, (x, y) = _teacher(), _data(n=32)
        loss = ILSLoss(method="ils", p1=0.8, p2=2.0, temperature=2.0)
        online = OnlineTeacher(_teacher(seed=5), teacher, teacher_temperature=1.7)
        online.compile(optimizer="sgd", loss=loss)
        y_pred = online(x)
        got = online.compute_loss(x=x, y=y, y_pred=y_pred, training=True)
        cached = compute_teacher_logits(teacher, (x, y), temperature=1.7)
        want = loss(teacher_targets(y, cached.logits), y_pred)
        np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
        # evaluation keeps hard labels: plain cross-entropy
        hard = online.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
        want_hard = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, y_pred)
        np.testing.assert_allclose(float(hard), float(want_hard), rtol=1e-5)

    def test_training_matches_cached_training(self):
        teacher, (x, y) = _teacher(), _data(n=64)
        cached = compute_teacher_logits(teacher, (x, y))
        loss = dict(method="ils", p1=0.8, p2=2.0)
        a = _teacher(seed=9)
        a.compile(optimizer=keras.optimizers.SGD(0.1), loss=ILSLoss(**loss))
        a.fit(x, teacher_targets(y, cached.logits), batch_size=16, epochs=2, shuffle=False, verbose=0)
        b = OnlineTeacher(_teacher(seed=9), teacher)
        b.compile(optimizer=keras.optimizers.SGD(0.1), loss=ILSLoss(**loss))
        b.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        for wa, wb in zip(a.get_weights(), b.student.get_weights(), strict=True):
            np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-6)
        for before, after in zip(_teacher().get_weights(), teacher.get_weights(), strict=True):
            np.testing.assert_array_equal(before, after)  # the teacher stays frozen

    def test_teacher_sees_the_augmented_batch(self):
        teacher, (x, y) = _teacher(), _data(n=16)
        flip = lambda xb, yb: (-xb, yb)  # noqa: E731  # any augmentation in the input pipeline
        ds = tf.data.Dataset.from_tensor_slices((x, y)).map(flip).batch(16)
        online = OnlineTeacher(_teacher(seed=2), teacher)
        online.compile(optimizer="sgd", loss=ILSLoss(method="ils2", epsilon=0.2))
        xb, yb = next(iter(ds))
        got = online.compute_loss(x=xb, y=yb, y_pred=online(xb), training=True)
        want = ILSLoss(method="ils2", epsilon=0.2)(teacher_targets(y, teacher.predict(-x, verbose=0)), online(-x))
        np.testing.assert_allclose(float(got), float(want), rtol=1e-5)

    def test_label_forms_and_out_of_range_labels(self):
        teacher, (x, y) = _teacher(), _data(n=32)
        online = OnlineTeacher(_teacher(seed=4), teacher)
        online.compile(optimizer="sgd", loss=ILSLoss(method="ils", p1=0.8, p2=2.0))
        y_pred = online(x)
        want = ILSLoss(method="ils", p1=0.8, p2=2.0)(teacher_targets(y, teacher.predict(x, verbose=0)), y_pred)
        for labels in (y, y[:, None], y.astype("int64"), y.astype("float32")):
            got = online.compute_loss(x=x, y=labels, y_pred=y_pred, training=True)
            np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
        with pytest.raises(ValueError, match="Invalid value for argument `labels`") as info:  # its own metric's
            online.fit(x, y + 3, epochs=1, verbose=0)
        assert "read by the metric `bad_labels`" in str(info.value)
        with pytest.raises(ValueError, match="float labels must be whole numbers"):
            online.fit(x, y + 0.5, epochs=1, verbose=0)

    def test_keras_file_round_trip(self, tmp_path):
        teacher, (x, y) = _teacher(), _data(n=16)
        online = OnlineTeacher(_teacher(seed=3), teacher, teacher_temperature=1.3)
        online.compile(optimizer="sgd", loss=ILSLoss(method="ils"))
        online.fit(x, y, epochs=1, verbose=0)
        online.save(tmp_path / "online.keras")
        loaded = keras.saving.load_model(tmp_path / "online.keras")
        assert isinstance(loaded, OnlineTeacher) and loaded.teacher_temperature == 1.3
        np.testing.assert_allclose(loaded.predict(x, verbose=0), online.predict(x, verbose=0), rtol=1e-6)
        np.testing.assert_allclose(loaded.teacher.predict(x, verbose=0), teacher.predict(x, verbose=0), rtol=1e-6)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="same number of classes"):
            OnlineTeacher(_teacher(k=4), _teacher(k=3))
        with pytest.raises(ValueError, match="Invalid value for argument `teacher_temperature`"):
            OnlineTeacher(_teacher(), _teacher(), teacher_temperature=0.0)


def test_pipeline_shares_cached_rows_with_data_maps():
    teacher, (x, y) = _teacher(), _data()
    cached = compute_teacher_logits(teacher, (x, y))
    attached = data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), cached)
    rows = np.stack([t.numpy()[3:] for _, t in attached])
    np.testing.assert_allclose(rows, teacher.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


class TestCacheDataCheckedEarly:
    """A cache of other data is refused before any teacher trains (issue 23 item 5)."""

    def test_same_data_passes_other_data_is_refused(self, tmp_path):
        from keras_ils import teacher as teacher_module

        x = np.random.default_rng(0).normal(size=(20, 2)).astype("float32")
        y = np.arange(20) % 3
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
        path = str(tmp_path / "cache.npz")
        compute_teacher_logits(teacher, ds, cache_path=path)
        teacher_module.check_cache_data(path, ds, 3)  # the same data: no error
        other = tf.data.Dataset.from_tensor_slices((x + 1.0, y))
        with pytest.raises(StaleCacheError, match="data_sha256"):
            teacher_module.check_cache_data(path, other, 3)
        with pytest.raises(StaleCacheError, match="num_classes"):
            teacher_module.check_cache_data(path, ds, 4)
