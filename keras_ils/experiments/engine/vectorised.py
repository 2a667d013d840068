"""Many small MLPs trained at once: weights with a leading model axis, one XLA graph per epoch.

The paper's synthetic protocol trains about 21,000 copies of one small network
(5 x 64 ReLU, 150 training points each). One `model.fit` per network spends
nearly all its time in per-step overhead; here every network is a row of
stacked weights (`[models, in, out]` kernels, `[models, out]` biases) and a
whole epoch of all of them is one compiled TensorFlow function of batched
matrix products.

The training is the package's MLP recipe (`keras_ils.experiments.engine.training.Recipe()`),
reproduced exactly per model:

- `keras_ils.experiments.zoo.models.mlp` architecture; Keras' initialisation (Glorot-uniform
  kernels, zero biases), drawn with numpy from the model's seed;
- cross-entropy against fixed soft targets (compute them once with
  `keras_ils.targets.ils_targets`: ILS targets do not depend on the student),
  averaged over the mini-batch;
- Keras' `Adam` (`beta_1=0.9`, `beta_2=0.999`, `epsilon=1e-7`, its
  bias-correction form `lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`), one step
  counter per model;
- mini-batches of 32 in a new order every epoch: `epoch_order(seed, epoch, n)`;
- after every epoch the hard-label validation cross-entropy; the best epoch's
  weights are kept and training stops after `patience` epochs without
  improvement, as `keras.callbacks.EarlyStopping(patience=10,
  restore_best_weights=True)` does.

Finished models leave the computation: a fixed pool of slots trains while
models wait in a queue, a finished model's slot is refilled at once, and when
the queue is empty the pool shrinks by powers of two (so few graph shapes are
ever compiled). An epoch's mini-batch steps are one loop in the graph, so
compiling it costs the same whatever the number of examples.

Which graph is fastest depends on the machine (`MLPTraining(jit_compile=...)`):
where TensorFlow runs oneDNN on the CPU (on Linux it turns it on for CPUs
with AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX), its batched matrix products
beat XLA's, so the forward and backward passes stay TensorFlow ops; elsewhere
(an AVX2-only CPU, a GPU) the whole epoch compiles with XLA
(`whole_epoch_xla()` says which). `benchmarks/RESULTS.md` has both measured
on both kinds of CPU.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Literal, NamedTuple

import numpy as np
import tensorflow as tf

from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.calibration import fit_temperatures  # noqa: F401  (re-exported beside the trainer)

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7
VALIDATION_LOSSES = ("mean", "batch_mean")


@dataclasses.dataclass(frozen=True)
class MLPTraining:
    """How `train_mlps` trains: the MLP recipe's settings and the engine's, checked when made.

    Attributes:
        learning_rate: Adam's rate. Defaults to `1e-2`.
        batch_size: mini-batch size. Defaults to `32`.
        epochs: maximum epochs. Defaults to `500`.
        patience: epochs without improvement before a model stops. Defaults
            to `10`.
        hidden_layers: hidden ReLU layers of the MLP. Defaults to `5`.
        units: units of each hidden layer. Defaults to `64`.
        pool_size: models trained side by side. Defaults to `2048`.
        jit_compile: `True` compiles the whole epoch with XLA, `False` keeps
            the matrix products TensorFlow ops (faster where TensorFlow runs
            oneDNN), `"auto"` asks `whole_epoch_xla()` when training starts.
            Both train the same models to float tolerance. Defaults to
            `"auto"`.
        weight_decay: coupled L2 weight decay, as PyTorch's
            `torch.optim.Adam(weight_decay=...)`: `weight_decay * w` is added
            to the gradient of every kernel and bias before Adam's moments.
            Defaults to `0.0`.
        validation_loss: `"mean"`, the validation cross-entropy over all
            points, or `"batch_mean"`, the mean of per-batch means over
            validation batches of `batch_size` (a short last batch weighs
            like the others), as the paper's authors' PyTorch code computes
            it. Early stopping, the best epoch, `best_val_loss` and
            `val_history` use it. Defaults to `"mean"`.

    Example:

    >>> training = MLPTraining(epochs=30, hidden_layers=1, units=8)
    >>> training.batch_size, dataclasses.replace(training, patience=3).patience
    (32, 3)
    >>> MLPTraining(patience=-1)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `patience`. Expected an int >= 0. Received: patience=-1
    """

    learning_rate: float = 1e-2
    batch_size: int = 32
    epochs: int = 500
    patience: int = 10
    hidden_layers: int = 5
    units: int = 64
    pool_size: int = 2048
    jit_compile: bool | Literal["auto"] = "auto"
    weight_decay: float = 0.0
    validation_loss: Literal["mean", "batch_mean"] = "mean"

    def __post_init__(self):
        number_in("learning_rate", self.learning_rate, 0.0, low_open=True, expected="a float > 0")
        for name in ("batch_size", "epochs", "hidden_layers", "units", "pool_size"):
            integer_at_least(name, getattr(self, name), 1)
        integer_at_least("patience", self.patience, 0)
        if not (isinstance(self.jit_compile, bool) or self.jit_compile == "auto"):
            raise invalid("jit_compile", "True, False or 'auto'", self.jit_compile)
        number_in("weight_decay", self.weight_decay, 0.0, expected="a float >= 0")
        if self.validation_loss not in VALIDATION_LOSSES:
            raise invalid("validation_loss", f"one of {VALIDATION_LOSSES}", self.validation_loss)


class TrainedMLPs(NamedTuple):
    """What `train_mlps` returns, one row per model.

    Attributes:
        weights: `[(kernel [M, in, out], bias [M, out]), ...]` at each model's
            best validation epoch (float32 numpy).
        best_val_loss: `[M]` the lowest validation cross-entropy.
        best_epoch: `[M]` its epoch (0-based).
        epochs: `[M]` epochs trained.
        val_history: `[M, max epochs]` validation cross-entropy per epoch (NaN
            after a model stopped) when asked for (`history=True`), else `None`.
    """

    weights: list
    best_val_loss: np.ndarray
    best_epoch: np.ndarray
    epochs: np.ndarray
    val_history: np.ndarray | None = None


def layer_sizes(input_dim: int, num_classes: int, hidden_layers: int = 5, units: int = 64) -> list:
    """`[(in, out), ...]` of `keras_ils.experiments.zoo.models.mlp(num_classes, (input_dim,), hidden_layers, units)`.

    Example:

    >>> layer_sizes(2, 3, hidden_layers=2, units=4)
    [(2, 4), (4, 4), (4, 3)]
    """
    sizes = [input_dim] + [units] * hidden_layers + [num_classes]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


INITIALISATIONS = ("keras", "pytorch")


def initial_weights(
    seeds, input_dim: int, num_classes: int, hidden_layers: int = 5, units: int = 64, scheme: str = "keras"
) -> list:
    """Initial MLP weights for each seed, drawn with `numpy.random.default_rng(seed)` layer by layer.

    - `"keras"` (the package's): Keras' `Dense` defaults, Glorot-uniform
      kernels (uniform in `[-l, l]`, `l = sqrt(6 / (fan_in + fan_out))`) and
      zero biases.
    - `"pytorch"`: `torch.nn.Linear`'s defaults, kernels and biases uniform in
      `[-1/sqrt(fan_in), 1/sqrt(fan_in)]` (the paper's authors trained with
      PyTorch); for comparing with the paper, not what `keras_ils.experiments.zoo.models.mlp`
      starts from.

    Returns:
        `[(kernel [M, in, out], bias [M, out]), ...]` float32.

    Example:

    >>> w = initial_weights([0, 1], 2, 3, hidden_layers=1, units=4)
    >>> [k.shape for k, b in w], bool(np.abs(w[0][0]).max() <= np.sqrt(6 / 6)), bool(w[0][1].any())
    ([(2, 2, 4), (2, 4, 3)], True, False)
    """
    if scheme not in INITIALISATIONS:
        raise ValueError(
            f"Invalid value for argument `scheme`. Expected one of {INITIALISATIONS}. Received: {scheme!r}"
        )
    sizes = layer_sizes(input_dim, num_classes, hidden_layers, units)
    unique_seeds, rows = np.unique(np.asarray(seeds, np.int64), return_inverse=True)  # each seed drawn once
    kernels = [np.empty((len(unique_seeds), i, o), np.float32) for i, o in sizes]
    biases = [np.zeros((len(unique_seeds), o), np.float32) for _, o in sizes]
    for row, seed in enumerate(unique_seeds):
        rng = np.random.default_rng(int(seed))
        for kernel, bias, (fan_in, fan_out) in zip(kernels, biases, sizes, strict=True):
            if scheme == "keras":
                limit = np.sqrt(6.0 / (fan_in + fan_out))
                kernel[row] = rng.uniform(-limit, limit, (fan_in, fan_out))
            else:
                limit = 1.0 / np.sqrt(fan_in)
                kernel[row] = rng.uniform(-limit, limit, (fan_in, fan_out))
                bias[row] = rng.uniform(-limit, limit, fan_out)
    return [(kernel[rows], bias[rows]) for kernel, bias in zip(kernels, biases, strict=True)]


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order in which a model with `seed` visits its `n` training points in `epoch`.

    `numpy.random.default_rng([seed, epoch]).permutation(n)`; consecutive
    slices of `batch_size` are the mini-batches (the last one may be shorter).

    Example:

    >>> sorted(epoch_order(0, 3, 5).tolist())
    [0, 1, 2, 3, 4]
    """
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


def _forward(params, x):
    """Logits of stacked MLPs: `params` `[(kernel [m, i, o], bias [m, o])]`, `x [m, n, d]`."""
    h = x
    for layer, (kernel, bias) in enumerate(params):
        h = tf.matmul(h, kernel) + bias[:, None, :]
        if layer < len(params) - 1:
            h = tf.nn.relu(h)
    return h


_compiled_forward = tf.function(_forward, jit_compile=True, reduce_retracing=True)
_MODEL_MULTIPLE = 8  # model counts are padded to a multiple of this, so that few shapes are compiled


def mlp_logits(weights, x, *, batch_size: int = 1024) -> np.ndarray:
    """Logits `[M, n, K]` of stacked MLPs on `x` (`[M, n, d]` per model, or `[n, d]` shared).

    The forward pass is compiled with XLA, `batch_size` points of every
    model at a time; the model count is padded to a multiple of 8, and the
    points to whole batches (fewer than `batch_size` points: to the next power
    of two), with zeros, so that few shapes are ever compiled.

    Example:

    >>> w = initial_weights([0, 1], 2, 3, hidden_layers=1, units=4)
    >>> mlp_logits(w, np.zeros((5, 2), np.float32)).shape
    (2, 5, 3)
    """
    integer_at_least("batch_size", batch_size, 1)
    x = np.asarray(x, np.float32)
    num_models, n = weights[0][0].shape[0], x.shape[-2]
    extra_models = -num_models % _MODEL_MULTIPLE
    params = [
        tuple(
            tf.constant(np.pad(np.asarray(w, np.float32), [(0, extra_models)] + [(0, 0)] * (np.ndim(w) - 1)))
            for w in pair
        )
        for pair in weights
    ]
    batch = min(batch_size, 1 << (n - 1).bit_length())
    x = np.pad(np.broadcast_to(x, (num_models, n, x.shape[-1])), [(0, extra_models), (0, -n % batch), (0, 0)])
    logits = [_compiled_forward(params, tf.constant(x[:, s : s + batch])).numpy() for s in range(0, n, batch)]
    return np.concatenate(logits, axis=1)[:num_models, :n]


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


# The CPU features for which TensorFlow's Linux builds turn oneDNN on by default (`IsMklEnabled` in
# tensorflow/core/util/util.cc), as /proc/cpuinfo names them.
_ONEDNN_CPU_FLAGS = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})
_CPUINFO = "/proc/cpuinfo"


def _cpu_flags() -> frozenset:
    """The CPU's feature flags as Linux lists them in `/proc/cpuinfo` (x86's `flags` line); empty elsewhere."""
    try:
        with open(_CPUINFO) as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def _tensorflow_runs_onednn(cpu_flags, environ, platform: str) -> bool:
    """Whether TensorFlow runs oneDNN, by the rule its 2.9 release notes and `IsMklEnabled` state.

    Only TensorFlow's Linux and Windows builds include oneDNN. The
    `TF_ENABLE_ONEDNN_OPTS` environment variable decides where it is set
    (`"1"` or `"true"`: on, `"0"` or `"false"`: off, any case); otherwise it
    is on for Linux CPUs with one of `_ONEDNN_CPU_FLAGS`, off on Windows.
    """
    if not platform.startswith(("linux", "win")):
        return False
    setting = environ.get("TF_ENABLE_ONEDNN_OPTS", "").lower()
    if setting in ("1", "true"):
        return True
    if setting in ("0", "false"):
        return False
    return platform.startswith("linux") and bool(_ONEDNN_CPU_FLAGS & frozenset(cpu_flags))


def whole_epoch_xla() -> bool:
    """What `MLPTraining(jit_compile="auto")` chooses: `True` unless TensorFlow runs oneDNN on a CPU-only machine.

    TensorFlow turns oneDNN on by default on Linux for CPUs with AVX512_VNNI,
    AVX512_BF16, AVX-VNNI or AMX (the flags `avx512_vnni`, `avx512_bf16`,
    `avx_vnni`, `amx_tile`, `amx_int8`, `amx_bf16` of `/proc/cpuinfo`), and
    `TF_ENABLE_ONEDNN_OPTS` overrides it (`"1"`/`"true"` on, `"0"`/`"false"`
    off); there its batched matrix products are faster than XLA's. Elsewhere
    (an AVX2-only CPU, macOS, a GPU) XLA compiling the whole epoch is faster.
    Decided from those public facts, not from TensorFlow's internals: an
    ARM Neoverse V1, where recent TensorFlow also turns oneDNN on, and
    Windows, where its default has changed between versions, get XLA unless
    `TF_ENABLE_ONEDNN_OPTS` says otherwise. Both layouts train the same
    models to float tolerance; only the speed differs.

    Example:

    >>> isinstance(whole_epoch_xla(), bool)
    True
    """
    if tf.config.list_logical_devices("GPU"):
        return True
    return not _tensorflow_runs_onednn(_cpu_flags(), os.environ, sys.platform)


def _batch_mean_weights(n_val, batch_size):
    """Per-point weights `[n_val]` that make a weighted sum the mean of per-batch means over batches of `batch_size`."""
    n_val = tf.cast(n_val, tf.int32)
    batch = tf.range(n_val) // batch_size
    num_batches = (n_val + batch_size - 1) // batch_size
    size = tf.minimum(batch_size, n_val - batch * batch_size)
    return 1.0 / tf.cast(num_batches * size, tf.float32)


def _epoch_function(n_train, batch_size, learning_rate, jit_compile, weight_decay=0.0, validation_loss="mean"):
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
    batches of `batch_size` instead of all points at once.
    """
    key = (n_train, batch_size, float(learning_rate), bool(jit_compile), float(weight_decay), validation_loss)
    if key in _EPOCH_FUNCTIONS:
        return _EPOCH_FUNCTIONS[key]
    full_batches, last_batch = divmod(n_train, batch_size)

    def step(flat, moments, velocities, steps, x, targets, rows):
        x_batch = tf.gather(x, rows, batch_dims=1)
        t_batch = tf.gather(targets, rows, batch_dims=1)
        with tf.GradientTape() as tape:
            tape.watch(flat)
            logits = _forward(_pairs(flat), x_batch)
            per_model = -tf.reduce_mean(tf.reduce_sum(t_batch * tf.nn.log_softmax(logits), axis=-1), axis=-1)
            loss = tf.reduce_sum(per_model)
        grads = tape.gradient(loss, flat)
        if weight_decay:
            grads = [g + weight_decay * w for g, w in zip(grads, flat, strict=True)]
        steps = steps + 1.0
        flat, moments, velocities = _adam(flat, grads, moments, velocities, steps, learning_rate)
        return flat, moments, velocities, steps

    def epoch(flat, moments, velocities, steps, best, best_loss, wait, active, x, targets, x_val, y_val, order):
        # the full mini-batches in a loop (one compiled body, whatever the epoch's length), then the short last one
        def body(batch, flat, moments, velocities, steps):
            rows = tf.slice(order, [0, batch * batch_size], [-1, batch_size])
            return (batch + 1, *step(flat, moments, velocities, steps, x, targets, rows))

        if full_batches:  # a batch larger than the training set is one short batch
            _, flat, moments, velocities, steps = tf.while_loop(
                lambda batch, *_: batch < full_batches,
                body,
                (tf.constant(0), list(flat), list(moments), list(velocities), steps),
                maximum_iterations=full_batches,
            )
        if last_batch:
            rows = order[:, full_batches * batch_size :]
            flat, moments, velocities, steps = step(flat, moments, velocities, steps, x, targets, rows)
        val_logits = _forward(_pairs(flat), x_val)
        val_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_val, logits=val_logits)
        if validation_loss == "batch_mean":
            val_loss = tf.reduce_sum(val_ce * _batch_mean_weights(tf.shape(val_ce)[1], batch_size), axis=-1)
        else:
            val_loss = tf.reduce_mean(val_ce, axis=-1)
        best, best_loss, wait = _keep_best(flat, best, best_loss, val_loss, wait, active)
        return flat, moments, velocities, steps, best, best_loss, wait, val_loss

    function = tf.function(epoch, jit_compile=True if jit_compile else None, reduce_retracing=True)
    _EPOCH_FUNCTIONS[key] = function
    return function


def _pairs(flat):
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def _checked_arrays(x, targets, x_val, y_val, seeds):
    """`train_mlps`' arrays as float32 / int32 / int64, once their shapes are checked."""
    x, x_val = np.asarray(x, np.float32), np.asarray(x_val, np.float32)
    targets, y_val = np.asarray(targets, np.float32), np.asarray(y_val, np.int32)
    seeds = np.asarray(seeds, np.int64)
    if x.ndim != 3 or targets.ndim != 3 or x_val.ndim != 3 or y_val.ndim != 2:
        raise ValueError(
            "Expected x [M, n, d], targets [M, n, K], x_val [M, n_val, d], y_val [M, n_val]. Received shapes: "
            f"{x.shape}, {targets.shape}, {x_val.shape}, {y_val.shape}"
        )
    num_models, n_train = x.shape[:2]
    if targets.shape[:2] != (num_models, n_train) or len(x_val) != num_models or y_val.shape != x_val.shape[:2]:
        raise ValueError("x, targets, x_val and y_val must agree in models and examples.")
    if seeds.shape != (num_models,):
        raise ValueError(f"Argument `seeds` must hold one integer per model ({num_models}). Received: {seeds.shape}")
    return x, targets, x_val, y_val, seeds


MIN_SLOTS = 16  # the smallest pool `_SlotPool.shrink` makes


class _TrainedEpoch(NamedTuple):
    """What `_SlotPool.run_epoch` reports about the slots that held a model, one entry per slot."""

    slots: np.ndarray
    models: np.ndarray
    epoch: np.ndarray  # the epoch just trained (0-based)
    wait: np.ndarray  # epochs since the best validation loss
    val_loss: np.ndarray


class _SlotPool:
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
    """

    def __init__(self, x, targets, x_val, y_val, seeds, flat_init, size):
        self.data = dict(x=x, targets=targets, x_val=x_val, y_val=y_val)
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

    def run_epoch(self, epoch_fn) -> _TrainedEpoch:
        """Trains every slot one epoch with `epoch_fn` (`_epoch_function`) and counts it for the busy slots."""
        active = self.active
        slots = np.flatnonzero(active)
        state = self.state
        params, moments, velocities, steps, best, best_loss, wait, val_loss = epoch_fn(
            state["params"],
            state["moments"],
            state["velocities"],
            state["steps"],
            state["best"],
            state["best_loss"],
            state["wait"],
            tf.constant(active),
            state["x"],
            state["targets"],
            state["x_val"],
            state["y_val"],
            tf.constant(self._batch_orders(slots)),
        )
        state.update(
            params=list(params),
            moments=list(moments),
            velocities=list(velocities),
            steps=steps,
            best=list(best),
            best_loss=best_loss,
            wait=wait,
        )
        epoch = self.slot_epoch[slots]
        self.slot_epoch[slots] += 1
        return _TrainedEpoch(slots, self.slot_model[slots], epoch, wait.numpy()[slots], val_loss.numpy()[slots])

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


def _train(pool: _SlotPool, epoch_fn, *, epochs: int, patience: int, history: bool) -> TrainedMLPs:
    """The epoch loop: fill, shrink, train an epoch, stop models as `EarlyStopping` would, until no model is left."""
    weights = [np.empty_like(w) for w in pool.flat_init]
    best_val_loss = np.full(pool.num_models, np.inf, np.float32)
    best_epoch = np.zeros(pool.num_models, np.int64)
    epochs_run = np.zeros(pool.num_models, np.int64)
    losses = np.full((pool.num_models, epochs), np.nan, np.float32) if history else None
    while True:
        pool.fill()
        if not pool.active.any():
            break
        pool.shrink()
        trained = pool.run_epoch(epoch_fn)
        if history:
            losses[trained.models, trained.epoch] = trained.val_loss
        # as EarlyStopping: `patience` epochs without improvement (patience=0: the first one), or the last epoch
        stop = (trained.wait >= max(patience, 1)) | (trained.epoch + 1 >= epochs)
        if stop.any():
            models = trained.models[stop]
            best, best_val_loss[models] = pool.finish(trained.slots[stop])
            for out, value in zip(weights, best, strict=True):
                out[models] = value
            epochs_run[models] = trained.epoch[stop] + 1
            best_epoch[models] = trained.epoch[stop] - trained.wait[stop]
    return TrainedMLPs(_pairs(weights), best_val_loss, best_epoch, epochs_run, losses)


def train_mlps(
    x,
    targets,
    x_val,
    y_val,
    *,
    seeds,
    weights=None,
    training: MLPTraining | None = None,
    history: bool = False,
) -> TrainedMLPs:
    """Trains `M` MLPs at once, each on its own data and soft targets, by the package's MLP recipe.

    Args:
        x: `[M, n, d]` training features of each model.
        targets: `[M, n, K]` soft targets (rows summing to 1), e.g. from
            `keras_ils.targets.ils_targets`.
        x_val: `[M, n_val, d]` validation features.
        y_val: `[M, n_val]` integer validation labels (model selection and
            early stopping use the hard-label cross-entropy).
        seeds: `[M]` integers: the initial weights (`initial_weights`) and the
            batch orders (`epoch_order`) of each model.
        weights: optional initial weights `[(kernel [M, i, o], bias [M, o])]`
            instead of `initial_weights(seeds, ...)`.
        training: the settings, an `MLPTraining`. Defaults to `None`:
            `MLPTraining()` (the paper's recipe: Adam 1e-2, batch 32, at most
            500 epochs, patience 10, 5 x 64 ReLU).
        history: also keep every epoch's validation loss (`val_history`).
            Defaults to `False`.

    Returns:
        `TrainedMLPs(weights, best_val_loss, best_epoch, epochs, val_history)`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(2, 40, 2)).astype("float32"); y = (x[..., 0] > 0).astype("int32")
    >>> training = MLPTraining(epochs=30, hidden_layers=1, units=8)
    >>> result = train_mlps(x, np.eye(2)[y], x, y, seeds=[0, 1], training=training)
    >>> bool(np.all(result.best_val_loss < 0.5)), result.weights[-1][0].shape
    (True, (2, 8, 2))
    """
    if training is None:
        training = MLPTraining()
    elif not isinstance(training, MLPTraining):
        raise TypeError(f"Argument `training` must be an MLPTraining. Received: training={training!r}")
    x, targets, x_val, y_val, seeds = _checked_arrays(x, targets, x_val, y_val, seeds)
    jit_compile = whole_epoch_xla() if training.jit_compile == "auto" else training.jit_compile
    if weights is None:
        weights = initial_weights(seeds, x.shape[-1], targets.shape[-1], training.hidden_layers, training.units)
    flat_init = [np.asarray(w, np.float32) for pair in weights for w in pair]
    epoch_fn = _epoch_function(
        x.shape[1],
        training.batch_size,
        training.learning_rate,
        jit_compile,
        float(training.weight_decay),
        training.validation_loss,
    )
    pool = _SlotPool(x, targets, x_val, y_val, seeds, flat_init, min(training.pool_size, len(x)))
    return _train(pool, epoch_fn, epochs=training.epochs, patience=training.patience, history=history)


__all__ = [
    "INITIALISATIONS",
    "VALIDATION_LOSSES",
    "MLPTraining",
    "TrainedMLPs",
    "epoch_order",
    "fit_temperatures",
    "initial_weights",
    "layer_sizes",
    "mlp_logits",
    "train_mlps",
    "whole_epoch_xla",
]
