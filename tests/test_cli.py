import csv
import json
import os
import re
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow_datasets as tfds

import keras_ils.methods
import keras_ils_cli as cli


def test_run_end_to_end_on_reduced_synthetic(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(
        [
            "run",
            "--epochs",
            "3",
            "--methods",
            "ls,ils",
            "--output-dir",
            str(out),
            "--teacher-cache",
            str(tmp_path / "cache" / "teacher.npz"),
        ]
    )
    assert code == 0
    names = ["No LS", "No LS + TempS", "LS", "LS + TempS", "ILS", "ILS + TempS"]
    results = json.loads((out / "results.json").read_text())
    assert [row["model"] for row in results["rows"]] == names
    assert results["dataset"] == "synthetic" and results["model"] == "mlp" and results["teacher_temperature"] > 0
    for row in results["rows"]:
        assert row["all"]["count"] == 15000 and row["dense"]["count"] + row["sparse"]["count"] == 15000
        assert 0 <= row["all"]["accuracy"] <= 1 and np.isfinite(row["all"]["nll"])
    grid = {"p1": (0.75, 0.775, 0.8, 0.825, 0.85), "p2": (0.75, 1.0, 1.25, 1.5, 1.75, 2.0), "temperature": (1, 2, 4, 6)}
    for row in results["rows"][4:]:  # tuned by default over the synthetic appendix grids: 5 x 6 x 4
        assert row["candidates"] == 120 and all(row["hyperparameters"][k] in v for k, v in grid.items())
    assert results["tuned"] is True and results["engine"] == "vectorised" and results["models_trained"] == 1 + 12 + 120
    with open(out / "results.csv") as file:
        table = list(csv.DictReader(file))
    assert [r["model"] for r in table] == names
    assert float(table[2]["ece"]) == pytest.approx(results["rows"][2]["all"]["ece"])
    with np.load(out / "test_nll.npz") as per_example:  # the paired verdict's data: each row's mean is its NLL
        assert sorted(per_example.files) == sorted([*names, "test:fingerprint"])  # and which examples were scored
        for row in results["rows"]:
            nll = per_example[row["model"]]
            assert nll.shape == (15000,) and nll.mean() == pytest.approx(row["all"]["nll"], rel=1e-5)
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 7 and "reliability_ils_plus_temps.png" in pngs and "comparison.png" in pngs
    assert len(list(out.glob("model_*.keras"))) == 6
    assert os.path.exists(tmp_path / "cache" / "teacher.npz")
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [".keras-ils-manifest.json"]  # no staging
    printed = capsys.readouterr().out
    assert (
        "paper-cwECE" in printed and "ILS + TempS" in printed and "acc dense" in printed and "(best of 120)" in printed
    )


@pytest.fixture(scope="module")
def piped_fixed_run(tmp_path_factory):
    """`keras-ils run --no-tune` as a user runs it: its own process, stdout and stderr piped, umask 022. Shared by
    the tests of fixed values, of what goes to stdout and stderr, and of the output's permissions."""
    out = tmp_path_factory.mktemp("piped") / "run"
    argv = ["run", "--epochs", "3", "--methods", "ls,ils", "--p1", "0.85", "--no-tune", "--output-dir", str(out)]
    old = os.umask(0o022)  # the child's
    try:
        result = subprocess.run(
            [sys.executable, "-m", "keras_ils_cli", *argv], capture_output=True, text=True, timeout=600
        )
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_run_with_fixed_values_trains_one_student_per_method(piped_fixed_run):
    out, result = piped_fixed_run
    results = json.loads((out / "results.json").read_text())
    assert results["tuned"] is False and results["models_trained"] == 3
    assert results["rows"][2]["hyperparameters"] == {"epsilon": 0.05}  # the synthetic defaults, P1 as given
    assert results["rows"][4]["hyperparameters"] == {"p1": 0.85, "p2": 2.0, "temperature": 1.0}
    assert "not tuned" in result.stdout


# 10-14 s: a whole run with cross-fitted teachers; by default their parts run alone (test_students' teacher folds,
# test_stored_features' raw-feature models, test_calibrator_rows' maps)
@pytest.mark.slow
def test_run_on_an_npz_with_a_chosen_mlp_and_cross_fitted_teachers(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 5))
    y = (x[:, 0] + 0.5 * rng.normal(size=160) > 0).astype(int) + (x[:, 1] > 0.8)
    stored = 50.0 + 10.0 * x  # features far from standardised: a saved model must scale them itself (issue 23)
    np.savez(tmp_path / "d.npz", x_train=stored[:120], y_train=y[:120], x_test=stored[120:], y_test=y[120:])
    argv = ["run", "--dataset", str(tmp_path / "d.npz"), "--model", "mlp-2-8", "--teacher-folds", "3"]
    argv += ["--calibrators", "ts,vs", "--methods", "ils1", "--epochs", "5", "--output-dir", str(tmp_path / "r")]
    assert cli.main(argv) == 0
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["model"] == "mlp-2-8" and results["engine"] == "vectorised" and results["teacher_folds"] == 3
    assert results["folds_temperature"] > 0 and results["models_trained"] == 1 + 25
    names = ["No LS", "No LS + TempS", "No LS + VS", "ILS1", "ILS1 + TempS", "ILS1 + VS"]
    assert [row["model"] for row in results["rows"]] == names
    assert [row["candidates"] for row in results["rows"][3:]] == [25, 25, 25]
    # 24 validation examples for vector scaling's 6 parameters: the small-data rule's fit (keras_ils.calibration)
    assert results["rows"][2]["temperature"] is None
    assert results["rows"][2]["temperature_status"] in ("regularised", "temperature")
    # every model saved takes the stored (raw) features: loaded without custom objects (keras_ils is imported), on
    # the file's x_test it gives its row's test NLL and accuracy; results.json records the preprocessing
    train_rows = stored[:120]  # the stratified split keeps 80 %: the statistics are those rows', checked loosely here
    assert np.allclose(results["preprocessing"]["mean"], train_rows.mean(0), atol=3.0)
    for row in results["rows"]:
        slug = row["model"].lower().replace(" ", "_").replace("+", "plus")
        logits = keras.saving.load_model(tmp_path / "r" / f"model_{slug}.keras").predict(stored[120:], verbose=0)
        z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
        nll = -(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))[np.arange(40), y[120:]].mean()
        assert nll == pytest.approx(row["all"]["nll"], rel=1e-4), row["model"]
        assert (logits.argmax(1) == y[120:]).mean() == pytest.approx(row["all"]["accuracy"]), row["model"]
    assert (tmp_path / "r" / "comparison.png").stat().st_size > 10_000


def _run_lenet_on_mock_cifar(tmp_path, *flags):
    with tfds.testing.mock_data(num_examples=200):  # every class in validation
        argv = ["run", "--dataset", "tfds:cifar10", "--model", "lenet", "--batch-size", "8", *flags]
        return cli.main([*argv, "--output-dir", str(tmp_path / "r")])


@pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
def test_run_on_tfds_images_with_lenet_tunes_within_the_printed_hyperband_budget(tmp_path, capsys):
    assert _run_lenet_on_mock_cifar(tmp_path, "--epochs", "2", "--methods", "ils", "--p1", "0.9", "--p2", "1.0") == 0
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["recipe"]["augment"] is True and results["recipe"]["optimizer"] == "sgd"
    assert results["engine"] == "keras-tuner" and results["algorithm"] == "hyperband"
    assert [row["model"] for row in results["rows"]][-1] == "ILS + TempS"
    ils = results["rows"][-2]
    # KerasTuner's Hyperband for max_epochs=2, factor 3: one bracket of ceil(1 + log_3 2) = 2 models of 2 epochs
    assert ils["candidates"] == 5 and ils["trials"] == 2 and ils["hyperparameters"]["temperature"] in (1, 2, 4, 8, 16)
    printed = capsys.readouterr()
    assert printed.out.startswith("cifar10 / lenet: teacher T*")  # the table, and only the table, on stdout
    # on stderr: the search's cost, then each stage named with its models (Hyperband: 2 trials), and an estimate
    assert "ILS: Hyperband over 5 candidates, at most 2 models in 2 trials" in printed.err and "4 epochs" in printed.err
    stage = re.compile(r"(No LS \(teacher\)|ILS): \d+ (model|trial)")
    stages = [line for line in printed.err.splitlines() if stage.match(line)]
    assert stages[0] == "No LS (teacher): 1 model" and stages[-1].startswith("ILS: 2 trials, about ")
    assert "2/2" in printed.err
    assert os.path.isdir(tmp_path / "r" / "search" / "ils")  # the search is kept beside the results (resumable)


def test_budget_search_needs_two_epochs(tmp_path, capsys):
    assert _run_lenet_on_mock_cifar(tmp_path, "--epochs", "1", "--methods", "ils") == 2
    assert "--search full" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dataset", "imagenet"], "Unknown dataset"),
        (["--dataset", "tfds:no_such_dataset_xyz"], "Unknown tensorflow-datasets name"),
        (["--dataset", "missing.npz"], "No such .npz"),
        (["--p1", "1.5"], "Invalid value for argument `p1`"),
        (["--model", "vgg"], "Invalid value for argument `model`"),
        (["--validation-size", "0"], "Invalid value for argument `--validation-size`"),
        (["--validation-size", "100"], "Expected a multiple of 3 for the synthetic task"),
        (["--train-splits", "train+extra"], "apply to tfds datasets only"),
    ],
)
def test_bad_input_is_one_error_line_and_no_files(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert cli.main(["run", "--epochs", "1", "--output-dir", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-ils: error:") and message in err[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_papers_svhn_split_by_flag(tmp_path, monkeypatch):
    from keras_ils.comparison.data import datasets

    asked = {}

    def load(spec, **options):
        asked.update(options, spec=spec)
        raise ValueError("stop here")

    monkeypatch.setattr(datasets, "load", load)
    argv = ["run", "--dataset", "tfds:svhn_cropped", "--train-splits", "train+extra", "--validation-size", "6000"]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "o")]) == 2
    assert asked["spec"] == "tfds:svhn_cropped"
    assert asked["train_splits"] == ("train", "extra") and asked["validation_size"] == 6000


def test_bad_npz_labels(tmp_path, capsys):
    path = tmp_path / "d.npz"
    np.savez(
        path, x_train=np.zeros((10, 2)), y_train=np.zeros(9, int), x_test=np.zeros((4, 2)), y_test=np.zeros(4, int)
    )
    assert cli.main(["run", "--dataset", str(path), "--output-dir", str(tmp_path / "o")]) == 2
    assert "x_train has 10 rows but y_train has 9" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unreadable_teacher_cache_fails_before_training(tmp_path, capsys, monkeypatch):
    from keras_ils.comparison.engine import training

    cache = tmp_path / "teacher.npz"
    cache.write_bytes(b"garbage")
    monkeypatch.setattr(training, "fit", lambda *a, **k: pytest.fail("trained before checking the cache"))
    assert cli.main(["run", "--teacher-cache", str(cache), "--output-dir", str(tmp_path / "o")]) == 2
    assert "not a readable teacher-logits cache" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # the piped run shared by three tests (~30 s on 2 cores; issue 22: default run <= 5 min)
def test_output_directory_gets_ordinary_permissions(piped_fixed_run):
    out, _ = piped_fixed_run  # made under umask 022
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)
    assert oct((out / "results.json").stat().st_mode & 0o777) == oct(0o644)
    assert oct((out / "reliability_ls.png").stat().st_mode & 0o777) == oct(0o644)


def test_unwritable_output_directory(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["run", "--epochs", "1", "--output-dir", str(blocker / "sub" / "out")]) == 2
    assert "Cannot write the output directory" in capsys.readouterr().err


def test_failure_mid_run_leaves_nothing(tmp_path, monkeypatch):
    from keras_ils.comparison.main_job import engine_path

    def broken(*args, **kwargs):
        raise ValueError("boom in the middle")

    monkeypatch.setattr(engine_path, "record_engine_method", broken)  # after the search and the teacher's rows
    assert cli.main(["run", "--epochs", "1", "--methods", "ls", "--output-dir", str(tmp_path / "o")]) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # 16 s: three whole runs; tests/comparison/test_runs.py runs two seeds by the same path
def test_three_seeds_give_each_rows_mean_and_spread_and_end_with_the_verdict(tmp_path, capsys):
    from scipy import stats

    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.4)
    np.savez(tmp_path / "d.npz", x_train=x[:90], y_train=y[:90], x_test=x[90:], y_test=y[90:])
    out = tmp_path / "o"
    argv = ["run", "--dataset", str(tmp_path / "d.npz"), "--seeds", "3", "--seed", "3", "--epochs", "1"]
    argv += ["--methods", "ls", "--no-tune", "--output-dir", str(out)]  # the calibrators' rows: test_calibrator_rows
    assert cli.main(argv) == 0
    per_seed = [json.loads((out / f"seed{s}" / "results.json").read_text()) for s in (3, 4, 5)]
    summary = json.loads((out / "summary.json").read_text())
    names = ["No LS", "No LS + TempS", "LS", "LS + TempS"]
    assert summary["seeds"] == [3, 4, 5] and [r["seed"] for r in per_seed] == [3, 4, 5]
    assert [row["model"] for row in summary["rows"]] == names
    for i, row in enumerate(summary["rows"]):
        for metric in ("accuracy", "nll", "ece", "smooth_ece", "cwece"):
            values = np.array([r["rows"][i]["all"][metric] for r in per_seed])
            assert row[metric]["mean"] == pytest.approx(values.mean())
            assert row[metric]["std"] == pytest.approx(np.std(values, ddof=1))
    assert (out / "comparison.png").exists() and (out / "seed4" / "model_ls_plus_temps.keras").exists()
    # the verdict: each row's per-example test NLL minus No LS + TempS's; the .npz keeps one test split, so every
    # example counts once: the two-way (seed x example) ANOVA's variance of the mean, (MS_seed + max(MS_example -
    # MS_residual, 0)) / (S n), Student t on S - 1 degrees of freedom
    found = json.loads((out / "verdict.json").read_text())
    assert found["reference"] == "No LS + TempS" and found["seeds"] == 3 and found["shared_examples"] is True
    rows = found["families"]["training methods"]
    assert list(found["families"]) == ["training methods"] and sorted(rows["rows"]) == ["LS", "LS + TempS", "No LS"]
    example = [dict(np.load(out / f"seed{s}" / "test_nll.npz")) for s in (3, 4, 5)]
    for row in ("No LS", "LS", "LS + TempS"):
        d = np.stack([e[row].astype(np.float64) - e["No LS + TempS"] for e in example])
        s, n = d.shape
        mean, by_seed, by_example = d.mean(), d.mean(axis=1), d.mean(axis=0)
        ms_seed = n * ((by_seed - mean) ** 2).sum() / (s - 1)
        ms_example = s * ((by_example - mean) ** 2).sum() / (n - 1)
        ms_residual = ((d - by_seed[:, None] - by_example + mean) ** 2).sum() / ((s - 1) * (n - 1))
        se = np.sqrt((ms_seed + max(ms_example - ms_residual, 0.0)) / (s * n))
        q = stats.t.ppf(0.975, s - 1)
        got = rows["rows"][row]
        assert got["difference"] == pytest.approx(mean, abs=1e-12)
        assert got["interval"] == pytest.approx([mean - q * se, mean + q * se], abs=1e-12)
        if se > 0:
            assert got["pvalue"] == pytest.approx(2 * stats.t.sf(abs(mean / se), s - 1), rel=1e-6)
        nll = np.mean([r["rows"][names.index(row)]["all"]["nll"] for r in per_seed])  # 30 test examples per seed
        assert got["nll"] == pytest.approx(nll, rel=1e-5)
    assert found["sentence"].startswith(("Use ", "Keep No LS + TempS: "))
    assert found["sentence"] in (out / "verdict.md").read_text() and not list(out.glob("cd_*.png"))
    captured = capsys.readouterr()
    printed = captured.out
    assert "mean ± standard deviation over 3 seeds (3, 4, 5)" in printed
    assert (
        "Verdict: test NLL per example, each row minus No LS + TempS on the same examples (3 seeds on one test "
        "split of 30 examples, each counted once;" in printed
    )
    assert printed.rstrip().splitlines()[-1] == found["sentence"]
    # 18 validation examples: every seed's temperature fits warn, and the command shows each kind of warning once
    warned = [line for line in captured.err.splitlines() if line.startswith("keras-ils: warning: ")]
    fits = [line for line in warned if "Temperature scaling:" in line]
    regularised = sum(row["temperature_status"] == "regularised" for r in per_seed for row in r["rows"])
    assert len(fits) == 1 and regularised >= 3
    assert re.fullmatch(r"keras-ils: warning: \d+ more warnings of a kind shown above .* not repeated; .*", warned[-1])


@pytest.mark.parametrize(
    "seeds, no_ls, line",
    [  # the reference's per-example NLL is [0.4, 0.6, 0.5] in every seed
        ("2", [0.5, 0.7, 0.6], "Keep No LS + TempS: it has the lowest test NLL (0.500) of the rows compared."),
        ("3", [0.5, np.nan, 0.6], "No verdict: Invalid value for argument `example_nll`. Expected finite per-example"),
        ("2", None, "No verdict: [Errno 2] No such file or directory"),
    ],
)
def test_the_verdicts_last_line_or_why_there_is_none(tmp_path, capsys, monkeypatch, seeds, no_ls, line):
    from keras_ils.comparison.main_job import pipeline

    bins = {"counts": [0, 10], "correct": [0, 8], "confidence": [0, 9.0]}

    def run(splits, config):  # two rows' results and test_nll.npz, as pipeline.run writes them, without training
        scores = {name: 0.1 + config.seed for name in ("accuracy", "nll", "ece", "smooth_ece", "cwece")}
        rows = [{"model": m, "temperature": 1.0, "temperature_status": None, "hyperparameters": {}, "all": scores}
                for m in ("No LS", "No LS + TempS")]  # fmt: skip
        if no_ls is not None:
            os.makedirs(config.output_dir, exist_ok=True)
            example = {"No LS": np.array(no_ls), "No LS + TempS": np.array([0.4, 0.6, 0.5])}
            np.savez(os.path.join(config.output_dir, "test_nll.npz"), **example)
        header = dict(
            dataset="synthetic", model="mlp", seed=config.seed, teacher_temperature=1.0, validation_examples=9
        )
        header.update(teacher_temperature_status="fitted", temperature_estimator="map")
        return {**header, "rows": rows, "reliability_bins": {r["model"]: bins for r in rows}}

    monkeypatch.setattr(pipeline, "run", run)
    monkeypatch.setattr(cli_reporting_results(), "format_table", lambda results: "table")
    assert cli.main(["run", "--seeds", seeds, "--output-dir", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith(line)
    assert (tmp_path / "o" / "verdict.json").exists() == line.startswith("Keep")
    assert (tmp_path / "o" / "summary.json").exists()


def cli_reporting_results():
    from keras_ils.comparison.reporting import results

    return results


def test_several_seeds_cannot_share_a_teacher_cache(tmp_path, capsys):
    argv = ["run", "--seeds", "2", "--teacher-cache", str(tmp_path / "t.npz"), "--output-dir", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert "--teacher-cache holds one teacher's logits" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_help_imports_no_tensorflow():
    probe = (
        "import sys, keras_ils_cli\n"
        "for argv in [['--help']] + [[c, '--help'] for c in ('run', 'tune', 'benchmark', 'methods')]:\n"
        "    try:\n"
        "        keras_ils_cli.main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, argv\n"
        "print(sorted({'tensorflow', 'keras', 'keras_ils', 'jax', 'torch'} & set(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "[]"


def test_the_parsers_lists_are_the_main_jobs():
    from keras_ils.calibration import METHODS
    from keras_ils.comparison.main_job import config

    assert cli.CALIBRATOR_NAMES == tuple(config.CALIBRATORS) == METHODS and cli.RUN_METHODS == config.DEFAULT_METHODS
    assert cli.CALIBRATOR_ALIASES == config.CALIBRATOR_ALIASES
    assert set(config.CALIBRATOR_ALIASES.values()) <= set(METHODS)
    assert cli.build_parser().parse_args(["run"]).methods == config.DEFAULT_METHODS
    parse = cli.build_parser().parse_args
    assert parse(["run"]).calibrators == config.RunConfig().calibrators == ("temperature",)
    assert parse(["run", "--calibrators", "all"]).calibrators == tuple(config.CALIBRATORS)
    assert parse(["run", "--calibrators", "isotonic,ts,isotonic,temperature,dir"]).calibrators == (
        "isotonic", "temperature", "dirichlet")  # fmt: skip


def test_unknown_calibrator_is_a_usage_error_naming_them_all(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--calibrators", "ts,platt"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "argument --calibrators: expected 'all' or a comma-separated subset of" in err
    assert ",".join(cli.CALIBRATOR_NAMES) in err


def test_the_parsers_synthetic_options_are_the_protocols():
    from keras_ils_experiments.synthetic_protocol import run

    assert cli.SYNTHETIC_PRESETS == tuple(run.PRESETS) and cli.TEACHER_GRIDS == run.TEACHER_GRIDS
    assert cli.SMOOTHING_MASSES == run.SMOOTHING_MASSES and cli.VALIDATION_LOSSES == run.VALIDATION_LOSSES


def test_the_model_help_names_every_network():
    from keras_ils_experiments.zoo import models

    model_help = next(
        a.help
        for a in cli.build_parser()._subparsers._group_actions[0].choices["run"]._actions
        if "--model" in a.option_strings
    )
    # resnet32/56/110 are written "resnet20/32/56/110"; every wrn-D-W is covered by the pattern
    named = set(
        re.findall(
            r"[a-z]+[0-9]*(?:sd)?", model_help.replace("resnet20/32/56/110", "resnet20 resnet32 resnet56 resnet110")
        )
    )
    missing = [n for n in models.MODEL_NAMES if n not in named and not n.startswith("wrn-")]
    assert missing == [] and "wrn-D-W" in model_help and "wrn-34-10" in model_help


_NATIVE_WRITES = (
    "import os, sys, keras_ils_cli\n"
    "with keras_ils_cli._native_stderr_hidden({hidden}):\n"
    "    os.write(2, b'native line\\n')\n"
    "    print('python line', file=sys.stderr)\n"
    "os.write(2, b'native after\\n')\n"
)


@pytest.mark.parametrize("hidden", [True, False])
def test_native_stderr_is_hidden_and_python_stderr_kept(hidden):
    probe = _NATIVE_WRITES.format(hidden=hidden)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    expected = ["python line", "native after"] if hidden else ["native line", "python line", "native after"]
    assert result.returncode == 0 and result.stderr.splitlines() == expected


@pytest.mark.slow  # the piped run shared by three tests (~30 s on 2 cores; issue 22: default run <= 5 min)
def test_a_piped_run_prints_the_table_alone_and_no_tensorflow_logging(piped_fixed_run):
    _, result = piped_fixed_run
    lines = result.stdout.splitlines()
    assert lines[0].startswith("synthetic / mlp: teacher T*") and lines[-1].startswith("Hyperparameters fixed")
    names = ["No LS", "No LS + TempS", "LS", "LS + TempS", "ILS", "ILS + TempS"]
    assert [line.split("  ")[0] for line in lines[4:10]] == names
    assert "Results written to" in result.stderr and "Results written to" not in result.stdout
    absl_lines = [line for line in result.stderr.splitlines() if line[:1] in "IWE" and line[1:5].isdigit()]
    assert absl_lines == [] and "absl::InitializeLog" not in result.stderr


def test_help_of_every_subcommand(capsys):
    result = subprocess.run(
        [sys.executable, "-m", "keras_ils_cli", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "usage: keras-ils" in result.stdout  # the real entry point, once
    helps = {}
    for command in ("run", "tune", "benchmark"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        helps[command] = capsys.readouterr().out
        assert exit_info.value.code == 0 and f"usage: keras-ils {command}" in helps[command]
        assert "--temperature-fit" in helps[command]
    assert "--search-space" in helps["tune"] and "KERASTUNER_TUNER_ID" in helps["tune"]


@pytest.mark.slow  # about a minute on 2 cores; run with -m slow
def test_all_methods_give_the_papers_full_list(tmp_path):
    assert cli.main(["run", "--methods", "all", "--epochs", "2", "--output-dir", str(tmp_path / "o")]) == 0
    rows = json.loads((tmp_path / "o" / "results.json").read_text())["rows"]
    names = [row["model"] for row in rows]
    paper = [
        "No LS",
        "No LS + TempS",
        "Dis",
        "cLS",
        "BS_Soft",
        "Beta",
        "LS",
        "LS + TempS",
        "ILS1",
        "ILS2",
        "ILS",
        "ILS + TempS",
    ]
    # every column of the paper's Table 3 (the engine's methods' rows come before BS_Soft's and Beta's, which model.fit
    # trains after it; the table runner picks its columns by name)
    assert sorted(n for n in names if n in paper) == sorted(paper)
    assert len(names) == 2 * len(keras_ils.methods.ids())  # every registered method, each also with + TempS
    assert all(np.isfinite(row["all"]["nll"]) for row in rows)


def test_unknown_method_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--methods", "ls,mixup"])
    assert exit_info.value.code == 2 and "mixup" in capsys.readouterr().err


class TestTune:
    @pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
    def test_end_to_end_then_resumed_without_retraining(self, tmp_path, capsys, monkeypatch):
        from keras_ils import tuning
        from keras_ils.comparison.main_job import fitting

        argv = ["tune", "--epochs", "4", "--algorithm", "random", "--max-trials", "2", "--methods", "ls,ils1"]
        argv += ["--output-dir", str(tmp_path / "o")]
        assert cli.main(argv) == 0
        results = json.loads((tmp_path / "o" / "results.json").read_text())
        names = ["No LS", "No LS + TempS", "LS", "LS + TempS", "ILS1", "ILS1 + TempS"]
        assert [row["model"] for row in results["rows"]] == names
        assert results["search_space"] == "synthetic" and results["algorithm"] == "random"
        grid = tuning.make_search_space("ils1", "synthetic")
        ils1 = results["rows"][4]
        assert ils1["trials"] == 2 and set(ils1["hyperparameters"]) == {"p1", "p2"}
        assert ils1["hyperparameters"]["p1"] in grid["p1"] and ils1["hyperparameters"]["p2"] in grid["p2"]
        assert (
            results["rows"][2]["hyperparameters"]["epsilon"] in tuning.make_search_space("ls", "synthetic")["epsilon"]
        )
        assert ils1["temperature"] == 1.0 and results["rows"][5]["temperature"] > 0
        printed = capsys.readouterr()
        assert "LS: 2 trials, best validation NLL" in printed.out and "ILS1 + TempS" in printed.out
        # each search on stderr, trial by trial (random search: --max-trials each), with the time left in all
        stages = re.findall(
            r"^(No LS \(teacher\)|LS|ILS1): (\d+) models?(, about \d+:\d\d left in all)?$", printed.err, re.M
        )
        assert [(name, count) for name, count, _ in stages] == [("No LS (teacher)", "1"), ("LS", "2"), ("ILS1", "2")]
        assert [bool(left) for _, _, left in stages] == [False, True, True]
        assert "2/2" in printed.err
        # not a terminal: Keras' bar as one line per stage (verbose 2), no carriage returns or colour codes
        assert "\r" not in printed.err and "\x1b[" not in printed.err
        search = sorted(os.listdir(tmp_path / "o" / "search"))
        assert search == ["ils1", "ls", "search_settings.json", "teacher.keras", "teacher_logits.npz"]

        # again on the same directory: the teacher is loaded, no trial trains, the same table comes out
        monkeypatch.setattr(fitting, "fit_network", lambda *a, **k: pytest.fail("the teacher was trained again"))
        monkeypatch.setattr(tuning.ILSHyperModel, "fit", lambda *a, **k: pytest.fail("a trial ran again"))
        assert cli.main(argv) == 0
        again = json.loads((tmp_path / "o" / "results.json").read_text())
        for before, after in zip(results["rows"], again["rows"], strict=True):
            assert after["hyperparameters"] == before["hyperparameters"]
            np.testing.assert_allclose(after["all"]["nll"], before["all"]["nll"], rtol=1e-6)

        # another temperature fit cannot resume this search: its targets and trials depend on the fit
        assert cli.main([*argv, "--temperature-fit", "mle"]) == 2
        assert "was made with temperature_fit 'map', not 'mle'" in capsys.readouterr().err
        # nor another seed or recipe: the teacher and the trials would be another run's
        assert cli.main([*argv, "--seed", "1"]) == 2
        assert "was made with seed 0, not 1" in capsys.readouterr().err
        assert cli.main([*argv[:2], "5", *argv[3:]]) == 2  # --epochs 5
        assert "was made with recipe" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "argv, message",
        [
            (["--max-trials", "0"], "Invalid value for argument `--max-trials`"),
            (["--dataset", "imagenet"], "Unknown dataset"),
        ],
    )
    def test_bad_input_is_one_error_line_before_any_training(self, tmp_path, capsys, argv, message):
        assert cli.main(["tune", "--output-dir", str(tmp_path / "o"), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
        assert list(tmp_path.iterdir()) == []

    def test_distributed_mode_takes_one_method_per_launch(self, tmp_path, capsys, monkeypatch):
        monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
        monkeypatch.setenv("KERASTUNER_ORACLE_PORT", "1")
        monkeypatch.setenv("KERASTUNER_TUNER_ID", "chief")
        assert cli.main(["tune", "--methods", "ls,ils", "--output-dir", str(tmp_path / "o")]) == 2
        assert "one search per launch" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize("argv", [["--methods", "none"], ["--search-space", "coarse"], ["--algorithm", "sa"]])
    def test_usage_errors(self, capsys, argv):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["tune", *argv])
        assert exit_info.value.code == 2 and "usage: keras-ils tune" in capsys.readouterr().err


@pytest.mark.slow  # about a minute on 2 cores; run with -m slow
def test_tune_in_keras_tuners_distributed_mode_with_two_local_workers(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    argv = [sys.executable, "-m", "keras_ils_cli", "tune", "--methods", "ils", "--algorithm", "random"]
    argv += ["--max-trials", "4", "--epochs", "3", "--output-dir", str(tmp_path / "o")]
    oracle = {"KERASTUNER_ORACLE_IP": "127.0.0.1", "KERASTUNER_ORACLE_PORT": port}
    environment = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    processes, logs = [], {}
    for tuner_id in ("chief", "tuner0", "tuner1"):
        logs[tuner_id] = (tmp_path / f"{tuner_id}.out", tmp_path / f"{tuner_id}.err")
        with open(logs[tuner_id][0], "w") as out, open(logs[tuner_id][1], "w") as err:
            env = {**environment, **oracle, "KERASTUNER_TUNER_ID": tuner_id}
            processes.append(subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True))
    for process, (_, err) in zip(processes, logs.values(), strict=True):
        assert process.wait(timeout=300) == 0, err.read_text()[-2000:]
    for worker in ("tuner0", "tuner1"):  # a message: on stderr, as every message (stdout holds tables only)
        assert "no ils trials left" in logs[worker][1].read_text() and logs[worker][0].read_text() == ""
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [row["model"] for row in results["rows"]][-2:] == ["ILS", "ILS + TempS"]
    assert results["rows"][-1]["trials"] == 4
    trials = [
        json.loads((tmp_path / "o" / "search" / "ils" / name / "trial.json").read_text())
        for name in sorted(os.listdir(tmp_path / "o" / "search" / "ils"))
        if name.startswith("trial_")
    ]
    assert [trial["status"] for trial in trials] == ["COMPLETED"] * 4
    best = min(trials, key=lambda trial: trial["score"])
    assert results["rows"][-1]["search_val_nll"] == pytest.approx(best["score"])


class TestBenchmark:
    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_quick_synthetic_protocol_writes_the_table_beside_the_papers(self, tmp_path, capsys):
        from keras_ils.comparison.data import synthetic

        out = tmp_path / "bench"
        argv = ["benchmark", "synthetic", "--quick", "--replicates", "2", "--seed", "3", "--output-dir", str(out)]
        assert cli.main(argv) == 0
        captured = capsys.readouterr()
        printed = captured.out
        assert "| Bayes-Optimal | No |" in printed and "sign test" in printed
        # progress on stderr: each stage with the models done of all planned, and the time left until the last
        stages = re.findall(r"^(.*): (\d+)/42 models, \d+:\d\d so far(, about \d+:\d\d left)?$", captured.err, re.M)
        assert [(stage, int(done), bool(left)) for stage, done, left in stages] == [
            ("No LS and LS models of 2 replicates", 10, True),
            ("ILS models of replicates 2/2", 34, True),
            ("self-distillation students", 42, False),
        ]
        assert sorted(os.listdir(out)) == [
            ".keras-ils-manifest.json",
            "best_smoothing_bayes.png",
            "best_smoothing_no_ls_temps.png",
            "prediction_histograms.png",
            "synthetic_protocol.json",
            "synthetic_protocol.md",
        ]
        document = json.loads((out / "synthetic_protocol.json").read_text())
        assert document["command"] == "keras-ils " + " ".join(argv)
        rows = {(r["method"], r["temps"]): r for r in document["summary"]["rows"]}
        assert rows[("ILS", False)]["paper"]["nll"] == 0.5089
        # the Bayes-optimal row, computed here independently on the same test sets (seeds 3 + 20000, 4 + 20000)
        accuracies = []
        for seed in (3, 4):
            test = synthetic.make_dataset(200, seed=seed + 20_000)
            accuracies.append(np.mean(synthetic.bayes_probabilities(test.x).argmax(1) == test.y))
        np.testing.assert_allclose(rows[("Bayes-Optimal", False)]["ours"]["accuracy"], np.mean(accuracies), rtol=1e-6)
        # per replicate: No LS, 3 LS, LS-0.2, 2 ILS1, 6 ILS2, 4 ILS, then Table 2's 4 self-distillation students
        assert document["results"]["models_trained"] == 2 * (1 + 3 + 1 + 2 + 6 + 4 + 4)

    @pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
    def test_a_preset_and_its_overrides_reach_the_protocol(self, tmp_path, capsys):
        out = tmp_path / "bench"
        argv = ["benchmark", "synthetic", "--quick", "--replicates", "1", "--output-dir", str(out)]
        argv += ["--preset", "authors", "--batch-size", "64", "--teacher-grid", "paper"]
        assert cli.main(argv) == 0
        results = json.loads((out / "synthetic_protocol.json").read_text())["results"]
        expected = dict(
            preset="authors",
            init="pytorch",
            shared_seeds=False,
            temperature_estimator="authors",
            teacher_grid="paper",  # overridden
            batch_size=64,  # overridden
            weight_decay=1e-4,
            smoothing_mass="wrong_classes",
            validation_loss="batch_mean",
        )
        assert {name: results[name] for name in expected} == expected
        assert "Invalid value for argument `--weight-decay`" in self._error(["--weight-decay", "-1"], tmp_path, capsys)
        assert "invalid choice: 'bert'" in self._error(["--preset", "bert"], tmp_path, capsys)

    @staticmethod
    def _error(extra, tmp_path, capsys):
        argv = ["benchmark", "synthetic", "--quick", "--output-dir", str(tmp_path / "bad"), *extra]
        try:
            code = cli.main(argv)
        except SystemExit as exit_info:  # argparse's own errors
            code = exit_info.code
        assert code == 2 and not (tmp_path / "bad").exists()
        return capsys.readouterr().err

    def test_bad_replicates_is_one_error_line_and_no_files(self, tmp_path, capsys):
        out = tmp_path / "bench"
        assert cli.main(["benchmark", "synthetic", "--replicates", "0", "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("keras-ils: error:") and "--replicates" in err[0]
        assert list(tmp_path.iterdir()) == []


class TestRealData:
    """scikit-learn's wine set (178 examples) as a user's .npz: the temperature fits and the output directory."""

    @pytest.fixture
    def wine(self, tmp_path):
        sklearn_datasets = pytest.importorskip("sklearn.datasets")
        x, y = sklearn_datasets.load_wine(return_X_y=True)
        order = np.random.default_rng(0).permutation(len(y))
        test, train = order[:45], order[45:]
        path = tmp_path / "wine.npz"
        np.savez(path, x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test])
        return str(path)

    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_temperature_fits_are_reported_and_sane_and_a_rerun_replaces_the_results(self, tmp_path, capsys, wine):
        out = tmp_path / "run"
        assert cli.main(["run", "--dataset", wine, "--methods", "ls", "--epochs", "40", "--output-dir", str(out)]) == 0
        results = json.loads((out / "results.json").read_text())
        n_val = results["validation_examples"]
        assert n_val == 27 and results["temperature_estimator"] == "map"  # 20 % of 133, stratified
        assert results["teacher_temperature_status"] in ("fitted", "regularised")
        assert 0.05 <= results["teacher_temperature"] <= 20
        rows = {row["model"]: row for row in results["rows"]}
        for name in ("No LS", "LS"):
            raw, scaled = rows[name], rows[f"{name} + TempS"]
            assert raw["temperature_status"] is None and raw["temperature"] == 1.0
            assert scaled["temperature_status"] in ("fitted", "regularised") and scaled["validation_examples"] == n_val
            assert scaled["all"]["nll"] <= 1.5 * raw["all"]["nll"] + 0.05
        printed = capsys.readouterr()
        assert f"fit on {n_val} validation examples" in printed.out
        for line in printed.err.splitlines():  # the package's warnings, one line each
            assert not line.startswith("keras_ils") and (
                "Temperature scaling" not in line or "keras-ils: warning" in line
            )
        with open(out / "results.csv") as file:
            assert {"temperature_status", "validation_examples"} <= set(csv.DictReader(file).fieldnames)

        assert cli.main(["run", "--dataset", wine, "--methods", "ils1", "--epochs", "2", "--output-dir", str(out)]) == 0
        pngs = sorted(p.name for p in out.glob("*.png"))
        assert "reliability_ls.png" not in pngs and "reliability_ils1.png" in pngs and len(pngs) == 5  # + comparison
        assert not (out / "model_ls.keras").exists() and (out / "model_ils1.keras").exists()

    @pytest.mark.slow  # ~10 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_the_authors_bounded_fit_on_request(self, tmp_path, wine):
        out = tmp_path / "run"
        argv = ["run", "--dataset", wine, "--methods", "ls", "--epochs", "2", "--temperature-fit", "authors"]
        assert cli.main([*argv, "--output-dir", str(out)]) == 0
        results = json.loads((out / "results.json").read_text())
        assert results["temperature_estimator"] == "authors"
        assert all(0.8 <= row["temperature"] <= 3.0 for row in results["rows"])


def test_help_reads_as_user_help_ending_with_examples(capsys):
    for argv in (["--help"], ["run", "--help"], ["tune", "--help"], ["benchmark", "--help"], ["methods", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        text = capsys.readouterr().out
        assert exit_info.value.code == 0 and "keras_ils" not in text and "This module" not in text, argv
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-10] == "examples:" and lines[-1].startswith("  keras-ils benchmark paper --table 3")


@pytest.fixture
def captured_run(monkeypatch):
    """`pipeline.run` replaced by one that keeps its config and stops before training."""
    from keras_ils.comparison.main_job import pipeline

    configs = []

    def run(splits, config):
        configs.append(config)
        raise ValueError("stopped before training")

    monkeypatch.setattr(pipeline, "run", run)
    return configs


def test_the_output_folder_is_named_from_the_datas_stem(tmp_path, monkeypatch, captured_run):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "bc.npz", x_train=rng.normal(size=(40, 3)), y_train=np.arange(40) % 2,
             x_test=rng.normal(size=(10, 3)), y_test=np.arange(10) % 2)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--dataset", "bc.npz", "--seed", "3"]) == 2
    # the run is staged inside runs/bc-mlp-seed3 (its result set replaced at the end); its searches go inside it
    assert captured_run[0].directory == str(tmp_path / "runs" / "bc-mlp-seed3" / "search")
    staging = captured_run[0].output_dir
    assert os.path.dirname(staging) == str(tmp_path / "runs" / "bc-mlp-seed3")
    assert os.path.basename(staging).startswith(".keras-ils-staging-")


def test_methods_are_the_registrys_without_duplicates(tmp_path, captured_run):
    from keras_ils import methods

    argv = ["run", "--output-dir", str(tmp_path / "o"), "--methods"]
    assert cli.main([*argv, "ils,ls,ils"]) == 2 and captured_run[-1].methods == ("ils", "ls")
    assert cli.main([*argv, "all"]) == 2 and captured_run[-1].methods == methods.ids(selectable=True)
    assert captured_run[-1].methods[:8] == ("dis", "cls", "bs_soft", "beta", "ls", "ils1", "ils2", "ils")  # the paper's


def test_ctrl_c_is_one_line_and_exit_code_130(tmp_path, capsys, monkeypatch):
    from keras_ils.comparison.main_job import pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run", interrupted)
    assert cli.main(["run", "--output-dir", str(tmp_path / "o")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-ils: interrupted; no results written")
    assert not (tmp_path / "o").exists()


def test_the_methods_command_lists_the_registry(capsys):
    from keras_ils import methods

    assert cli.main(["methods"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    for method_id in methods.ids():
        entry = methods.get(method_id)
        assert entry.name in rows[method_id] and all(name in rows[method_id] for name in entry.hyperparameters)
    assert "takes LS's epsilon" in rows["cls"] and rows["bs_soft"].endswith("model.fit")
    assert "always run" in rows["none"] and "engine or model.fit" in rows["ils"]


def test_the_methods_command_lists_the_calibrators(capsys):
    from keras_ils.calibration import LAYERS
    from keras_ils.comparison.main_job import config

    assert cli.main(["methods"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("calibrator ") :].splitlines()
    rows = {line.split()[0]: line for line in table[1 : 1 + len(config.CALIBRATORS)]}
    assert list(rows) == list(config.CALIBRATORS)
    for method, suffix in config.CALIBRATORS.items():
        assert f"+ {suffix}" in rows[method] and rows[method].endswith(LAYERS[method].__name__)
    assert rows["dirichlet"].split()[1] == "dir" and rows["isotonic"].split()[1] == "-"


def test_methods_beside_all_are_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--methods", "all,nope", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "argument --methods: expected 'all' or a comma-separated subset of" in err
    assert not (tmp_path / "o").exists()


def _snapshot(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _seeds_table(path):
    """A 3-class CSV of 90 rows (two number columns and the label)."""
    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["area", "perimeter", "label"])
        for label in range(3):
            for _ in range(30):
                writer.writerow([f"{label + rng.normal(0, 0.5):.3f}", f"{rng.normal():.3f}", f"k{label}"])


@pytest.mark.parametrize("output_dir", ["$PWD", "."])
def test_run_into_the_users_own_folder_keeps_the_input_and_every_file_of_theirs(tmp_path, monkeypatch, output_dir):
    # issue 36's reproductions: `cd d && keras-ils run --dataset seeds.csv --target label --output-dir "$PWD"` deleted
    # seeds.csv; `--output-dir .` failed after training and deleted notes.txt
    _seeds_table(tmp_path / "seeds.csv")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "seedlings").mkdir()
    (tmp_path / "seedlings" / "a.txt").write_text("mine")
    before = _snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--dataset", "seeds.csv", "--target", "label", "--methods", "ls", "--no-tune", "--epochs", "1"]
    target = str(tmp_path) if output_dir == "$PWD" else "."
    for _ in range(2):  # the second run replaces the first's results, and only them
        assert cli.main([*argv, "--output-dir", target]) == 0
        after = _snapshot(tmp_path)
        assert {path: after[path] for path in before} == before
    assert (tmp_path / "results.json").exists() and (tmp_path / "model_ls.keras").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".keras-ils-manifest.json"]


def test_run_refuses_a_folder_holding_files_named_like_its_results_before_training(tmp_path, monkeypatch, capsys):
    _seeds_table(tmp_path / "results.csv")  # the user's data named like the table the run writes
    before = _snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    trained = []
    monkeypatch.setattr(keras.Model, "fit", lambda *a, **k: trained.append(True))
    argv = ["run", "--dataset", "results.csv", "--target", "label", "--no-tune", "--output-dir", "."]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert "Invalid value for argument `--output-dir`" in error and "holds results.csv, which keras_ils did" in error
    assert trained == [] and _snapshot(tmp_path) == before
