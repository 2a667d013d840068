"""Saved models take the stored features (issue 23): the preprocessing wrapper and its inverse."""

import keras
import numpy as np

from keras_ils.comparison.data.splits import Splits, as_trained, taking_stored_features


def test_saved_wrapper_takes_stored_features_and_as_trained_gives_back_the_model(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    stored = {"mean": [1.0, 2.0, 3.0], "scale": [2.0, 4.0, 0.5]}
    splits = Splits(None, None, None, 2, (3,), "d.npz", {}, stored)
    taking_stored_features(model, splits).save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")  # the model's (standardised) inputs
    raw = x * np.array(stored["scale"]) + np.array(stored["mean"])  # what the data file stores
    np.testing.assert_allclose(loaded.predict(raw, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(as_trained(loaded).predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
    assert taking_stored_features(model, splits._replace(preprocessing=None)) is model and as_trained(model) is model
