import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import evaluation, plots

import reference


def _model_and_data(n=300, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = rng.integers(0, k, n).astype("int32")
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(k)]), x, y


def test_scores_against_reference():
    model, x, y = _model_and_data()
    probs = reference.softmax(model.predict(x, verbose=0))
    result = evaluation.evaluate(model, (x, y))["all"]
    np.testing.assert_allclose(result["accuracy"], (probs.argmax(1) == y).mean(), rtol=1e-6)
    np.testing.assert_allclose(result["nll"], reference.nll(probs, y), rtol=1e-5)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, y), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, y), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["brier"], reference.brier(probs, y), rtol=1e-5)
    np.testing.assert_allclose(result["mce"], reference.mce(probs, y), rtol=1e-4)
    np.testing.assert_allclose(result["class_conditional_ece"], reference.class_conditional_ece(probs, y), rtol=1e-4)
    assert result["count"] == 300


def test_groups_and_dataset_input():
    model, x, y = _model_and_data()
    mask = x[:, 0] > 0
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    result = evaluation.evaluate(model, ds, groups={"pos": mask, "neg": ~mask})
    probs = reference.softmax(model.predict(x, verbose=0))
    for name, m in (("pos", mask), ("neg", ~mask)):
        assert result[name]["count"] == m.sum()
        np.testing.assert_allclose(result[name]["nll"], reference.nll(probs[m], y[m]), rtol=1e-5)
        np.testing.assert_allclose(result[name]["ece"], reference.ece(probs[m], y[m]), rtol=1e-4, atol=1e-7)


def test_bad_group_mask():
    model, x, y = _model_and_data()
    with pytest.raises(ValueError, match="mask of group 'g'"):
        evaluation.evaluate(model, (x, y), groups={"g": np.ones(3, bool)})


def test_reliability_diagram_png(tmp_path):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=500)
    labels = rng.integers(0, 4, 500)
    path = plots.reliability_diagram(probs, labels, str(tmp_path / "out" / "r.png"), title="test")
    with open(path, "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 200
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.png"]
