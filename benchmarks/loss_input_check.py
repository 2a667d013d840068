"""What the losses' probability check (`from_logits=False`) costs per training step, measured side by side.

    python benchmarks/loss_input_check.py                       # a few minutes on 2 CPU cores
    python benchmarks/loss_input_check.py --rounds 21 --steps 50   # tighter medians
    KERAS_BACKEND=jax python benchmarks/loss_input_check.py     # Keras' JAX step (jit)

A loss told `from_logits=False` checks that `y_pred` can be probabilities
(`keras_ils.losses._common.predictions`: values in [0, 1], rows summing to 1;
`tf.debugging` assertions plus a NaN for XLA in a TensorFlow graph, a
`jax.debug.callback` under `lax.cond` in a JAX trace). For the paper's MLP
(`mlp`: 5 hidden layers of 64 units) and a wider one, at K = 10 and 100 and a
batch of 128, the same model, weights, batches and optimizer train with
`model.fit` twice:

| variant   | what it is                                                                      |
|-----------|---------------------------------------------------------------------------------|
| checked   | `ILSLoss(method="ls", from_logits=False)` on a probability output that no       |
|           | softmax op computes (`exp(log_softmax(z))`), so the check runs in the step      |
| unchecked | the same, with the check taken out (the package before the check)               |

LS is the cheapest of the package's losses, so the ratio bounds the check's
share of a step from above. Under TensorFlow both modes run: `tf.function`
(Keras' default on a CPU) and XLA (`jit_compile=True`, Keras' default on a
GPU); under JAX, Keras' jitted step. Rounds of a short `fit` per variant run
in rotating order; a variant's value in a round is its median step; the ratio
checked / unchecked is taken within each round and its median over rounds is
reported with its interquartile range (first round dropped), beside the
median of the rounds' differences (the time the check adds). The loss and
its gradient alone (one batch of probabilities, 200 repetitions inside one
compiled loop: `tf.function`, or `jax.jit` under JAX) are timed the same way:
the check's own cost without the noise of whole steps.

A model ending in a softmax (`activation="softmax"`, `keras.layers.Softmax()`)
costs nothing under TensorFlow: the loss reads the softmax op at trace time
and inserts no check (the check's ops in each graph are printed last).

No switch turns the check off. Where its cost matters, the ways around it are
the ones Keras recommends anyway: give the loss logits (`from_logits=True`,
the model without its final softmax: no check, and a log-softmax that is
numerically stable), or, under TensorFlow, end the model in a softmax.
"""

from __future__ import annotations

import argparse
import contextlib
import warnings
from unittest import mock

import _common
import keras
import numpy as np
from keras import ops

import keras_ils
from keras_ils.losses import _common as loss_common
from keras_ils_experiments.zoo import models


class ExpOfLogSoftmax(keras.layers.Layer):
    """Probabilities no softmax op computes, so the loss must check their values."""

    def call(self, z):
        return ops.exp(ops.log_softmax(z, axis=-1))


def _unchecked(y_pred, from_logits):
    return ops.convert_to_tensor(y_pred)


def _check(enabled: bool):
    """The loss as shipped, or with its door's check taken out (patched while the step is traced and run)."""
    return contextlib.nullcontext() if enabled else mock.patch.object(loss_common, "predictions", _unchecked)


def _model(name, num_classes, input_dim, weights, jit_compile):
    body = models.build(name, num_classes, (input_dim,))
    body.set_weights(weights)
    model = keras.Sequential([keras.Input((input_dim,)), body, ExpOfLogSoftmax()])
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras_ils.ILSLoss(method="ls", from_logits=False),
        jit_compile=jit_compile,
    )
    return model


def _batches(num_classes, input_dim, batch_size, count=4):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(count * batch_size, input_dim)).astype("float32")
    y = rng.integers(0, num_classes, count * batch_size).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True).cache().repeat()


def _modes():
    if keras.backend.backend() == "tensorflow":
        return {"tf.function": False, "XLA": True}
    return {"jit": True}


def _row(model, num_classes, what, times) -> list:
    """A table row: medians, the median of the rounds' differences (the time the check adds), the paired ratio."""
    ratio, low, high = _common.paired_ratio(times, "checked", "unchecked")
    added = np.median(times["checked"] - times["unchecked"])  # within each round, like the ratio
    row = [model, num_classes, what, *(f"{1e3 * np.median(times[v]):.3f}" for v in ("checked", "unchecked"))]
    row += [f"{1e6 * added:+.0f}", f"{ratio:.3f} [{low:.3f}, {high:.3f}]"]
    print(_common.table(HEADERS, [row]).splitlines()[-1], flush=True)
    return row


def measure_fit(name, num_classes, args) -> list[list]:
    """A row per step mode: a whole `fit` step of `name`, checked and unchecked."""
    input_dim = 32
    keras.utils.set_random_seed(0)
    weights = models.build(name, num_classes, (input_dim,)).get_weights()
    data = _batches(num_classes, input_dim, args.batch_size)
    rows = []
    for mode, jit_compile in _modes().items():
        variants = {checked: _model(name, num_classes, input_dim, weights, jit_compile) for checked in (True, False)}

        def fit(checked, variants=variants):
            with _check(checked):
                return _common.fit_step_seconds(variants[checked], data, args.steps)

        times = _common.interleaved({"checked": lambda: fit(True), "unchecked": lambda: fit(False)}, args.rounds)
        rows.append(_row(name, num_classes, f"fit step, {mode}", times))
    return rows


HEADERS = ["model", "K", "what", "checked (ms)", "unchecked (ms)", "added (us)", "checked / unchecked [IQR]"]


def loss_alone(num_classes, batch_size, repetitions=200) -> dict:
    """`{"checked" | "unchecked": timed call}`: the loss and its gradient on one batch, `repetitions` times in a
    compiled loop (a `tf.function` while loop, or `jax.jit` of a `fori_loop`); each call returns seconds per
    repetition. The check's own cost without the noise of whole steps."""
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(num_classes), size=batch_size).astype("float32")
    labels = rng.integers(0, num_classes, batch_size).astype("int32")
    loss = keras_ils.ILSLoss(method="ls", from_logits=False)
    timer = _jax_loop if keras.backend.backend() == "jax" else _tf_loop
    calls = {}
    for checked in (True, False):
        with _check(checked):
            timed = timer(loss, labels, probabilities, repetitions)
            timed()  # traced here, under the patch
        calls["checked" if checked else "unchecked"] = timed
    return calls


def _tf_loop(loss, labels, probabilities, repetitions):
    import tensorflow as tf

    def body(y, p, i):
        p = p + 1e-9 * i  # every repetition its own input: nothing is hoisted out of the loop; rows still sum to 1
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = loss(y, p)
        return value + tf.reduce_sum(tape.gradient(value, p))

    return _common.in_graph_seconds(body, (tf.constant(labels), tf.constant(probabilities)), repetitions)


def _jax_loop(loss, labels, probabilities, repetitions):
    import time

    import jax

    value_and_grad = jax.value_and_grad(lambda p, y: loss(y, p))

    @jax.jit
    def run(y, p):
        def step(i, total):
            value, gradient = value_and_grad(p + 1e-9 * i, y)
            return total + value + gradient.sum()

        return jax.lax.fori_loop(0, repetitions, step, 0.0)

    def measure():
        start = time.perf_counter()
        run(labels, probabilities).block_until_ready()
        return _common.Seconds((time.perf_counter() - start) / repetitions)

    return measure


def check_ops_in_graph(num_classes=10, batch_size=128) -> dict:
    """`{output: ops of the check in the traced loss}`: a softmax output gets none in a TensorFlow graph.

    The check's ops are told apart by their types: its `StopGradient` input,
    `Abs` of the row sums' error and the `SelectV2` of XLA's NaN (the
    assertions sit inside `If` branches).
    """
    import tensorflow as tf

    outputs = {"softmax": tf.nn.softmax, "exp(log_softmax)": lambda z: tf.exp(tf.nn.log_softmax(z))}
    found = {}
    for output, activation in outputs.items():
        loss = keras_ils.ILSLoss(method="ls", from_logits=False)
        traced = tf.function(lambda z, loss=loss, f=activation: loss(tf.zeros([batch_size], tf.int32), f(z)))
        graph = traced.get_concrete_function(tf.TensorSpec([batch_size, num_classes], tf.float32)).graph
        found[output] = sorted({op.type for op in graph.get_operations()} & {"StopGradient", "Abs", "SelectV2"})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,mlp-2-512", help="comma-separated zoo MLPs")
    parser.add_argument("--num-classes", default="10,100")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20, help="steps per fit; its median step is the round's value")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*`shuffle=True` was passed")  # fit on a dataset; nothing to shuffle
    _common.print_header(f"The losses' probability check per training step (backend: {keras.backend.backend()})")
    print(_common.table(HEADERS, []).splitlines()[0])
    rows = []
    for num_classes in (int(k) for k in args.num_classes.split(",")):
        times = _common.interleaved(loss_alone(num_classes, args.batch_size), args.rounds)
        rows.append(_row("-", num_classes, "loss + gradient alone", times))
        for name in args.models.split(","):
            rows += measure_fit(name, num_classes, args)
    print()
    print(_common.table(HEADERS, rows))
    if keras.backend.backend() == "tensorflow":
        print()
        print("The check's ops in the traced loss (TensorFlow graph):", check_ops_in_graph())


if __name__ == "__main__":
    main()
