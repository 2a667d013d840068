import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # half a minute or more on 2 cores; run with -m slow
def test_synthetic_quickstart_runs_and_reports_every_model(capsys):
    rows = _load("synthetic_quickstart").main(["--quick", "--seed", "1"])
    assert list(rows) == ["Bayes-optimal", "Teacher (No LS + TempS)", "No LS", "LS", "ILS1", "ILS2", "ILS"]
    for row in rows.values():
        assert 0.3 < row["top_label_accuracy"] <= 1.0
        assert all(np.isfinite(row[c]) and row[c] >= 0 for c in ("nll", "ece", "cwece", "class_conditional_ece"))
    out = capsys.readouterr().out
    assert "paper-cwECE" in out and "ILS1" in out


@pytest.mark.parametrize(
    "extra",
    [pytest.param([], marks=pytest.mark.slow), pytest.param(["--online"], marks=pytest.mark.slow)],
    ids=["cached-teacher", "online-teacher"],
)  # each about 18 s on 2 cores; the tfds path is tested by default with mock data in tests/comparison/data
def test_cifar_example_with_mock_tfds(tmp_path, capsys, extra):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=200):  # enough for every CIFAR class in each split
        _load("cifar_tfds").main(
            ["--model", "lenet", "--epochs", "1", "--batch-size", "8", "--cache", str(tmp_path / "t.npz"), *extra]
        )
    out = capsys.readouterr().out
    assert "ILS + TempS" in out and "accuracy" in out


@pytest.mark.slow  # half a minute or more on 2 cores; run with -m slow
def test_self_distillation_example_prints_ours_beside_the_paper(capsys):
    means = _load("self_distillation").main(["--replicates", "1", "--quick"])
    assert list(means) == ["Bayes-optimal", "No LS", "LS", "ILS"]
    for acc, ce, ece, paper_cwece, cwece in means.values():
        assert 0.3 < acc <= 1 and np.isfinite(ce) and min(ece, paper_cwece, cwece) >= 0
    assert "(paper)" in capsys.readouterr().out


@pytest.mark.slow  # about a minute on 2 cores; run with -m slow
def test_tune_synthetic_example_prints_ls_and_ils_beside_the_paper(tmp_path, capsys):
    rows = _load("tune_synthetic").main(["--quick", "--directory", str(tmp_path)])
    assert list(rows) == [("LS", False), ("LS", True), ("ILS", False), ("ILS", True)]
    for row in rows.values():
        assert row["trials"] == 3 and np.isfinite(row["val_nll"]) and 0.3 < row["all"]["accuracy"] <= 1.0
    out = capsys.readouterr().out
    assert out.count("  paper") == 4 and "temperature" in out


@pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_synthetic_protocol_example_quick(tmp_path, capsys):
    summary = _load("synthetic_protocol").main(["--quick", "--replicates", "1", "--output-dir", str(tmp_path)])
    rows = {(r["method"], r["temps"]): r for r in summary["rows"]}
    assert len(rows) == 15 and rows[("Standard LS (sparse validation)", False)]["paper"]["epsilon"] == 0.122
    for row in rows.values():
        assert 0.3 < row["ours"]["accuracy"] <= 1.0 and np.isfinite(row["ours"]["nll"])
    assert "| ILS | Yes |" in capsys.readouterr().out
    assert (tmp_path / "best_smoothing_bayes.png").stat().st_size > 1000


@pytest.mark.slow  # a CNN teacher and four students by model.fit (about a minute on 2 cores)
def test_compare_digits_cnn_example(tmp_path, capsys):
    found = _load("compare_digits_cnn").main(
        ["--seeds", "1", "--epochs", "1", "--no-tune", "--calibrators", "temperature", "--output-dir", str(tmp_path)]
    )
    assert found.rows[:2] == ["No LS", "No LS + TempS"] and found.runs[0]["model"] == "small_cnn"
    assert "Best: " in capsys.readouterr().out
