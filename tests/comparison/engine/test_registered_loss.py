"""A loss registered from outside as a method trains in the vectorised engine, with no other edit.

The throwaway loss is made up (cross-entropy of the logits scaled by `power`), a Keras loss with a
`functional_form()`: registering it (`keras_ils.methods.register`) is the only change. `run` then trains its two
candidates side by side in the engine (`engine == "vectorised"`), and each slot's loss on a batch is the Keras loss's
and the numpy formula's.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ils import methods
from keras_ils.comparison.data import datasets
from keras_ils.comparison.engine import stacked_losses
from keras_ils.comparison.main_job import pipeline
from keras_ils.comparison.main_job.config import RunConfig
from keras_ils.losses import FunctionalForm

POWERS = (0.5, 2.0)


def throwaway_crossentropy(y_true, y_pred, power=1.0):
    """Per example `-sum_j y_j log softmax(power * z)_j`; `power` a number or one per model (`[M, 1, 1]`)."""
    return -ops.sum(y_true * ops.log_softmax(power * y_pred, axis=-1), axis=-1)


class Throwaway(keras.losses.Loss):
    def __init__(self, power=1.0, name="throwaway", **kwargs):
        super().__init__(name=name, **kwargs)
        self.power = power

    def call(self, y_true, y_pred):
        if len(y_true.shape) < len(y_pred.shape):  # sparse labels (validation)
            y_true = ops.one_hot(ops.cast(y_true, "int32"), y_pred.shape[-1])
        return throwaway_crossentropy(y_true, y_pred, self.power)

    def functional_form(self):
        return FunctionalForm(throwaway_crossentropy, {"power": self.power})


@pytest.fixture
def throwaway():
    method = methods.register(
        methods.Method(
            id="throwaway",
            name="Throwaway",
            make_loss=lambda num_classes, power: Throwaway(power),
            hyperparameters=("power",),
            grids={"paper": {"power": POWERS}, "synthetic": {"power": POWERS}},
        )
    )
    try:
        yield method
    finally:
        methods.unregister("throwaway")


@pytest.mark.slow  # a whole `run`: two XLA-compiled epoch graphs, the reports (about 17 s on 2 cores)
def test_run_trains_it_in_the_vectorised_engine(throwaway, tmp_path):
    assert throwaway.engine and "throwaway" in methods.ids(engine=True)
    config = RunConfig(output_dir=str(tmp_path), methods=("throwaway",), epochs=2)
    pipeline.run(datasets.load_synthetic(seed=0, n_test=20), config)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["engine"] == "vectorised" and results["models_trained"] == 1 + len(POWERS)  # the teacher, 2
    rows = {row["model"]: row for row in results["rows"]}
    assert rows["Throwaway"]["candidates"] == len(POWERS) and rows["Throwaway"]["hyperparameters"]["power"] in POWERS


def test_each_slot_is_the_library_loss_on_its_batch(throwaway, rng):
    logits = (2.0 * rng.normal(size=(2, 16, 3))).astype(np.float32)
    one_hot = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=(2, 16))]
    stacked = stacked_losses.stack([throwaway.loss(3, power=p) for p in POWERS], 2)
    assert stacked.branches[0].columns == (("power", 0),)  # one branch, its power a column: one graph for both
    values = stacked_losses.batch_losses(
        tf.constant(one_hot), tf.constant(logits), tf.constant(stacked.parameters), {}, stacked.branches
    ).numpy()
    for slot, power in enumerate(POWERS):
        z = power * logits[slot].astype(np.float64)
        log_p = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
        np.testing.assert_allclose(values[slot], -(one_hot[slot] * log_p).sum(-1).mean(), rtol=1e-5)
        keras_loss = throwaway.loss(3, power=power)(one_hot[slot], logits[slot])
        np.testing.assert_allclose(values[slot], float(keras_loss), rtol=1e-6)
