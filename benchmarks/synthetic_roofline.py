"""How fast the synthetic protocol could be on this machine: its arithmetic against the machine's matrix products.

The protocol (100 replicates, 21,600 MLPs 5 x 64 on 150 + 150 points) trains about 589,000 model-epochs.
One model-epoch is about 20 MFLOP (`model_epoch_flop`: forward and the two backward products of every
mini-batch, the first layer's input gradient excepted, and one validation forward pass). Three rates, side
by side in rounds (`_common.interleaved`):

- `sgemm 2048`: one large float32 matrix product by TensorFlow, near what the cores can do;
- `engine shapes`: the batched products of one epoch of a 256-slot pool, each shape as the engine runs
  them (`[256, 32, 64] x [256, 64, 64]` forward, the two backward products, the validation forward),
  under XLA;
- `train_mlps`: the engine itself on 1,024 random 150-point problems for 8 epochs (warm).

The protocol's lower bound at a rate is its FLOP divided by that rate; the 3-minute target needs
589,323 x 20 MFLOP / 180 s, about 66 GFLOP/s sustained through the whole run (temperature fits,
targets and scoring included).

    python benchmarks/synthetic_roofline.py [--rounds 3]
"""

import argparse
import time

import numpy as np
import tensorflow as tf
from _common import interleaved, machine

from keras_ils.comparison.engine import vectorised

PROTOCOL_MODEL_EPOCHS = 589_323  # the 100-replicate run of results/synthetic_protocol (seed 0)
TARGET_SECONDS = 180.0
SLOTS, BATCH, N_TRAIN, N_VAL = 256, 32, 150, 150


def model_epoch_flop(n_train=N_TRAIN, n_val=N_VAL, sizes=None) -> float:
    """FLOP of one model-epoch: 3 products per layer per training point (2 for the first: no input gradient),
    1 per validation point, 2 FLOP per multiply-add."""
    sizes = sizes or vectorised.layer_sizes(2, 3)
    forward = sum(i * o for i, o in sizes)
    backward = 2 * forward - sizes[0][0] * sizes[0][1]
    return 2.0 * (n_train * (forward + backward) + n_val * forward)


def _calls(rng) -> tuple[dict, dict]:
    """`({name: timed function}, {name: its floating-point operations})`: a large sgemm, the engine's shapes, the
    engine itself on 1,024 random 150-point problems for 8 epochs (compiled before it is timed)."""
    a = tf.constant(rng.random((2048, 2048), np.float32))
    sgemm = tf.function(lambda m: tf.matmul(m, m))

    h = tf.constant(rng.random((SLOTS, BATCH, 64), np.float32))
    w = tf.constant(rng.random((SLOTS, 64, 64), np.float32))
    v = tf.constant(rng.random((SLOTS, N_VAL, 64), np.float32))

    @tf.function(jit_compile=True)
    def engine_shapes(h, w, v):
        out = tf.matmul(h, w)  # forward
        grad_w = tf.matmul(h, out, transpose_a=True)  # dL/dW
        grad_h = tf.matmul(out, w, transpose_b=True)  # dL/dh
        return tf.reduce_sum(out) + tf.reduce_sum(grad_w) + tf.reduce_sum(grad_h) + tf.reduce_sum(tf.matmul(v, w))

    shape_flop = 2.0 * SLOTS * (3 * BATCH + N_VAL) * 64 * 64

    x = rng.normal(size=(1024, N_TRAIN, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=(1024, N_TRAIN))
    x_val = rng.normal(size=(1024, N_VAL, 2)).astype(np.float32)
    y_val = rng.integers(0, 3, size=(1024, N_VAL))
    engine_args = (x, np.eye(3, dtype=np.float32)[y], x_val, y_val)
    engine = lambda epochs: vectorised.MLPTraining(epochs=epochs, patience=100, pool_size=SLOTS)  # noqa: E731
    vectorised.train_mlps(*engine_args, seeds=np.arange(1024), training=engine(1))  # compiles the pool's shapes

    def repeat(function, calls):
        def timed():
            for _ in range(calls):
                result = function()
            np.asarray(result)

        return timed

    flop = {
        "sgemm 2048": 10 * 2.0 * 2048**3,
        "engine shapes": 50 * shape_flop,
        "train_mlps": 1024 * 8 * model_epoch_flop(),
    }
    calls = {
        "sgemm 2048": repeat(lambda: sgemm(a), 10),
        "engine shapes": repeat(lambda: engine_shapes(h, w, v), 50),
        "train_mlps": lambda: vectorised.train_mlps(*engine_args, seeds=np.arange(1024), training=engine(8)),
    }
    return calls, flop


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    calls, flop = _calls(np.random.default_rng(0))
    print("\n".join(machine()))
    print(f"one model-epoch: {model_epoch_flop() / 1e6:.2f} MFLOP; protocol: {PROTOCOL_MODEL_EPOCHS:,} model-epochs")
    times = interleaved(calls, args.rounds)
    rates = {name: flop[name] / seconds / 1e9 for name, seconds in times.items()}
    for round_index in range(args.rounds):
        for name in calls:
            seconds = times[name][round_index]
            print(f"round {round_index}: {name:14s} {seconds:7.3f} s  {rates[name][round_index]:6.1f} GFLOP/s")
    protocol_flop = PROTOCOL_MODEL_EPOCHS * model_epoch_flop()
    print(f"\nthe 3-minute target needs {protocol_flop / TARGET_SECONDS / 1e9:.1f} GFLOP/s sustained")
    print("| rate | GFLOP/s (median) | protocol's training alone at this rate |")
    print("|---|---|---|")
    for name, values in rates.items():
        median = float(np.median(values))
        print(f"| {name} | {median:.1f} | {protocol_flop / median / 1e9:.0f} s |")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"({time.time() - started:.0f} s)")
