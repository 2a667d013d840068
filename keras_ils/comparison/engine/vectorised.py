"""Many small MLPs trained at once: weights with a leading model axis, one XLA graph per epoch.

The paper's synthetic protocol trains about 21,000 copies of one small network
(5 x 64 ReLU, 150 training points each). One `model.fit` per network spends
nearly all its time in per-step overhead; here every network is a row of
stacked weights (`[models, in, out]` kernels, `[models, out]` biases) and a
whole epoch of all of them is one compiled TensorFlow function of batched
matrix products.

The training is the package's MLP recipe (`keras_ils.comparison.networks.MLP_RECIPE`),
reproduced exactly per model:

- `keras_ils.comparison.networks.mlp` architecture; Keras' initialisation (Glorot-uniform
  kernels, zero biases), drawn with numpy from the model's seed;
- cross-entropy against fixed soft targets (compute them once with
  `keras_ils.targets.ils_targets`: ILS targets do not depend on the student),
  averaged over the mini-batch; or, with `losses`, each model's own Keras
  loss through its functional form (`keras_ils.losses.functional_form`:
  the package's calibration losses, OLS's soft labels included, Keras'
  function wrappers, yours), on its own mini-batch
  (`keras_ils.comparison.engine.stacked_losses`);
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
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.comparison.engine import stacked_losses
from keras_ils.comparison.engine.epoch import epoch_function
from keras_ils.comparison.engine.onednn import whole_epoch_xla
from keras_ils.comparison.engine.slot_pool import SlotPool
from keras_ils.comparison.engine.stacked_mlps import (
    INITIALISATIONS,
    epoch_order,
    initial_weights,
    layer_sizes,
    mlp_logits,
    pairs,
)

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


def _train(pool: SlotPool, epoch_fn, *, epochs: int, patience: int, history: bool) -> TrainedMLPs:
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
    return TrainedMLPs(pairs(weights), best_val_loss, best_epoch, epochs_run, losses)


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
    losses: Sequence | None = None,
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
        losses: `[M]` each model's Keras loss, one with a functional form
            (`keras_ils.losses.functional_form`) on logits, applied to its
            `targets` as they are (make a form's own targets first with
            `stacked_losses.model_targets`). Defaults to `None`: every model
            trains with cross-entropy against its targets.

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
    stacked = stacked_losses.stack(losses, len(x))
    jit_compile = whole_epoch_xla() if training.jit_compile == "auto" else training.jit_compile
    if weights is None:
        weights = initial_weights(seeds, x.shape[-1], targets.shape[-1], training.hidden_layers, training.units)
    flat_init = [np.asarray(w, np.float32) for pair in weights for w in pair]
    epoch_fn = epoch_function(
        x.shape[1],
        training.batch_size,
        training.learning_rate,
        jit_compile,
        float(training.weight_decay),
        training.validation_loss,
        stacked.branches,
    )
    size = min(training.pool_size, len(x))
    loss_data = {"loss_parameters": stacked.parameters, **stacked.state}
    pool = SlotPool(x, targets, x_val, y_val, seeds, flat_init, size, loss_data)
    return _train(pool, epoch_fn, epochs=training.epochs, patience=training.patience, history=history)


__all__ = [
    "INITIALISATIONS",
    "VALIDATION_LOSSES",
    "MLPTraining",
    "TrainedMLPs",
    "epoch_order",
    "initial_weights",
    "layer_sizes",
    "mlp_logits",
    "train_mlps",
    "whole_epoch_xla",
]
