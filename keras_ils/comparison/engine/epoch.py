"""One epoch of every slot as one compiled TensorFlow function: the mini-batch steps, Adam, validation, best weights.

The functions of `keras_ils.comparison.engine.vectorised.train_mlps`; see
that module for the recipe they reproduce.
"""

from __future__ import annotations

import tensorflow as tf

from keras_ils.comparison.engine import stacked_losses
from keras_ils.comparison.engine.stacked_mlps import forward, pairs

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


_EPOCH_FUNCTIONS = {}


@tf.function(jit_compile=True, reduce_retracing=True)
def _adam(flat, grads, moments, velocities, steps, learning_rate):
    """Keras' Adam update of every stacked weight (one step counter per model); XLA fuses it."""
    alpha = learning_rate * tf.sqrt(1.0 - BETA_2**steps) / (1.0 - BETA_1**steps)
    new_flat, new_m, new_v = [], [], []
    for w, g, m, v in zip(flat, grads, moments, velocities, strict=True):
        m2 = m + (g - m) * (1.0 - BETA_1)
        v2 = v + (tf.square(g) - v) * (1.0 - BETA_2)
        new_flat.append(w - tf.reshape(alpha, (-1,) + (1,) * (len(w.shape) - 1)) * m2 / (tf.sqrt(v2) + EPSILON))
        new_m.append(m2)
        new_v.append(v2)
    return new_flat, new_m, new_v


@tf.function(jit_compile=True, reduce_retracing=True)
def _keep_best(flat, best, best_loss, val_loss, wait, active):
    """EarlyStopping's bookkeeping: a better validation loss stores the weights and resets the wait."""
    improved = active & (val_loss < best_loss)
    best = [
        tf.where(tf.reshape(improved, (-1,) + (1,) * (len(w.shape) - 1)), w, b) for w, b in zip(flat, best, strict=True)
    ]
    best_loss = tf.where(improved, val_loss, best_loss)
    wait = tf.where(active, tf.where(improved, 0, wait + 1), wait)
    return best, best_loss, wait


def _batch_mean_weights(n_val, batch_size):
    """Per-point weights `[n_val]` that make a weighted sum the mean of per-batch means over batches of `batch_size`."""
    n_val = tf.cast(n_val, tf.int32)
    batch = tf.range(n_val) // batch_size
    num_batches = (n_val + batch_size - 1) // batch_size
    size = tf.minimum(batch_size, n_val - batch * batch_size)
    return 1.0 / tf.cast(num_batches * size, tf.float32)


def _step_function(branches, learning_rate, weight_decay):
    """One mini-batch step of every slot: `(weights, Adam's moments, steps, the losses' statistics) -> the same,
    updated`."""

    def step(flat, moments, velocities, steps, statistics, data, rows):
        x, targets, parameters, state = data
        x_batch = tf.gather(x, rows, batch_dims=1)
        t_batch = tf.gather(targets, rows, batch_dims=1)
        with tf.GradientTape() as tape:
            tape.watch(flat)
            logits = forward(pairs(flat), x_batch)
            loss = tf.reduce_sum(stacked_losses.batch_losses(t_batch, logits, parameters, state, branches))
        grads = tape.gradient(loss, flat)
        if weight_decay:
            grads = [g + weight_decay * w for g, w in zip(grads, flat, strict=True)]
        steps = steps + 1.0
        flat, moments, velocities = _adam(flat, grads, moments, velocities, steps, learning_rate)
        batch = stacked_losses.statistics(t_batch, logits, branches)
        statistics = [
            [s + b for s, b in zip(old, new, strict=True)] for old, new in zip(statistics, batch, strict=True)
        ]
        return flat, moments, velocities, steps, statistics

    return step


def _validation_loss(flat, state, validation_loss, batch_size):
    """`[slots]` the hard-label validation cross-entropy: the mean, or the mean of per-batch means."""
    val_logits = forward(pairs(flat), state["x_val"])
    val_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=state["y_val"], logits=val_logits)
    if validation_loss == "batch_mean":
        return tf.reduce_sum(val_ce * _batch_mean_weights(tf.shape(val_ce)[1], batch_size), axis=-1)
    return tf.reduce_mean(val_ce, axis=-1)


def epoch_function(
    n_train, batch_size, learning_rate, jit_compile, weight_decay=0.0, validation_loss="mean", branches=None
):
    """One epoch of every slot: the mini-batch steps, then validation, best-weights and patience bookkeeping.

    Slots that hold no model, or a finished one, keep computing (their
    results are never read), so nothing is masked in the hot loop. With
    `jit_compile=False` the forward and backward passes run as TensorFlow ops
    (oneDNN's batched matrix products, where TensorFlow uses oneDNN) and the
    elementwise Adam update and the bookkeeping are XLA-fused;
    `jit_compile=True` compiles the whole epoch with XLA.
    `weight_decay` adds `weight_decay * w` to every gradient before Adam
    (coupled L2, as `torch.optim.Adam(weight_decay=...)`);
    `validation_loss="batch_mean"` averages per-batch means over validation
    batches of `batch_size` instead of all points at once. `branches` are
    the training loss's (`stacked_losses.stack`; `None`: cross-entropy
    against the targets), their per-slot parameters read from the state's
    `loss_parameters`; a branch's `EpochState` arguments are in the state
    too, updated at the epoch's end from its statistics summed over the steps.

    The function is called as `epoch(state, active, order)`: `state` is
    `SlotPool.state` (weights, Adam's moments and steps, the best weights and
    losses, the wait, and each slot's data), `active` `[slots]` which slots
    hold a model, `order` `[slots, n_train]` each slot's batch order. It
    returns `(the trained entries of state, validation loss [slots])`.
    Functions are cached per setting, so a setting compiles once.
    """
    branches = stacked_losses.stack(None, 1).branches if branches is None else tuple(branches)
    key = (n_train, batch_size, float(learning_rate), bool(jit_compile), float(weight_decay), validation_loss, branches)
    if key in _EPOCH_FUNCTIONS:
        return _EPOCH_FUNCTIONS[key]
    full_batches, last_batch = divmod(n_train, batch_size)
    step = _step_function(branches, learning_rate, weight_decay)

    def epoch(state, active, order):
        """`state` is `SlotPool.state`; returns its trained entries and the validation loss of every slot."""
        flat, moments, velocities, steps = state["params"], state["moments"], state["velocities"], state["steps"]
        loss_state = {name: value for name, value in state.items() if name.startswith("loss_state_")}
        data = (state["x"], state["targets"], state["loss_parameters"], loss_state)
        statistics = _zero_statistics(state, flat, branches)

        # the full mini-batches in a loop (one compiled body, whatever the epoch's length), then the short last one
        def body(batch, *variables):
            rows = tf.slice(order, [0, batch * batch_size], [-1, batch_size])
            return (batch + 1, *step(*variables, data, rows))

        variables = (list(flat), list(moments), list(velocities), steps, statistics)
        if full_batches:  # a batch larger than the training set is one short batch
            _, *variables = tf.while_loop(
                lambda batch, *_: batch < full_batches,
                body,
                (tf.constant(0), *variables),
                maximum_iterations=full_batches,
            )
        if last_batch:
            variables = step(*variables, data, order[:, full_batches * batch_size :])
        flat, moments, velocities, steps, statistics = variables
        val_loss = _validation_loss(flat, state, validation_loss, batch_size)
        best, best_loss, wait = _keep_best(flat, state["best"], state["best_loss"], val_loss, state["wait"], active)
        trained = dict(params=flat, moments=moments, velocities=velocities, steps=steps, best=best)
        trained.update(stacked_losses.next_state(statistics, loss_state, branches))
        return dict(trained, best_loss=best_loss, wait=wait), val_loss

    function = tf.function(epoch, jit_compile=True if jit_compile else None, reduce_retracing=True)
    _EPOCH_FUNCTIONS[key] = function
    return function


def _zero_statistics(state, flat, branches) -> list:
    """Zeros shaped as the stateful branches' statistics (`stacked_losses.statistics`, shaped by one example)."""
    if not any(branch.statistics is not None for branch in branches):
        return []
    targets = state["targets"][:, :1]
    logits = tf.zeros_like(targets[..., :1]) + tf.zeros(flat[-1].shape[-1:])  # [slots, 1, K], K static
    return [[tf.zeros_like(s) for s in batch] for batch in stacked_losses.statistics(targets, logits, branches)]


__all__ = ["BETA_1", "BETA_2", "EPSILON", "epoch_function"]
