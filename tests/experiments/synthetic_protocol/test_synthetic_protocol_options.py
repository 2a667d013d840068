"""The protocol's options (issue 15): presets, the authors' teacher grid and smoothing mass, the engine pass-through."""

import numpy as np
import pytest

from keras_ils.comparison.engine import vectorised
from keras_ils_experiments import synthetic_protocol
from keras_ils_experiments.synthetic_protocol import run, stages


def _softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class TestPresets:
    def test_package_preset_is_the_package_defaults(self):
        assert run.resolve_options() == dict(
            init="keras",
            shared_seeds=True,
            temperature_estimator="map",
            teacher_grid="paper",
            batch_size=32,
            weight_decay=0.0,
            smoothing_mass="all_classes",
            validation_loss="example_mean",
        )

    def test_authors_preset_holds_the_authors_code_settings(self):
        assert run.resolve_options("authors") == dict(
            init="pytorch",
            shared_seeds=False,
            temperature_estimator="authors",
            teacher_grid="authors",
            batch_size=128,
            weight_decay=1e-4,
            smoothing_mass="wrong_classes",
            validation_loss="batch_mean",
        )

    def test_an_explicit_keyword_overrides_the_preset(self):
        options = run.resolve_options("authors", batch_size=512, shared_seeds=True)
        assert options["batch_size"] == 512 and options["shared_seeds"] is True and options["init"] == "pytorch"

    @pytest.mark.parametrize(
        "arguments, name",
        [
            (dict(preset="paper"), "preset"),
            (dict(teacher_grid="raw"), "teacher_grid"),
            (dict(smoothing_mass="true_class"), "smoothing_mass"),
            (dict(validation_loss="sum"), "validation_loss"),
            (dict(batch_size=0), "batch_size"),
            (dict(weight_decay=-1e-4), "weight_decay"),
            (dict(temperature_estimator="bounded"), "temperature_estimator"),
            (dict(init="jax"), "init"),
            (dict(shared_seeds="yes"), "shared_seeds"),
        ],
    )
    def test_bad_options_fail_before_any_training(self, arguments, name):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            synthetic_protocol.ProtocolOptions(**arguments)


def test_authors_teacher_grid():
    assert synthetic_protocol.grids(teacher_grid="authors")["temperature"] == (1.0, 2.0, 4.0, 8.0, 16.0)
    free, taught = synthetic_protocol.model_configs(synthetic_protocol.grids(teacher_grid="authors"))
    assert (len(free), len(taught)) == (14, 30 + 12 * 5 + 30 * 5)
    with pytest.raises(ValueError, match="Invalid value for argument `teacher_grid`"):
        synthetic_protocol.grids(teacher_grid="raw")


class TestStudentTargets:
    labels = np.array([0, 1, 2, 2])
    raw = np.array([[2.0, 0.5, -1.0], [0.3, 1.2, 0.1], [-2.0, 1.0, 3.0], [1.5, 1.0, 0.2]])
    teacher_t = 1.7

    def test_authors_grid_divides_the_raw_logits(self):
        calibrated = self.raw / self.teacher_t
        hp = dict(method="ils2", epsilon=0.1, temperature=8.0)
        y = run.student_targets(self.labels, calibrated, hp, teacher_t=self.teacher_t, teacher_grid="authors")
        q = _softmax(self.raw / 8.0)  # the paper's T on raw logits
        one_hot = np.eye(3)[self.labels]
        q_t = (q * one_hot).sum(-1, keepdims=True)
        expected = one_hot * 0.9 + 0.1 * q * (1 - one_hot) / (1 - q_t)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)

    def test_paper_grid_divides_the_calibrated_logits(self):
        calibrated = self.raw / self.teacher_t
        hp = dict(method="ils2", epsilon=0.1, temperature=4.0)
        y = run.student_targets(self.labels, calibrated, hp, teacher_t=self.teacher_t)
        q = _softmax(calibrated / 4.0)
        one_hot = np.eye(3)[self.labels]
        expected = one_hot * 0.9 + 0.1 * q * (1 - one_hot) / (1 - (q * one_hot).sum(-1, keepdims=True))
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("mass", ["all_classes", "wrong_classes"])
    def test_ils1_smoothing_mass(self, mass):
        calibrated = self.raw / self.teacher_t
        hp = dict(method="ils1", p1=0.8, p2=2.0)
        y = run.student_targets(self.labels, calibrated, hp, smoothing_mass=mass)
        one_hot = np.eye(3)[self.labels]
        p_t = (_softmax(calibrated) * one_hot).sum(-1, keepdims=True)
        eps = np.minimum(0.2, 2.0 * (p_t - 0.8) ** 2)
        if mass == "all_classes":  # the paper's Eq. 3: eps / K on every class
            expected = one_hot * (1 - eps) + eps / 3
        else:  # the authors' code: 1 - eps on the true class, eps / (K - 1) on each wrong one
            expected = one_hot * (1 - eps) + (1 - one_hot) * eps / 2
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-6)

    def test_wrong_class_mass_leaves_ls_and_ils_alone(self):
        calibrated = self.raw / self.teacher_t
        for hp in (dict(method="ls", epsilon=0.1), dict(method="ils", p1=0.8, p2=2.0, temperature=2.0)):
            a = run.student_targets(self.labels, calibrated, hp, smoothing_mass="wrong_classes")
            b = run.student_targets(self.labels, calibrated, hp)
            np.testing.assert_array_equal(a, b)
        ls = run.student_targets(self.labels, calibrated, dict(method="ls", epsilon=0.3))
        np.testing.assert_allclose(ls, np.eye(3)[self.labels] * 0.7 + 0.1, rtol=1e-6)


@pytest.mark.parametrize("teacher_grid", ["paper", "authors"])
@pytest.mark.parametrize("mass", ["all_classes", "wrong_classes"])
def test_stage_targets_are_every_replicates_own_in_training_order(teacher_grid, mass):
    """One call per config over the group's stacked examples: block `r * configs + c` is replicate `r`'s targets of
    config `c`, to float32 rounding (TensorFlow's vectorised kernels may round an element differently by its place
    in the batch; the math itself is checked against numpy above). Every 7th config is checked (one call each of
    the reference): a misplaced block would show in all of them."""
    data = stages.replicate_datasets(3, seed=5, n_test=1)
    free, taught = synthetic_protocol.model_configs(synthetic_protocol.grids(teacher_grid=teacher_grid))
    rng = np.random.default_rng(0)
    teacher_logits = rng.normal(size=(3, 150, 3)).astype(np.float32) * 2
    teacher_t = np.array([0.7, 1.3, 2.1])
    reps = [2, 0]  # a group need not start at 0 nor be in order
    for configs, logits in ((free, None), (taught, teacher_logits)):
        got = run.stage_targets(data, reps, configs, logits, teacher_t, teacher_grid, mass)
        assert got.shape == (len(reps) * len(configs), 150, 3)
        checked = sorted({*range(0, len(configs), 7), len(configs) - 1})  # every 7th config and the last
        for i, r in enumerate(reps):
            for c in checked:
                hp = configs[c][1]
                expected = run.student_targets(
                    data[r]["train"].y,
                    None if logits is None else logits[r],
                    hp,
                    teacher_t=teacher_t[r],
                    teacher_grid=teacher_grid,
                    smoothing_mass=mass,
                )
                np.testing.assert_allclose(got[i * len(configs) + c], expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "weight_decay, validation_loss, expected",
    [
        (0.0, "example_mean", {}),
        (1e-4, "batch_mean", dict(weight_decay=1e-4, validation_loss="batch_mean")),
    ],
)
def test_train_passes_the_engine_options(monkeypatch, weight_decay, validation_loss, expected):
    calls = []
    monkeypatch.setattr(vectorised, "train_mlps", lambda *a, **k: calls.append(k))
    data = stages.replicate_datasets(1, 0, 5)
    options = synthetic_protocol.ProtocolOptions(
        epochs=7, pool_size=8, batch_size=128, weight_decay=weight_decay, validation_loss=validation_loss
    )
    run.train(data, [0, 0], np.zeros((2, 150, 3), np.float32), [3, 4], options)
    (keywords,) = calls
    assert keywords["training"] == vectorised.MLPTraining(epochs=7, pool_size=8, batch_size=128, **expected)
    assert list(keywords["seeds"]) == [3, 4]


@pytest.mark.slow  # a whole quick protocol run (~20 s on 2 cores)
def test_a_quick_run_records_its_options_table2_and_fig2():
    options = synthetic_protocol.ProtocolOptions(
        replicates=2, quick=True, n_test=40, epochs=3, batch_size=64, teacher_grid="authors"
    )
    results = synthetic_protocol.run_replicates(options, log=None)
    assert results["batch_size"] == 64 and results["teacher_grid"] == "authors" and results["preset"] == "package"
    assert set(results["distillation"]) == {"Bayes-Optimal", "No LS", "Standard LS", "ILS"}
    assert all(len(v) == 2 for v in results["distillation"].values())
    # every replicate's 120 test points, once for the confidence and twice for the other two probabilities
    assert sum(results["histograms"]["no_ls/confidence"]) == 2 * 120
    assert sum(results["histograms"]["ls_temps/others"]) == 2 * 2 * 120
    # 2 replicates x (No LS, 3 LS, LS-0.2; 2 ILS1, 6 ILS2, 4 ILS; 4 students)
    assert results["models_trained"] == 2 * (5 + 12 + 4)
