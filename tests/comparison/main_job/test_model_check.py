"""A model that cannot take the data is refused before anything is trained or written (issue 23 item 5)."""

import numpy as np
import pytest

import keras_ils_cli as cli


@pytest.mark.parametrize("model", ["resnet21", "resnet20", "lenet", "cnn"])
def test_refused_naming_model_and_nothing_left(tmp_path, capsys, model):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)), np.arange(60) % 3
    np.savez(tmp_path / "d.npz", x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    out = tmp_path / "out"
    code = cli.main(["run", "--dataset", str(tmp_path / "d.npz"), "--model", model, "--output-dir", str(out)])
    error = capsys.readouterr().err
    assert code != 0 and "Invalid value for argument `--model`" in error and f"'{model}' cannot take d.npz" in error
    assert "(No LS" not in error and not out.exists()  # no teacher trained, no search directory written
