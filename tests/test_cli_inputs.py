"""`keras-ils` on bad input: one `keras-ils: error:` line, exit code 2, before any training, no files."""

import numpy as np
import pytest

import keras_ils_cli as cli
from keras_ils.comparison.main_job import pipeline


@pytest.fixture
def no_training(monkeypatch):
    def trained(*args, **kwargs):
        pytest.fail("the command started training before rejecting its input")

    monkeypatch.setattr(pipeline, "run", trained)
    monkeypatch.setattr(pipeline, "tune", trained)


def _npz(tmp_path, **arrays):
    rng = np.random.default_rng(0)
    base = dict(
        x_train=rng.normal(size=(60, 4)),
        y_train=np.arange(60) % 3,
        x_test=rng.normal(size=(30, 4)),
        y_test=np.arange(30) % 3,
    )
    base.update(arrays)
    path = tmp_path / "data" / "d.npz"
    path.parent.mkdir()
    np.savez(path, **{k: v for k, v in base.items() if v is not None})
    return str(path)


def _with_value(shape, value):
    x = np.random.default_rng(1).normal(size=shape)
    x[0, 0] = value
    return x


def _error_line(tmp_path, capsys, argv):
    out = tmp_path / "out"
    assert cli.main([*argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-ils: error: "), err
    assert not out.exists()
    return err[0]


@pytest.mark.parametrize(
    "arrays, message",
    [
        (dict(x_train=_with_value((60, 4), np.nan)), "`x_train` in {path}. Expected finite numbers. Received: 1 NaN"),
        (
            dict(x_test=_with_value((30, 4), np.inf)),
            "`x_test` in {path}. Expected finite numbers. Received: 0 NaN and 1 inf",
        ),
        (
            dict(x_train=np.zeros((0, 4)), y_train=np.zeros(0, int)),
            "`x_train` in {path}. Expected at least one example",
        ),
        (dict(x_train=np.zeros(60), x_test=np.zeros(30)), "one feature per example is [n, 1]: x_train[:, None]"),
        (dict(x_test=np.zeros((30, 3))), "`x_test` in {path}. Expected examples shaped like those of x_train"),
        (dict(x_train=np.array([["a"] * 4] * 60)), "`x_train` in {path}. Expected real numbers"),
        (dict(y_train=np.arange(60) % 3 - 1), "`y_train` in {path}. Expected class indices >= 0"),
        (dict(y_test=np.arange(30) % 4), "Received: labels [3] that never appear in y_train"),
        (dict(y_train=np.array([0, 1, 3] * 20), y_test=np.zeros(30, int)), "no example of class(es) [2]"),
        (dict(y_train=np.zeros(60, int), y_test=np.zeros(30, int)), "at least 2 classes"),
        (dict(y_train=np.arange(60) % 3.0), "a 1-D array of integer class indices"),
        (dict(y_train=np.arange(59) % 3), "x_train has 60 rows but y_train has 59"),
        (dict(y_test=None), "lacks the arrays ['y_test']"),
        (dict(y_train=np.array([0, 1] * 29 + [0, 2])), "validation split has no example of class 2 (training 1"),
    ],
)
def test_bad_npz(tmp_path, capsys, no_training, arrays, message):
    path = _npz(tmp_path, **arrays)
    line = _error_line(tmp_path, capsys, ["run", "--dataset", path, "--epochs", "1"])
    assert message.format(path=path) in line


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-classes", "2"], "`y_train` in {path}. Expected class indices in [0, 2) (num_classes=2)"),
        (["--num-classes", "5"], "Expected at least one example of every class in [0, 5)"),
        (["--num-classes", "1"], "Invalid value for argument `--num-classes`. Expected an integer >= 2"),
    ],
)
def test_num_classes(tmp_path, capsys, no_training, flags, message):
    path = _npz(tmp_path)
    assert message.format(path=path) in _error_line(tmp_path, capsys, ["run", "--dataset", path, *flags])


@pytest.mark.parametrize("command", ["run", "tune"])
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--epochs", "0"], "Invalid value for argument `--epochs`. Expected an integer >= 1. Received: --epochs=0"),
        (["--epochs", "-3"], "Received: --epochs=-3"),
        (["--batch-size", "0"], "Invalid value for argument `--batch-size`. Expected an integer >= 1"),
        (["--seed", "-1"], "Expected an integer in [0, 2**63). Received: --seed=-1"),
        (["--seed", str(2**63)], "Invalid value for argument `--seed`. Expected an integer in [0, 2**63)."),
        (["--validation-fraction", "0"], "Invalid value for argument `--validation-fraction`. Expected a number in"),
        (["--validation-fraction", "1"], "Received: --validation-fraction=1.0"),
        (["--validation-fraction", "1.5"], "Received: --validation-fraction=1.5"),
        (["--validation-fraction", "nan"], "Received: --validation-fraction=nan"),
        (["--num-classes", "0"], "Invalid value for argument `--num-classes`"),
    ],
)
def test_bad_number_flags(tmp_path, capsys, no_training, command, flags, message):
    assert message in _error_line(tmp_path, capsys, [command, *flags])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "--max-trials", "0"], "Invalid value for argument `--max-trials`. Expected an integer >= 1"),
        (["benchmark", "synthetic", "--replicates", "0"], "Invalid value for argument `--replicates`"),
        (["benchmark", "synthetic", "--seed", "-2"], "Invalid value for argument `--seed`"),
    ],
)
def test_bad_number_flags_of_tune_and_benchmark(tmp_path, capsys, monkeypatch, no_training, argv, message):
    from keras_ils_experiments import synthetic_protocol

    monkeypatch.setattr(synthetic_protocol, "run_replicates", lambda *a, **k: pytest.fail("trained"))
    assert message in _error_line(tmp_path, capsys, argv)


def test_synthetic_with_other_num_classes(tmp_path, capsys, no_training):
    assert "the synthetic task has 3 classes" in _error_line(tmp_path, capsys, ["run", "--num-classes", "4"])


def test_scarce_class_is_one_warning_line_then_the_run(tmp_path, capsys, monkeypatch):
    def stop(*args, **kwargs):
        raise ValueError("stopped before training")

    monkeypatch.setattr(pipeline, "run", stop)
    path = _npz(tmp_path, y_train=np.array([0, 1] * 25 + [2] * 10))  # class 2: 2 validation examples
    assert cli.main(["run", "--dataset", path, "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[1] == "keras-ils: error: stopped before training"
    assert err[0].startswith(
        f"keras-ils: warning: {path}: the validation split has fewer than 5 examples of class 2 (2)"
    )
    assert "the hyperparameter choice rest on that many examples" in err[0]


def test_default_validation_fraction_is_20_percent():
    for command in ("run", "tune"):
        assert cli.build_parser().parse_args([command]).validation_fraction == 0.2


def test_benchmark_with_an_unwritable_output_directory_fails_before_training(capsys, monkeypatch):
    from keras_ils_experiments import synthetic_protocol

    monkeypatch.setattr(synthetic_protocol, "run_replicates", lambda *a, **k: pytest.fail("trained"))
    assert cli.main(["benchmark", "synthetic", "--quick", "--output-dir", "/proc/keras-ils-test/out"]) == 2
    assert "Cannot write the output directory" in capsys.readouterr().err
