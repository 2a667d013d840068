import json
import os
import re

import numpy as np
import pytest
import tensorflow_datasets as tfds
from comparison.reporting.test_ranks import METHODS, PAPER_CROSS_ENTROPY
from scipy import stats

import keras_ils_cli as cli
from keras_ils.comparison import networks
from keras_ils.comparison.main_job import fitting, pipeline
from keras_ils.comparison.main_job.config import RunConfig
from keras_ils.comparison.reporting import ranks
from keras_ils_experiments import paper_tables, printed_tables, ranked_tables


def _npz(path, seed, num_classes=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(160, 4))
    y = np.digitize(x[:, 0] + 0.7 * rng.normal(size=160), [-0.5, 0.5])[:, None].ravel() % num_classes
    np.savez(path, x_train=x[:120], y_train=y[:120], x_test=x[120:], y_test=y[120:])
    return str(path)


class TestPaperValues:
    def test_table3_is_the_ranks_tests_transcription_and_complete(self):
        assert list(printed_tables.TABLE3_COLUMNS) == METHODS
        assert [list(row) for row in printed_tables.TABLE3["nll"]] == PAPER_CROSS_ENTROPY
        for metric, rows in printed_tables.TABLE3.items():
            assert len(rows) == len(printed_tables.TABLE3_PAIRS) == 11 and {len(r) for r in rows} == {12}, metric
        # spot checks against the .tex: accuracy in fractions, the last row of ECE and cwECE
        assert printed_tables.TABLE3["accuracy"][0][-1] == 0.7683 and printed_tables.TABLE3["accuracy"][-1][0] == 0.976
        ece = (0.009, 0.007, 0.031, 0.006, 0.033, 0.061, 0.005, 0.010, 0.006, 0.005, 0.015, 0.008)
        assert printed_tables.TABLE3["ece"][-1] == ece
        assert printed_tables.TABLE3["cwece"][1][4] == 0.018

    def test_distillation_table(self):
        assert printed_tables.DISTILLATION["nll"][1] == (0.999, 0.964, 0.912)
        assert printed_tables.DISTILLATION["accuracy"][2] == (0.6058, 0.6042, 0.6059)
        assert len(printed_tables.DISTILLATION_PAIRS) == 4 and printed_tables.DISTILLATION_COLUMNS == (
            "No LS",
            "LS",
            "ILS",
        )


class TestPairs:
    def test_the_papers_pairs_and_filters(self):
        assert paper_tables.pairs_for("3") == list(printed_tables.TABLE3_PAIRS)
        assert paper_tables.pairs_for("3", datasets=["tfds:cifar100"], models=None)[0] == ("tfds:cifar100", "lenet")
        assert paper_tables.pairs_for("distillation", models=["densenet40"]) == [("tfds:fashion_mnist", "densenet40")]
        assert paper_tables.pairs_for("3", ["a.npz", "b.npz"], ["mlp", "lenet"]) == [
            ("a.npz", "mlp"),
            ("a.npz", "lenet"),
            ("b.npz", "mlp"),
            ("b.npz", "lenet"),
        ]

    def test_no_matching_pair_and_bad_table(self):
        with pytest.raises(ValueError, match="No pair of the paper's table 3"):
            paper_tables.pairs_for("3", models=["alexnet"])
        with pytest.raises(ValueError, match="Invalid value for argument `table`"):
            paper_tables.pairs_for("4")


def _fake_runs(pairs, seeds, seed=0):
    """`{(pair, seed): {column: scores}}` with random scores (ties in accuracy)."""
    rng = np.random.default_rng(seed)
    runs = {}
    for pair in pairs:
        for s in seeds:
            runs[(pair, s)] = {
                c: {
                    "nll": float(rng.uniform(0.1, 1)),
                    "accuracy": float(rng.integers(0, 4) / 4),
                    "ece": float(rng.uniform(0, 0.1)),
                    "cwece": float(rng.uniform(0, 0.1)),
                    "class_conditional_ece": float(rng.uniform(0, 0.1)),
                }
                for c in printed_tables.TABLE3_COLUMNS
            }
    return runs


class TestTableLayout:
    def test_means_ranks_tests_and_the_papers_values_against_numbers_computed_here(self, tmp_path):
        pairs = [("tfds:cifar10", "lenet"), ("iris.npz", "mlp"), ("tfds:svhn_cropped", "resnet152sd")]
        seeds = (0, 1)
        runs = _fake_runs(pairs, seeds)
        summary = ranked_tables.summarise("3", pairs, seeds, runs, command="keras-ils benchmark paper")
        ranked_tables.write_outputs(summary, str(tmp_path))
        columns = printed_tables.TABLE3_COLUMNS
        for key, _, lower, _ in ranked_tables.METRICS:
            entry = summary["metrics"][key]
            means = np.array([[np.mean([runs[(p, s)][c][key] for s in seeds]) for c in columns] for p in pairs])
            np.testing.assert_allclose(entry["mean"], means)
            expected = np.array([stats.rankdata(row if lower else -row) for row in means])
            np.testing.assert_array_equal(entry["ranks"], expected)
            np.testing.assert_allclose(list(entry["average_ranks"].values()), expected.mean(axis=0))
            chi2 = stats.friedmanchisquare(*(means if lower else -means).T)
            np.testing.assert_allclose(entry["friedman"]["statistic"], chi2.statistic, rtol=1e-10)
            cd = ranks.critical_difference(12, 3)
            assert entry["critical_difference"]["nemenyi"] == pytest.approx(cd)
            assert entry["friedman"]["rejects"] == (chi2.pvalue < 0.05)
            control = entry["against_control"]["No LS"]
            assert control["nemenyi"] == (chi2.pvalue < 0.05 and abs(control["difference"]) >= cd)
        # the paper's values: only its own pairs (rows 0 and 10 of its table), ranked the same way
        paper = summary["metrics"]["nll"]["paper"]
        assert paper["pairs"] == ["lenet / cifar10", "resnet152sd / svhn_cropped"]
        assert paper["values"] == [PAPER_CROSS_ENTROPY[0], PAPER_CROSS_ENTROPY[10]]
        np.testing.assert_array_equal(paper["ranks"][0], stats.rankdata(PAPER_CROSS_ENTROPY[0]))
        assert "paper" not in summary["metrics"]["cwece"]  # Eq. 2: the paper printed the other variant
        assert summary["metrics"]["class_conditional_ece"]["paper"]["values"][1] == list(
            printed_tables.TABLE3["cwece"][10]
        )
        # the markdown: one row per pair, `value (rank)` cells, the best bold, accuracy in %
        markdown = (tmp_path / "table3.md").read_text()
        nll = summary["metrics"]["nll"]
        first = f"{nll['mean'][1][0]:.3f} ({nll['ranks'][1][0]:g})"
        assert f"| mlp / iris | {first}" in markdown or f"| mlp / iris | **{first}**" in markdown
        best = int(np.argmin(nll["mean"][1]))
        assert f"**{nll['mean'][1][best]:.3f} (1)**" in markdown
        accuracy = summary["metrics"]["accuracy"]
        assert f"{100 * accuracy['mean'][0][0]:.2f} (" in markdown
        # the paper's printed row, ranked on the printed values (its subscripts 12 and 11 came from unrounded ones)
        assert "| lenet / cifar10 | 0.858 (11.5) | 0.858 (11.5) | 0.854 (10) |" in markdown
        assert "keras-ils benchmark paper" in markdown and "Friedman over 3 pairs" in markdown
        pngs = sorted(p.name for p in tmp_path.glob("*.png"))
        assert len(pngs) == 2 * len(ranked_tables.METRICS) and "cd_table3_nll_bonferroni-dunn.png" in pngs
        assert json.loads((tmp_path / "table3.json").read_text())["metrics"]["nll"]["mean"] == nll["mean"]

    def test_one_pair_has_ranks_but_no_tests_or_diagrams(self, tmp_path):
        pairs = [("iris.npz", "mlp")]
        summary = ranked_tables.summarise("3", pairs, (0,), _fake_runs(pairs, (0,)))
        ranked_tables.write_outputs(summary, str(tmp_path))
        assert "friedman" not in summary["metrics"]["nll"] and not list(tmp_path.glob("*.png"))
        assert "One pair: no Friedman test" in (tmp_path / "table3.md").read_text()

    def test_the_papers_table_3_under_both_tests(self):
        # the question, on the printed cross-entropy: ILS + TempS 1.41, No LS + TempS 5.32, CD 5.02
        pairs = list(printed_tables.TABLE3_PAIRS)
        runs = {
            (pair, 0): {c: {"nll": printed_tables.TABLE3["nll"][i][j]} for j, c in enumerate(METHODS)}
            for i, pair in enumerate(pairs)
        }
        stats_ = ranked_tables.statistics(
            np.array([[runs[(p, 0)][c]["nll"] for c in METHODS] for p in pairs]), METHODS, True, "ILS + TempS"
        )
        assert round(stats_["average_ranks"]["ILS + TempS"], 2) == 1.41
        assert round(stats_["average_ranks"]["No LS + TempS"], 2) == 5.32
        assert stats_["against_control"]["No LS + TempS"]["nemenyi"] is False
        assert stats_["against_control"]["No LS + TempS"]["bonferroni-dunn"] is False
        assert stats_["against_control"]["No LS"]["nemenyi"] is True


class TestFriedmanGate:
    """Demšar (2006): the post-hoc tests only after the Friedman test rejects."""

    # 6 pairs, 3 methods: A best on every pair (rejects), or the ranks rotating (cannot reject)
    CONSISTENT = [[0.1, 0.5, 0.9], [0.2, 0.6, 0.7], [0.1, 0.3, 0.8], [0.3, 0.4, 0.9], [0.2, 0.5, 0.6], [0.1, 0.2, 0.4]]
    ROTATING = [[0.1, 0.5, 0.9], [0.9, 0.1, 0.5], [0.5, 0.9, 0.1], [0.1, 0.9, 0.5], [0.5, 0.1, 0.9], [0.9, 0.5, 0.1]]

    def _markdown(self, values):
        columns = ("A", "B", "C", "D")[: len(values[0])]
        entry = {
            "title": "Cross-entropy",
            "mean": values,
            **ranked_tables.statistics(np.array(values), columns, True, "A"),
        }
        summary = {"table": "3", "columns": list(columns), "control": "A", "seeds": [0], "metrics": {"nll": entry}}
        summary["labels"] = [f"pair {i}" for i in range(len(values))]
        return entry, ranked_tables.format_markdown(summary)

    # 6 pairs, 4 methods, A mostly best: the chi-square's p 0.060 does not reject, Iman-Davenport's 0.042 does
    MOSTLY = [
        [0.1, 0.9, 0.5, 0.3],
        [0.9, 0.3, 0.5, 0.1],
        [0.1, 0.9, 0.5, 0.3],
        [0.1, 0.9, 0.5, 0.3],
        [0.1, 0.5, 0.9, 0.3],
        [0.1, 0.5, 0.3, 0.9],
    ]

    @staticmethod
    def _iman_davenport_pvalue(values):
        """Demšar's Eq. for F_F from scipy's chi-square, and scipy's F distribution."""
        n, k = np.shape(values)
        chi2 = stats.friedmanchisquare(*np.array(values).T).statistic
        f = (n - 1) * chi2 / (n * (k - 1) - chi2)
        return stats.f.sf(f, k - 1, (k - 1) * (n - 1)), stats.friedmanchisquare(*np.array(values).T).pvalue

    def test_gated_by_iman_davenport_not_the_conservative_chi_square(self):
        entry, markdown = self._markdown(self.MOSTLY)
        expected, chi_square = self._iman_davenport_pvalue(self.MOSTLY)
        assert expected < 0.05 <= chi_square and entry["friedman"]["rejects"] is True
        np.testing.assert_allclose(entry["friedman"]["f_pvalue"], expected, rtol=1e-8)
        assert "Rejected at alpha 0.05, so the post-hoc tests follow" in markdown

    def test_rejected_then_post_hoc(self):
        entry, markdown = self._markdown(self.CONSISTENT)
        expected = stats.friedmanchisquare(*np.array(self.CONSISTENT).T).pvalue
        assert expected < 0.05 and entry["friedman"]["rejects"] is True
        np.testing.assert_allclose(entry["friedman"]["pvalue"], expected, rtol=1e-10)
        assert entry["against_control"]["C"] == {"difference": 2.0, "nemenyi": True, "bonferroni-dunn": True}
        first = markdown.index("Friedman over 6 pairs (Iman-Davenport F, as Demšar recommends): F(2, 10) = inf, p = 0")
        assert first < markdown.index("Rejected at alpha 0.05, so the post-hoc tests follow")
        assert "A is significantly better (nemenyi) than: C." in markdown
        assert "![nemenyi](cd_table3_nll_nemenyi.png)" in markdown

    def test_not_rejected_then_no_post_hoc_claim(self, tmp_path):
        entry, markdown = self._markdown(self.ROTATING)
        expected, chi_square = self._iman_davenport_pvalue(self.ROTATING)
        assert expected >= 0.05 and entry["friedman"]["rejects"] is False
        np.testing.assert_allclose(entry["friedman"]["f_pvalue"], expected, rtol=1e-8)
        np.testing.assert_allclose(entry["friedman"]["pvalue"], chi_square, rtol=1e-10)
        assert not any(d[test] for d in entry["against_control"].values() for test in ranks.TESTS)
        assert f"= {entry['friedman']['f_statistic']:.2f}, p = {expected:.3g} (chi-square" in markdown
        assert "does not reject that all methods are equivalent at alpha 0.05: no post-hoc difference" in markdown
        assert "significantly" not in markdown
        assert "![nemenyi, for reference only (Friedman not rejected)](cd_table3_nll_nemenyi.png)" in markdown


class TestVectorPath:
    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_killed_in_the_second_pair_then_resumed_without_retraining_the_first(self, tmp_path, monkeypatch, capsys):
        a, b = _npz(tmp_path / "a.npz", 0), _npz(tmp_path / "b.npz", 1)
        out = tmp_path / "tables"
        argv = ["benchmark", "paper", "--models", "mlp-2-8", "--seeds", "1", "--epochs", "4", "--output-dir", str(out)]
        trained = []
        real_run = pipeline.run

        def counting_run(splits, config):
            trained.append(splits.name)
            if splits.name == "b.npz":
                raise KeyboardInterrupt  # killed during the second pair
            return real_run(splits, config)

        monkeypatch.setattr(pipeline, "run", counting_run)
        assert cli.main([*argv, "--datasets", f"{a},{b}"]) == 130  # Ctrl-C's exit code, no traceback
        # the main job's progress on stderr, each stage named with its pair and seed
        printed = capsys.readouterr()
        assert printed.err.splitlines()[-1].startswith("keras-ils: interrupted; no table written")
        assert "mlp-2-8 / a seed 0 · BS_Soft: 1 model\n" in printed.err
        assert re.search(r"^mlp-2-8 / a seed 0 · Beta: 1 model, about \d+:\d\d left in all$", printed.err, re.M)
        assert "mlp-2-8 / a seed 0 · scoring the table's rows: 18 rows\n" in printed.err and printed.out == ""
        first = out / "runs" / "a" / "mlp-2-8" / "seed0" / "results.json"
        assert trained == ["a.npz", "b.npz"] and first.exists()
        assert not (out / "runs" / "b").exists() and not (out / "table3.md").exists()
        stamp = os.path.getmtime(first)
        trained.clear()
        assert cli.main([*argv, "--datasets", a]) == 0
        assert trained == [] and os.path.getmtime(first) == stamp  # the finished pair is read, not trained again
        summary = json.loads((out / "table3.json").read_text())
        assert summary["labels"] == ["mlp-2-8 / a"] and summary["columns"] == METHODS
        results = json.loads(first.read_text())
        assert results["engine"] == "vectorised" and results["dataset"] == "a.npz"
        by_name = {row["model"]: row["all"] for row in results["rows"]}
        for key, _, _, _ in ranked_tables.METRICS:
            np.testing.assert_allclose(
                summary["metrics"][key]["mean"][0], [by_name[c][key] for c in METHODS], atol=1e-11
            )
        printed = capsys.readouterr()  # progress on stderr, the tables on stdout
        assert "mlp-2-8 / a seed 0: kept from an earlier run (1/1 runs)" in printed.err
        assert "## Cross-entropy" in printed.out and "kept from" not in printed.out
        assert "| mlp-2-8 / a |" in (out / "table3.md").read_text()
        # a kept run made with other settings is not reused in silence
        assert cli.main([*argv, "--datasets", a, "--epochs", "5"]) == 2
        assert "was made with epochs=4 (asked: 5)" in capsys.readouterr().err and trained == []


class TestResumedImageRun:
    @pytest.mark.filterwarnings("ignore:Temperature scaling")  # T* from a few mock examples
    @pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
    def test_single_fit_students_are_kept_and_reused_only_with_the_same_settings(self, tmp_path, monkeypatch):
        real_train = fitting.fit_network
        trained = []

        def counting_train(setup, loss, *args, **kwargs):
            trained.append(type(loss).__name__)
            return real_train(setup, loss, *args, **kwargs)

        monkeypatch.setattr(fitting, "fit_network", counting_train)
        with tfds.testing.mock_data(num_examples=160):
            splits = paper_tables.load_splits("tfds:cifar10", 0, validation_fraction=0.2)
            recipe = networks.recipe_for("lenet", splits.name, epochs=1, batch_size=16)

            def run(methods, **kwargs):
                options = dict(model_name="lenet", tune=False, recipe=recipe, output_dir=str(tmp_path / "r"))
                return pipeline.run(splits, RunConfig(methods=methods, **options, **kwargs))

            first = run(("dis", "bs_soft", "ls"))
            assert trained == ["ILSLoss", "ILSLoss", "DistillationCrossEntropy", "BootstrapSoftLoss"]  # No LS, LS ...
            search = tmp_path / "r" / "search"
            assert all(
                (search / f"student_{m}.{ext}").exists() for m in ("dis", "bs_soft", "ls") for ext in ("keras", "json")
            )
            # a rerun (after a kill) trains nothing and gives the same rows
            monkeypatch.setattr(fitting, "fit_network", lambda *a, **k: pytest.fail("a model was trained again"))
            again = run(("dis", "bs_soft", "ls"))
            for before, after in zip(first["rows"], again["rows"], strict=True):
                assert (after["model"], after["hyperparameters"]) == (before["model"], before["hyperparameters"])
                np.testing.assert_allclose(after["all"]["nll"], before["all"]["nll"], rtol=1e-6)
            # another epsilon: LS is trained again (and replaces the kept one), the teacher is not
            monkeypatch.setattr(fitting, "fit_network", counting_train)
            trained.clear()
            changed = run(("ls",), hyperparameters={"epsilon": 0.2})
        assert trained == ["ILSLoss"] and changed["rows"][2]["hyperparameters"] == {"epsilon": 0.2}
        assert json.loads((search / "student_ls.json").read_text())["hyperparameters"] == {"epsilon": 0.2}


class TestCommandLine:
    @pytest.mark.parametrize(
        "flags, message",
        [
            (["--models", "alexnet"], "No pair of the paper's table 3"),
            (["--seeds", "0"], "Invalid value for argument `--seeds`"),
            (
                ["--table", "distillation", "--datasets", "synthetic", "--models", "mlp", "--epochs", "2"],
                "needs image data",
            ),
        ],
    )
    def test_bad_input_is_one_error_line(self, tmp_path, capsys, flags, message):
        assert cli.main(["benchmark", "paper", *flags, "--output-dir", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err


def _mock_cifar_table(tmp_path, table, *flags):
    with tfds.testing.mock_data(num_examples=160):
        argv = ["benchmark", "paper", "--table", table, "--datasets", "tfds:cifar10", "--seeds", "1"]
        argv += ["--epochs", "2", "--batch-size", "16", "--validation-fraction", "0.2", *flags]
        return cli.main([*argv, "--output-dir", str(tmp_path / "o")])


@pytest.mark.slow  # about 5 minutes on 2 busy cores; run with -m slow
def test_table_3_on_mock_cifar_with_lenet(tmp_path):
    assert _mock_cifar_table(tmp_path, "3", "--models", "lenet") == 0
    summary = json.loads((tmp_path / "o" / "table3.json").read_text())
    assert summary["labels"] == ["lenet / cifar10"] and len(summary["metrics"]["nll"]["mean"][0]) == 12
    assert summary["metrics"]["nll"]["paper"]["values"] == [PAPER_CROSS_ENTROPY[0]]
    results = json.loads((tmp_path / "o" / "runs" / "cifar10" / "lenet" / "seed0" / "results.json").read_text())
    assert results["engine"] == "keras-tuner" and results["algorithm"] == "hyperband"
    assert os.path.isdir(tmp_path / "o" / "runs" / "cifar10" / "lenet" / "seed0" / "search" / "ils")


@pytest.mark.slow  # about 5 minutes on 2 busy cores
def test_distillation_on_mock_cifar_with_a_lenet_teacher_then_resumed(tmp_path, monkeypatch):
    assert _mock_cifar_table(tmp_path, "distillation", "--models", "lenet") == 0
    directory = tmp_path / "o" / "runs" / "cifar10" / "lenet" / "seed0"
    students = {
        name: json.loads((directory / "students" / f"{name}.json").read_text()) for name in ("no_ls", "ls", "ils")
    }
    assert {s["student"] for s in students.values()} == {"alexnet"}
    assert students["ils"]["teacher_temperature"] == 20.0 and students["ils"]["weight"] == 0.9
    summary = json.loads((tmp_path / "o" / "distillation.json").read_text())
    assert summary["columns"] == ["No LS", "LS", "ILS"]
    expected = [students[n]["scores"]["nll"] for n in ("no_ls", "ls", "ils")]
    np.testing.assert_allclose(summary["metrics"]["nll"]["mean"][0], expected, atol=1e-11)
    teachers = json.loads((directory / "teachers" / "results.json").read_text())
    assert all((directory / "teachers" / f"model_{name}.keras").exists() for name in ("no_ls", "ls", "ils"))
    assert [row["model"] for row in teachers["rows"]][::2] == ["No LS", "LS", "ILS"]
    # the ILS student is lost (a kill): only it trains again, from the kept teachers
    checkpoints = lambda: {str(p): p.stat().st_mtime for p in (directory / "teachers").glob("search/*/trial_*/*.h5")}
    trials = checkpoints()
    os.remove(directory / "students" / "ils.json")
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: pytest.fail("the teachers were trained again"))
    assert _mock_cifar_table(tmp_path, "distillation", "--models", "lenet") == 0
    assert (directory / "students" / "ils.json").exists()
    assert trials and checkpoints() == trials  # the finished searches were reloaded, no trial ran again
