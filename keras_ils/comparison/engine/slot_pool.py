"""The models that train side by side: a fixed pool of slots, refilled from a queue, shrunk by powers of two."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_ils.comparison.engine.stacked_mlps import epoch_order

MIN_SLOTS = 16  # the smallest pool `SlotPool.shrink` makes


class TrainedEpoch(NamedTuple):
    """What `SlotPool.run_epoch` reports about the slots that held a model, one entry per slot."""

    slots: np.ndarray
    models: np.ndarray
    epoch: np.ndarray  # the epoch just trained (0-based)
    wait: np.ndarray  # epochs since the best validation loss
    val_loss: np.ndarray


class SlotPool:
    """The models that train side by side: each slot's TensorFlow state, and which model each slot holds.

    `slot_model[s]` is the model in slot `s` (`-1`: none) and `slot_epoch[s]`
    the epochs it has trained. Models wait in a queue and enter in order,
    model 0 first: `fill` moves waiting models into empty slots (fresh Adam
    state, initial weights); `finish` hands back finished models' best weights
    and frees their slots; once the queue is empty and at most a quarter of the
    slots hold a model, `shrink` cuts the pool to the next power of two (at
    least `MIN_SLOTS`; the busy slots first, in their order), so few graph
    shapes are ever compiled.
    Slots without a model keep computing; their results are never read.
    `loss_data` are further float32 arrays, one row per model, that enter
    each slot with its model: `loss_parameters` `[models, P]` (the loss
    branches' parameters, `stacked_losses.stack`; `P = 0` when absent) and
    the initial values of the losses' state (`StackedLosses.state`, which
    the epoch updates).
    """

    def __init__(self, x, targets, x_val, y_val, seeds, flat_init, size, loss_data=None):
        loss_data = {"loss_parameters": np.zeros((len(seeds), 0), np.float32), **(loss_data or {})}
        self.data = dict(x=x, targets=targets, x_val=x_val, y_val=y_val, **loss_data)
        self.seeds, self.flat_init = seeds, flat_init
        self.num_models = len(seeds)
        self.queue = list(range(self.num_models))[::-1]  # pop() from the end takes model 0 first
        self.slot_model = np.full(size, -1, np.int64)
        self.slot_epoch = np.zeros(size, np.int64)
        self._orders = {}

        def stacked():
            return [tf.zeros((size,) + w.shape[1:]) for w in flat_init]

        self.state = dict(
            params=stacked(),
            moments=stacked(),
            velocities=stacked(),
            best=stacked(),
            steps=tf.zeros((size,)),
            best_loss=tf.fill((size,), np.float32(np.inf)),
            wait=tf.zeros((size,), tf.int32),
            x=tf.zeros((size,) + x.shape[1:]),
            targets=tf.zeros((size,) + targets.shape[1:]),
            x_val=tf.zeros((size,) + x_val.shape[1:]),
            y_val=tf.zeros((size,) + y_val.shape[1:], tf.int32),
            **{name: tf.zeros((size,) + np.shape(values)[1:]) for name, values in loss_data.items()},
        )

    @property
    def active(self) -> np.ndarray:
        """`[slots]` whether each slot holds a model."""
        return self.slot_model >= 0

    def fill(self) -> None:
        """Moves the next waiting models (model 0 first) into the empty slots, lowest slot first."""
        empty = np.flatnonzero(self.slot_model < 0)
        if not (len(empty) and self.queue):
            return
        slots = empty[: len(self.queue)]
        models = np.array([self.queue.pop() for _ in slots], np.int64)
        self.slot_model[slots], self.slot_epoch[slots] = models, 0
        inits = [w[models] for w in self.flat_init]
        self._scatter("params", slots, inits)
        self._scatter("best", slots, inits)
        self._scatter("moments", slots, [np.zeros_like(w) for w in inits])
        self._scatter("velocities", slots, [np.zeros_like(w) for w in inits])
        self._scatter("steps", slots, np.zeros(len(slots), np.float32))
        self._scatter("best_loss", slots, np.full(len(slots), np.inf, np.float32))
        self._scatter("wait", slots, np.zeros(len(slots), np.int32))
        for name, values in self.data.items():
            if np.size(values):  # no loss parameters: an empty matrix, nothing to scatter
                self._scatter(name, slots, values[models])

    def _scatter(self, name, slots, values):
        index = tf.constant(slots[:, None], tf.int32)
        if isinstance(self.state[name], list):
            self.state[name] = [
                tf.tensor_scatter_nd_update(s, index, v) for s, v in zip(self.state[name], values, strict=True)
            ]
        else:
            self.state[name] = tf.tensor_scatter_nd_update(self.state[name], index, values)

    def shrink(self) -> None:
        """With no model waiting and at most a quarter of the slots busy: the next power of two of slots (at least
        `MIN_SLOTS`), busy ones first.

        Every pool size is a graph shape that XLA compiles anew (seconds), while
        an idle slot costs a model's share of an epoch: shrinking by four or more,
        and never below `MIN_SLOTS` (a small pool's epoch is mostly fixed
        overhead), keeps the compiles few.
        """
        active = self.active
        busy = int(active.sum())
        if self.queue or not 0 < busy <= len(active) // 4:
            return
        new_size = max(1 << int(np.ceil(np.log2(busy))), MIN_SLOTS)
        if new_size >= len(active):
            return
        keep = np.concatenate([np.flatnonzero(active), np.flatnonzero(~active)])[:new_size]
        index = tf.constant(keep, tf.int32)
        for name, value in self.state.items():
            self.state[name] = (
                [tf.gather(v, index) for v in value] if isinstance(value, list) else tf.gather(value, index)
            )
        self.slot_model, self.slot_epoch = self.slot_model[keep], self.slot_epoch[keep]

    def run_epoch(self, epoch_fn) -> TrainedEpoch:
        """Trains every slot one epoch with `epoch_fn` (`epoch.epoch_function`) and counts it for the busy slots."""
        active = self.active
        slots = np.flatnonzero(active)
        trained, val_loss = epoch_fn(self.state, tf.constant(active), tf.constant(self._batch_orders(slots)))
        self.state.update({name: list(v) if isinstance(v, (list, tuple)) else v for name, v in trained.items()})
        wait = self.state["wait"]
        epoch = self.slot_epoch[slots]
        self.slot_epoch[slots] += 1
        return TrainedEpoch(slots, self.slot_model[slots], epoch, wait.numpy()[slots], val_loss.numpy()[slots])

    def _batch_orders(self, slots) -> np.ndarray:
        """`[slots, n]` each busy slot's `epoch_order` for its model's seed and epoch (zeros elsewhere)."""
        n_train = self.data["x"].shape[1]
        order = np.zeros((len(self.slot_model), n_train), np.int32)
        for slot in slots:
            key = (self.seeds[self.slot_model[slot]], self.slot_epoch[slot])
            if key not in self._orders:
                self._orders[key] = epoch_order(key[0], key[1], n_train)
            order[slot] = self._orders[key]
        if len(self._orders) > 100_000:
            self._orders.clear()
        return order

    def finish(self, slots) -> tuple[list, np.ndarray]:
        """Frees `slots`; returns their best weights (one numpy array per stacked weight) and best validation losses."""
        index = tf.constant(slots, tf.int32)
        best = [tf.gather(w, index).numpy() for w in self.state["best"]]
        best_loss = self.state["best_loss"].numpy()[slots]
        self.slot_model[slots] = -1
        return best, best_loss


__all__ = ["MIN_SLOTS", "SlotPool", "TrainedEpoch"]
