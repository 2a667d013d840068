"""The paired verdict: intervals and p-values against scipy's t distribution, Holm against a hand-written step-down."""

import json

import numpy as np
import pytest
from scipy import stats

from keras_ils.comparison.reporting import verdict

REF = verdict.REFERENCE


def _seeds(rng, lengths, scale=0.3):
    return [rng.gamma(2.0, scale, n) for n in lengths]


def _blocked(row, ref, confidence=0.95):
    """The test's own computation: differences pooled over seeds, the SE from the within-seed variances,
    SE = sqrt(sum_s n_s var_s) / N on N - S degrees of freedom, Student t."""
    d = [r - f for r, f in zip(row, ref, strict=True)]
    n = np.array([len(x) for x in d])
    big_n, mean = n.sum(), np.concatenate(d).mean()
    se = np.sqrt(sum(len(x) * np.var(x, ddof=1) for x in d)) / big_n
    df = big_n - len(d)
    q = stats.t.ppf(0.5 + confidence / 2, df)
    return mean, se, (mean - q * se, mean + q * se), 2 * stats.t.sf(abs(mean / se), df)


def _holm_by_hand(pvalues, alpha):
    """Holm's step-down: walk the sorted p-values, reject while p_(j) <= alpha / (m - j + 1), stop at the first
    that is not; and the adjusted p-values with their running maximum."""
    m, order = len(pvalues), sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected, adjusted, running = [False] * m, [0.0] * m, 0.0
    stopped = False
    for j, i in enumerate(order, start=1):
        if not stopped and pvalues[i] <= alpha / (m - j + 1):
            rejected[i] = True
        else:
            stopped = True
        running = max(running, min(1.0, (m - j + 1) * pvalues[i]))
        adjusted[i] = running
    return rejected, adjusted


class TestPairedStatistics:
    def test_several_seeds_of_different_sizes_against_the_blocked_t_formula(self):
        rng = np.random.default_rng(0)
        ref = _seeds(rng, (400, 350, 500))
        shifts = (0.2, -0.15, 0.05)  # a seed-level shift common to all its examples
        row = [f + s - 0.01 + rng.normal(0, 0.1, len(f)) for f, s in zip(ref, shifts, strict=True)]
        found = verdict.paired_verdict({REF: ref, "ILS": row}, REF, {"training methods": ["ILS"]})
        got = found["families"]["training methods"]["rows"]["ILS"]
        mean, se, interval, p = _blocked(row, ref)
        assert got["difference"] == pytest.approx(mean, rel=1e-12)
        assert got["standard_error"] == pytest.approx(se, rel=1e-12)
        assert got["interval"] == pytest.approx(interval, rel=1e-9)
        assert got["pvalue"] == pytest.approx(p, rel=1e-8)
        assert got["seed_differences"] == pytest.approx([(r - f).mean() for r, f in zip(row, ref, strict=True)])
        assert got["nll"] == pytest.approx(np.concatenate(row).mean())
        assert found["reference_nll"] == pytest.approx(np.concatenate(ref).mean())
        assert found["examples"] == [400, 350, 500] and found["seeds"] == 3
        # blocked by seed: the shifts do not inflate the SE, as the SE of all differences pooled would be
        naive = np.concatenate([r - f for r, f in zip(row, ref, strict=True)]).std(ddof=1) / np.sqrt(1250)
        assert got["standard_error"] < 0.7 * naive

    @pytest.mark.parametrize("confidence", [0.95, 0.9])
    def test_one_seed_is_scipys_paired_t_test(self, confidence):
        rng = np.random.default_rng(1)
        ref = _seeds(rng, (300,))
        row = [ref[0] - 0.01 + rng.normal(0, 0.1, 300)]
        found = verdict.paired_verdict({REF: ref, "LS": row}, REF, {"f": ["LS"]}, confidence=confidence)
        got = found["families"]["f"]["rows"]["LS"]
        want = stats.ttest_rel(row[0], ref[0])
        assert got["pvalue"] == pytest.approx(want.pvalue, rel=1e-8)
        assert got["interval"] == pytest.approx(tuple(want.confidence_interval(confidence)), rel=1e-8)
        assert got["holm_pvalue"] == got["pvalue"] and got["significant"] == (want.pvalue <= 1 - confidence)

    def test_a_row_equal_to_the_reference_or_shifted_by_a_constant(self):
        ref = [np.linspace(0.1, 2.0, 50)]
        rounded = [(ref[0] * (1 + 5e-7)).astype(np.float32)]  # the same map, computed in another order
        nll = {REF: ref, "A": ref, "B": [ref[0] - 0.1], "C": rounded}
        found = verdict.paired_verdict(nll, REF, {"f": ["A", "B", "C"]})
        rows = found["families"]["f"]["rows"]
        assert stats.ttest_rel(rounded[0], ref[0]).pvalue < 0.05  # rounding alone would look significant
        for same in ("A", "C"):  # no difference at all
            assert rows[same]["pvalue"] == 1.0 and rows[same]["difference"] == 0.0 and not rows[same]["significant"]
        assert rows["B"]["pvalue"] == 0.0 and rows["B"]["interval"] == pytest.approx([-0.1, -0.1])


class TestHolm:
    @pytest.mark.parametrize(
        "pvalues",
        [
            [0.01, 0.04, 0.03, 0.005],  # 0.04 alone is below 0.05, but the step-down stopped at 0.03
            [0.2, 0.5, 0.6, 0.001, 0.001],  # ties, and scaled values capped at 1
            [0.04],
        ],
    )
    def test_against_a_hand_written_step_down(self, pvalues):
        rejected, adjusted = _holm_by_hand(pvalues, 0.05)
        got = verdict.holm(pvalues)
        np.testing.assert_allclose(got, adjusted, rtol=1e-12)
        assert (got <= 0.05).tolist() == rejected

    def test_the_monotonicity_step(self):
        got = verdict.holm([0.01, 0.04, 0.03, 0.005])
        # sorted 0.005, 0.01, 0.03, 0.04 scaled by 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> the last becomes 0.06
        np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])

    def test_the_families_rows_are_corrected_together(self):
        rng = np.random.default_rng(2)
        ref = _seeds(rng, (200, 200))
        effects = {"A": -0.02, "B": -0.01, "C": 0.0, "D": 0.015}
        nll = {REF: ref, **{k: [f + e + rng.normal(0, 0.1, 200) for f in ref] for k, e in effects.items()}}
        found = verdict.paired_verdict(nll, REF, {"one": ["A", "B"], "two": ["C", "D"]})
        for family, names in (("one", ["A", "B"]), ("two", ["C", "D"])):
            rows = found["families"][family]["rows"]
            raw = [_blocked(nll[k], ref)[3] for k in names]
            rejected, adjusted = _holm_by_hand(raw, 0.05)
            assert [rows[k]["holm_pvalue"] for k in names] == pytest.approx(adjusted, rel=1e-8)
            assert [rows[k]["significant"] for k in names] == rejected

    def test_refuses_what_is_not_a_pvalue(self):
        with pytest.raises(ValueError, match="Invalid value for argument `pvalues`"):
            verdict.holm([0.2, 1.5])


def test_grouping_of_realistic_row_names():
    suffixes = ("TempS", "VS", "MS", "Dir", "Histogram", "Isotonic", "Ensemble TS", "Venn-Abers")
    rows = ["No LS", "No LS + TempS", "No LS + VS", "No LS + Dir", "No LS + Ensemble TS", "No LS + Venn-Abers"]
    rows += ["LS", "LS + TempS", "LS + VS", "LS + Dir", "LS + Ensemble TS", "LS + Venn-Abers"]
    rows += ["FLSD-53", "FLSD-53 + TempS", "FLSD-53 + VS", "ILS", "ILS + TempS"]
    assert verdict.verdict_groups(rows, suffixes) == {
        "training methods": ["No LS", "LS", "LS + TempS", "FLSD-53", "FLSD-53 + TempS", "ILS", "ILS + TempS"],
        "post-hoc calibrators": ["No LS + VS", "No LS + Dir", "No LS + Ensemble TS", "No LS + Venn-Abers"],
        "methods with other calibrators": [
            "LS + VS", "LS + Dir", "LS + Ensemble TS", "LS + Venn-Abers", "FLSD-53 + VS"
        ],
    }  # fmt: skip
    # without --calibrators: one family
    assert verdict.verdict_groups(["No LS", REF, "ILS", "ILS + TempS"], suffixes) == {
        "training methods": ["No LS", "ILS", "ILS + TempS"]
    }
    with pytest.raises(ValueError, match="Invalid value for argument `row_names`.*'No LS \\+ TempS'"):
        verdict.verdict_groups(["No LS", "ILS"], suffixes)
    with pytest.raises(ValueError, match="Invalid value for argument `reference`"):
        verdict.verdict_groups(["No LS", "No LS + T"], suffixes, reference="No LS + T")


class TestSentences:
    def _nll(self, effect, seeds=3):
        rng = np.random.default_rng(3)
        ref = _seeds(rng, (2000,) * seeds)
        noisy = {name: [f + e + rng.normal(0, 0.2, 2000) for f in ref] for name, e in effect.items()}
        return {"No LS": [f + 0.05 for f in ref], REF: ref, **noisy}

    def test_a_truly_better_row_is_significant_and_a_null_row_is_not(self):
        nll = self._nll({"ILS + TempS": -0.03, "LS + TempS": 0.0, "No LS + VS": 0.0})
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS", "VS")))
        rows = found["families"]["training methods"]["rows"]
        assert rows["ILS + TempS"]["significant"] and rows["ILS + TempS"]["interval"][1] < 0
        assert not rows["LS + TempS"]["significant"] and rows["No LS"]["significant"]  # No LS: worse
        assert not found["families"]["post-hoc calibrators"]["rows"]["No LS + VS"]["significant"]
        assert found["choice"] == "ILS + TempS" and found["choice_family"] == "training methods"
        mean, _, (low, high), _ = _blocked(nll["ILS + TempS"], nll[REF])
        ils, ref = np.concatenate(nll["ILS + TempS"]).mean(), np.concatenate(nll[REF]).mean()
        assert found["sentence"] == (
            f"Use ILS + TempS: test NLL {ils:.4f} vs {ref:.4f} for No LS + TempS, {mean:+.4f} per example (95% CI "
            f"[{low:+.4f}, {high:+.4f}]), significant after Holm over the training methods (3 compared, "
            "adjusted p < 0.0001)."
        )
        assert found["families"]["training methods"]["sentence"].endswith("; lower in 3 of 3 seeds.")

    def test_a_lower_but_noisy_row_is_named_beside_the_choice(self):
        nll = self._nll({"A": -0.03})
        alternate = 3.0 * (-1.0) ** np.arange(2000)  # mean exactly 0, SE 3 / sqrt(6000): not significant
        nll["B"] = [f - 0.06 + alternate for f in nll[REF]]
        found = verdict.paired_verdict(nll, REF, {"training methods": ["A", "B"]})
        assert found["best"] == "B" and found["choice"] == "A"
        b_nll = np.concatenate(nll["B"]).mean()
        _, _, _, p_a = _blocked(nll["A"], nll[REF])
        _, adjusted = _holm_by_hand([p_a, _blocked(nll["B"], nll[REF])[3]], 0.05)
        assert adjusted[1] > 0.05 and found["sentence"].startswith("Use A: ")
        tail = f" B has a lower test NLL ({b_nll:.3f}) but does not beat {REF} significantly "
        tail += f"(adjusted p = {adjusted[1]:.2g})."
        assert found["sentence"].endswith(tail)

    def test_a_tie_up_to_rounding_goes_to_the_first_family(self):
        nll = self._nll({"LS + TempS": -0.03})
        nll["LS + VS"] = [f * (1 - 1e-6) for f in nll["LS + TempS"]]  # the same map (VS fell back), rounded lower
        assert np.concatenate(nll["LS + VS"]).mean() < np.concatenate(nll["LS + TempS"]).mean()
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS", "VS")))
        assert found["best"] == found["choice"] == "LS + TempS" and found["choice_family"] == "training methods"
        assert found["sentence"].startswith("Use LS + TempS: ") and "LS + VS" not in found["sentence"]

    def test_without_a_significant_gain_the_reference_is_the_choice(self):
        nll = self._nll({"LS": 0.002, "ILS": 0.1}, seeds=1)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        assert found["choice"] == found["best"] == REF and found["choice_family"] is None
        lowest = f"Keep {REF}: it has the lowest test NLL ({nll[REF][0].mean():.3f}) of the rows compared."
        assert found["sentence"] == lowest
        assert found["families"]["training methods"]["sentence"] == (  # No LS (+0.05) and ILS (+0.1) are worse
            f"Training methods: none beats {REF}, which has the lowest test NLL ({nll[REF][0].mean():.3f}); 2 of 3 "
            "rows are significantly worse after Holm."
        )
        nll = self._nll({"LS": -0.001}, seeds=1)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        assert found["choice"] == REF and found["sentence"].startswith(
            f"Keep {REF}: no row beats it significantly after Holm. The closest, LS, has test NLL"
        )
        assert "cannot tell from zero" in found["sentence"]

    def test_format_and_files(self, tmp_path):
        nll = self._nll({"ILS + TempS": -0.03, "LS": 0.0, "ILS": 0.01}, seeds=2)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        lines = verdict.format_verdict(found).splitlines()
        assert lines[0] == (
            "Verdict: test NLL per example, each row minus No LS + TempS on the same examples (2 seeds, 4,000 test "
            "examples; 95% CIs; Holm within each family)"
        )
        assert lines[2] == "Training methods (4 compared)"
        assert lines[3].split() == "row test NLL vs reference 95% CI Holm p verdict per seed".split()
        compared = ["No LS", "ILS + TempS", "LS", "ILS"]
        raw = {k: _blocked(nll[k], nll[REF]) for k in compared}
        rejected, adjusted = _holm_by_hand([raw[k][3] for k in compared], 0.05)
        means = {k: np.concatenate(v).mean() for k, v in nll.items()}
        want = []
        for k in sorted(means, key=means.get):
            if k == REF:
                want.append(f"{REF} (reference) {means[REF]:.4f}")
                continue
            mean, _, (low, high), _ = raw[k]
            i = compared.index(k)
            holm_p = "< 0.0001" if adjusted[i] < 1e-4 else f"{adjusted[i]:.2g}"
            word = ("better" if mean < 0 else "worse") if rejected[i] else "n.s."
            seeds = " ".join(f"{(a - b).mean():+.4f}" for a, b in zip(nll[k], nll[REF], strict=True))
            want.append(f"{k} {means[k]:.4f} {mean:+.4f} [{low:+.4f}, {high:+.4f}] {holm_p} {word} {seeds}")
        assert [line.split() for line in lines[5:10]] == [row.split() for row in want]
        assert lines[10] == found["families"]["training methods"]["sentence"] and lines[-1] == found["sentence"]
        paths = verdict.write_verdict(found, str(tmp_path / "out"))
        assert paths == [str(tmp_path / "out" / name) for name in verdict.VERDICT_FILES]
        assert json.loads((tmp_path / "out" / "verdict.json").read_text()) == found
        markdown = (tmp_path / "out" / "verdict.md").read_text()
        assert f"**{found['sentence']}**" in markdown
        assert "| row | test NLL | vs reference | 95% CI | Holm p | verdict | per seed |" in markdown
        assert "|---|---:|---:|---:|---:|---|---|" in markdown
        assert f"| {REF} (reference) | {means[REF]:.4f} |" in markdown


class TestBadInput:
    def _nll(self):
        rng = np.random.default_rng(4)
        ref = _seeds(rng, (20, 30))
        return {REF: ref, "LS": [f + 0.01 for f in ref]}

    @pytest.mark.parametrize(
        "change, argument, message",
        [
            (lambda n: n.update(LS=[n["LS"][0], n["LS"][1][:-1]]), "example_nll", "row 'LS', one per seed: 2 arrays"),
            (lambda n: n.update(LS=n["LS"][:1]), "example_nll", "one per seed: 2 arrays of lengths \\[20, 30]"),
            (lambda n: n["LS"][1].__setitem__(3, np.nan), "example_nll", "finite per-example NLL for row 'LS'"),
            (lambda n: n[REF][0].__setitem__(0, np.inf), "example_nll", "finite per-example NLL for row 'No LS"),
            (lambda n: n.update({REF: [n[REF][0][:1]], "LS": [n["LS"][0][:1]]}), "example_nll", "2 or more examples"),
            (lambda n: n.pop(REF), "reference", "a row of `example_nll`"),
            (lambda n: n.pop("LS"), "groups", "missing \\['LS'\\]"),
        ],
    )
    def test_clear_errors(self, change, argument, message):
        nll = self._nll()
        change(nll)
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`. Expected .*{message}"):
            verdict.paired_verdict(nll, REF, {"training methods": ["LS"]})

    def test_groups_and_confidence(self):
        nll = self._nll()
        with pytest.raises(ValueError, match="Invalid value for argument `groups`.*other than the reference in family"):
            verdict.paired_verdict(nll, REF, {"training methods": [REF]})
        with pytest.raises(ValueError, match="Invalid value for argument `groups`"):
            verdict.paired_verdict(nll, REF, {})
        for confidence in (0.0, 1.0, float("nan"), "0.95"):
            with pytest.raises(ValueError, match="Invalid value for argument `confidence`"):
                verdict.paired_verdict(nll, REF, {"f": ["LS"]}, confidence=confidence)


class TestReadExampleNll:
    def test_the_seeds_files_in_seed_order(self, tmp_path):
        rng = np.random.default_rng(5)
        written = {}
        for seed in (2, 10, 99):
            rows = {REF: rng.random(5), "ILS": rng.random(5)}
            (tmp_path / f"seed{seed}").mkdir()
            np.savez(tmp_path / f"seed{seed}" / "test_nll.npz", **rows)
            written[seed] = rows
        read = verdict.read_example_nll([str(tmp_path / "seed10"), str(tmp_path / "seed2")])  # seed99/ not asked
        assert list(read) == [REF, "ILS"]
        for row in read:
            np.testing.assert_array_equal(np.stack(read[row]), np.stack([written[10][row], written[2][row]]))
        read = verdict.read_example_nll(str(tmp_path))  # every seed<k>/, 2 before 10
        np.testing.assert_array_equal(np.stack(read["ILS"]), np.stack([written[k]["ILS"] for k in (2, 10, 99)]))
        np.savez(tmp_path / "test_nll.npz", **written[99])  # one run's own file
        assert verdict.read_example_nll(tmp_path)["ILS"][0].tolist() == written[99]["ILS"].tolist()

    def test_mismatched_rows_and_missing_files(self, tmp_path):
        for seed, rows in ((1, (REF, "ILS")), (2, (REF,))):
            (tmp_path / f"seed{seed}").mkdir()
            np.savez(tmp_path / f"seed{seed}" / "test_nll.npz", **{row: np.ones(3) for row in rows})
        with pytest.raises(ValueError, match="seed2/test_nll.npz holds the rows \\['No LS \\+ TempS'\\]"):
            verdict.read_example_nll(str(tmp_path))
        with pytest.raises(FileNotFoundError):
            verdict.read_example_nll([str(tmp_path / "seed3")])
        with pytest.raises(FileNotFoundError, match="No test_nll.npz in"):
            verdict.read_example_nll(str(tmp_path / "nothing"))
        with pytest.raises(ValueError, match="Invalid value for argument `directories`"):
            verdict.read_example_nll([])
