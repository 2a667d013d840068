import numpy as np

from keras_ils.comparison.engine import slot_pool, stacked_mlps


def _pool(num_models, size, n=4):
    """A `SlotPool` whose model `m` has every feature equal to `m`, so its data shows which model a slot holds."""
    seeds = np.arange(num_models, dtype=np.int64)
    x = np.broadcast_to(np.arange(num_models, dtype=np.float32)[:, None, None], (num_models, n, 2)).copy()
    targets = np.full((num_models, n, 3), 1 / 3, np.float32)
    y_val = np.zeros((num_models, n), np.int32)
    flat = [w for pair in stacked_mlps.initial_weights(seeds, 2, 3, hidden_layers=1, units=4) for w in pair]
    return slot_pool.SlotPool(x, targets, x.copy(), y_val, seeds, flat, size)


def _slot_features(pool):
    return pool.state["x"].numpy()[:, 0, 0].tolist()


class TestSlotPool:
    """`train_mlps` pool: models enter in order, freed slots refill, the pool shrinks by powers of two."""

    def test_fill_takes_model_0_first_and_refills_freed_slots(self):
        pool = _pool(num_models=6, size=4)
        pool.fill()
        assert pool.slot_model.tolist() == [0, 1, 2, 3] and pool.queue == [5, 4]
        assert _slot_features(pool) == [0, 1, 2, 3]
        pool.slot_epoch[:] = 7
        pool.finish(np.array([1, 3]))
        assert pool.slot_model.tolist() == [0, -1, 2, -1]
        pool.fill()
        assert pool.slot_model.tolist() == [0, 4, 2, 5] and pool.queue == []
        assert pool.slot_epoch.tolist() == [7, 0, 7, 0]  # refilled slots start at epoch 0
        assert _slot_features(pool) == [0, 4, 2, 5]
        np.testing.assert_array_equal(pool.state["params"][0].numpy()[1], pool.flat_init[0][4])  # initial weights
        assert pool.state["steps"].numpy()[1] == 0 and pool.state["best_loss"].numpy()[1] == np.inf

    def test_shrinks_by_powers_of_two_busy_slots_first_once_the_queue_is_empty(self):
        pool = _pool(num_models=65, size=64)
        pool.fill()
        pool.finish(np.arange(1, 64))  # 1 busy of 64, but model 64 still waits: no shrink
        pool.shrink()
        assert len(pool.slot_model) == 64
        pool.fill()  # model 64 takes slot 1; 2 busy of 64: at most a quarter, cut to MIN_SLOTS
        pool.shrink()
        assert slot_pool.MIN_SLOTS == 16 and len(pool.slot_model) == 16
        assert pool.slot_model.tolist()[:2] == [0, 64] and set(pool.slot_model.tolist()[2:]) == {-1}
        assert _slot_features(pool)[:2] == [0, 64]
        assert all(w.shape[0] == 16 for w in pool.state["params"] + pool.state["best"])
        pool.finish(np.array([0]))  # 1 busy of 16: never below MIN_SLOTS
        pool.shrink()
        assert len(pool.slot_model) == 16 and pool.slot_model[1] == 64

    def test_shrinks_only_when_a_quarter_or_fewer_slots_are_busy(self):
        pool = _pool(num_models=128, size=128)
        pool.fill()
        pool.finish(np.arange(0, 128, 2))  # 64 busy of 128: no shrink (a compile costs more than it saves)
        pool.shrink()
        assert len(pool.slot_model) == 128
        pool.finish(np.arange(1, 128, 4))  # 32 busy: a quarter, cut to 32, busy slots first in their order
        pool.shrink()
        assert pool.slot_model.tolist() == list(range(3, 128, 4))
        assert _slot_features(pool) == list(range(3, 128, 4))
        pool.finish(np.arange(0, 32, 4))  # 24 busy of 32: more than a quarter
        pool.shrink()
        assert len(pool.slot_model) == 32

    def test_shrink_keeps_idle_slots_when_busy_count_is_not_a_power_of_two(self):
        pool = _pool(num_models=128, size=128)
        pool.fill()
        pool.finish(np.setdiff1d(np.arange(128), [5, 50, 70, 99, 100, 101, 120, 127, 3, 9, 11, 13, 15, 17, 19, 21, 23]))
        pool.shrink()  # 17 busy of 128: the next power of two is 32
        assert pool.slot_model.tolist()[:17] == [3, 5, 9, 11, 13, 15, 17, 19, 21, 23, 50, 70, 99, 100, 101, 120, 127]
        assert pool.slot_model.tolist()[17:] == [-1] * 15

    def test_finish_returns_the_best_weights_and_losses_and_frees_the_slots(self):
        pool = _pool(num_models=3, size=3)
        pool.fill()
        best, best_loss = pool.finish(np.array([2, 0]))
        np.testing.assert_array_equal(best[0], pool.flat_init[0][[2, 0]])  # not trained: the initial weights
        assert best_loss.tolist() == [np.inf, np.inf]
        assert pool.slot_model.tolist() == [-1, 1, -1]
