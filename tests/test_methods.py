"""The registry of comparison methods (`keras_ils.methods`): entries, grids, losses, registration."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_ils import baselines, distillation, losses, methods, teacher_targets

import reference

# The paper's grids as printed (§5 for real data, appendix A for the synthetic task), typed in from the paper.
PAPER = {
    "epsilon": (0.01, 0.05, 0.1, 0.15, 0.2),
    "p1": (0.975, 0.95, 0.925, 0.9, 0.85),
    "p2": (0.75, 1.0, 1.25, 1.5, 2.0),
    "temperature": (1.0, 2.0, 4.0, 8.0, 16.0),
}
SYNTHETIC = {
    "epsilon": (0.001, 0.005, 0.01, 0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15, 0.17, 0.19),
    "p1": (0.75, 0.775, 0.8, 0.825, 0.85),
    "p2": (0.75, 1.0, 1.25, 1.5, 1.75, 2.0),
    "temperature": (1.0, 2.0, 4.0, 6.0),
}
TUNED = {
    "ls": ("epsilon",),
    "ils1": ("p1", "p2"),
    "ils2": ("epsilon", "temperature"),
    "ils": ("p1", "p2", "temperature"),
}
# The calibration losses' grids, their authors' (issue 24), the same for real data and the synthetic task.
AUTHORS = {
    "focal": {"gamma": (1.0, 2.0, 3.0)},
    "mbls": {"margin": (2.0, 4.0, 6.0, 8.0, 10.0)},
    "mmce": {"weight": (1.0, 2.0, 4.0, 8.0)},
    "mdca": {"beta": (1.0, 5.0, 10.0, 15.0, 20.0)},
    "ols": {"alpha": (0.25, 0.5, 0.75)},
}
CALIBRATION_LOSSES = ("focal", "flsd53", "mbls", "mmce", "mdca", "ols")


@pytest.fixture
def throwaway():
    """A method registered for one test (a loss plus one hyperparameter), removed afterwards."""
    entry = methods.register(
        methods.Method(
            id="throwaway",
            name="Throwaway",
            make_loss=lambda num_classes, gamma: keras.losses.CategoricalFocalCrossentropy(
                gamma=gamma, from_logits=True
            ),
            hyperparameters=("gamma",),
            grids={"paper": {"gamma": (1.0, 2.0)}},
        )
    )
    yield entry
    methods.unregister("throwaway")


def test_the_paper_comparison_in_the_papers_order_then_the_calibration_losses():
    paper = ("none", "dis", "cls", "bs_soft", "beta", "ls", "ils1", "ils2", "ils")
    assert methods.ids() == paper + CALIBRATION_LOSSES
    assert methods.ids(selectable=True) == methods.ids()[1:]
    names = [methods.get(i).name for i in methods.ids()]
    paper_names = ["No LS", "Dis", "cLS", "BS_Soft", "Beta", "LS", "ILS1", "ILS2", "ILS"]
    assert names == paper_names + ["Focal", "FLSD-53", "MbLS", "MMCE", "MDCA", "OLS"]


def test_filters():
    assert methods.ids(tunable=True) == tuple(TUNED) + tuple(AUTHORS)
    assert methods.ids(reads_teacher=True) == ("dis", "cls", "ils1", "ils2", "ils")
    # BS_Soft and Beta read the student's own predictions: only model.fit trains them
    assert methods.ids(engine=False) == ("bs_soft", "beta")
    assert methods.get("cls").borrows == ("epsilon",) and methods.get("beta").borrows == ("epsilon",)
    assert not any(methods.get(m).borrows or methods.get(m).reads_teacher for m in CALIBRATION_LOSSES)


@pytest.mark.parametrize("method_id", list(TUNED))
def test_grids_are_the_papers(method_id):
    entry = methods.get(method_id)
    assert entry.hyperparameters == TUNED[method_id]
    assert entry.grid("paper") == {name: PAPER[name] for name in TUNED[method_id]}
    assert entry.grid("synthetic") == {name: SYNTHETIC[name] for name in TUNED[method_id]}


@pytest.mark.parametrize("method_id", list(AUTHORS))
def test_calibration_loss_grids_are_the_authors_for_both_grid_names(method_id):
    entry = methods.get(method_id)
    assert entry.hyperparameters == tuple(AUTHORS[method_id])
    assert entry.grid("paper") == AUTHORS[method_id] and entry.grid("synthetic") == AUTHORS[method_id]
    assert methods.make_search_space(method_id, "synthetic") == AUTHORS[method_id]


@pytest.mark.parametrize("method_id", ["none", "ls", "ils1", "ils2", "ils"])
def test_ils_family_losses_are_cross_entropy_against_the_reference_targets(rng, method_id):
    labels, teacher, student = rng.integers(0, 4, 16), 3 * rng.normal(size=(16, 4)), rng.normal(size=(16, 4))
    values = {name: PAPER[name][1] for name in methods.get(method_id).hyperparameters}
    loss = methods.get(method_id).loss(4, **values)
    got = ops.convert_to_numpy(loss(teacher_targets(labels, teacher), student))
    want = reference.cross_entropy(reference.ils_targets(labels, teacher, method_id, **values), student).mean()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_baselines_losses_and_reported_settings():
    dis = methods.get("dis").loss(3)
    assert isinstance(dis, distillation.DistillationCrossEntropy)
    assert (dis.weight, dis.teacher_temperature, dis.student_temperature) == (1.0, 1.0, 1.0)
    assert methods.get("bs_soft").loss(3).beta == 0.95
    beta = methods.get("beta").loss(10, epsilon=0.1)
    assert beta.alpha == 0.4 and beta.a == pytest.approx(baselines.beta_shape_for_epsilon(0.1, 10, 0.4))
    reported = methods.get("beta").reported(10, epsilon=0.1)
    assert list(reported) == ["alpha", "a", "epsilon"] and reported["a"] == round(beta.a, 4)
    assert methods.get("ils").reported(3, p1=0.9, p2=1.0, temperature=2.0) == dict(p1=0.9, p2=1.0, temperature=2.0)


def _numpy_mmce(p, labels):
    """Kumar et al.'s MMCE of a batch (Laplacian kernel, width 0.4), from the top-label confidences."""
    confidence, correct = p.max(-1), (p.argmax(-1) == labels).astype(np.float64)
    gap = correct - confidence
    kernel = np.exp(-np.abs(confidence[:, None] - confidence[None, :]) / 0.4)
    return np.sqrt(max((gap[:, None] * gap[None, :] * kernel).sum() / len(p) ** 2, 0.0))


def _hinge(z, margin):
    """MbLS's penalty per example: the mean over classes of the logit distances to the top beyond `margin`."""
    return np.maximum(z.max(-1, keepdims=True) - z - margin, 0).mean(-1)


# The calibration losses written from their papers, per example: `(logits z, probabilities p, one-hot t, p_t, CE,
# **values)`; the batch terms (MMCE, MDCA) added to every example, as the losses report them.
NUMPY_LOSSES = {
    "focal": lambda z, p, t, p_t, ce, gamma: -((1 - p_t) ** gamma) * np.log(p_t),
    "flsd53": lambda z, p, t, p_t, ce: -((1 - p_t) ** np.where(p_t < 0.2, 5, 3)) * np.log(p_t),
    "mbls": lambda z, p, t, p_t, ce, margin: ce + 0.1 * _hinge(z, margin),
    "mmce": lambda z, p, t, p_t, ce, weight: ce + weight * _numpy_mmce(p, t.argmax(-1)),
    "mdca": lambda z, p, t, p_t, ce, beta: ce + beta * np.abs(p.mean(0) - t.mean(0)).mean(),
    # S starts uniform: the first epoch's loss is alpha * CE + (1 - alpha) * CE against the uniform row
    "ols": lambda z, p, t, p_t, ce, alpha: alpha * ce + (1 - alpha) * reference.cross_entropy(0 * t + 1 / len(t[0]), z),
}


@pytest.mark.parametrize("method_id", CALIBRATION_LOSSES)
def test_calibration_losses_are_their_papers_formulas(rng, method_id):
    entry = methods.get(method_id)
    values = {name: grid[1] for name, grid in entry.grids.get("paper", {}).items()}  # inside the grid, not 0
    labels, logits = rng.integers(0, 4, 32), 3 * rng.normal(size=(32, 4))
    p, one_hot = reference.softmax(logits), np.eye(4)[labels]
    p_t = p[np.arange(32), labels]
    if method_id == "flsd53":
        assert 0 < np.mean(p_t < 0.2) < 1  # both of its gammas are used
    if method_id == "mbls":
        assert _hinge(logits, values["margin"]).mean() > 0.1  # the margin is crossed
    want = NUMPY_LOSSES[method_id](logits, p, one_hot, p_t, reference.cross_entropy(one_hot, logits), **values)
    got = ops.convert_to_numpy(entry.loss(4, **values)(labels, logits.astype(np.float32)))
    np.testing.assert_allclose(got, want.mean(), rtol=1e-5)


def test_calibration_losses_settings_forms_and_callbacks():
    assert methods.get("mbls").settings == {"alpha": 0.1} and methods.get("mbls").loss(3, margin=4.0).alpha == 0.1
    assert methods.get("mbls").reported(3, margin=4.0) == {"alpha": 0.1, "margin": 4.0}
    assert methods.get("flsd53").loss(3).gamma == "flsd53" and methods.get("flsd53").reported(3) == {}
    assert methods.get("ols").loss(5, alpha=0.25).num_classes == 5
    # what the vectorised engine reads of each loss: its function and settings, a batch term, a state
    expected = {
        "focal": ({"gamma": 2.0}, losses.focal_crossentropy, {"gamma": 2.0}, None),
        "flsd53": ({}, losses.focal_crossentropy, {"gamma": "flsd53"}, None),
        "mbls": ({"margin": 4.0}, losses.margin_label_smoothing_crossentropy, {"margin": 4.0, "alpha": 0.1}, None),
        "mmce": ({"weight": 8.0}, losses.ils_crossentropy, {"method": "none"}, (losses.mmce.mmce_penalty, "weight")),
        "mdca": ({"beta": 15.0}, losses.ils_crossentropy, {"method": "none"}, (losses.mdca.mdca_penalty, "beta")),
        "ols": ({"alpha": 0.25}, losses.online_label_smoothing_crossentropy, {"alpha": 0.25}, None),
    }
    for method_id, (values, function, arguments, term) in expected.items():
        entry = methods.get(method_id)
        form = losses.functional_form(entry.loss(3, **values))
        assert entry.engine and form.function is function and form.targets is None, method_id  # the labels alone
        assert form.arguments == {**arguments, "from_logits": True}, method_id
        if term is not None:
            function, name = term
            assert form.batch_term == (function, {name: values[name], "from_logits": True})
    state = losses.functional_form(methods.get("ols").loss(3, alpha=0.25)).state
    np.testing.assert_array_equal(state.initial["soft_labels"], np.full((3, 3), 1 / 3, np.float32))  # S uniform
    loss = methods.get("ols").loss(3, alpha=0.5)
    (callback,) = methods.get("ols").training_callbacks(loss)
    assert isinstance(callback, losses.OnlineLabelSmoothingCallback) and callback.loss is loss
    for method_id in methods.ids():
        if method_id != "ols":
            entry = methods.get(method_id)
            values = {name: grid[0] for name, grid in entry.grids.get("paper", {}).items()}
            values.update({name: 0.1 for name in entry.borrows})
            assert entry.training_callbacks(entry.loss(3, **values)) == []


def test_targets_made_once_from_the_labels(rng):
    """ILS's and distillation's losses are cross-entropy against targets of the labels alone: their forms make them
    (what the vectorised engine trains on)."""
    labels, teacher = rng.integers(0, 3, 8), rng.normal(size=(8, 3)).astype("float32")
    y_true = ops.convert_to_numpy(teacher_targets(labels, teacher))
    dis = losses.functional_form(methods.get("dis").loss(3))
    assert dis.function is losses.ils_crossentropy and dis.arguments == {"method": "none", "from_logits": True}
    np.testing.assert_allclose(dis.targets(y_true, 3), reference.softmax(teacher), rtol=1e-6)
    ils = losses.functional_form(methods.get("ils").loss(3, p1=0.9, p2=1.5, temperature=2.0))
    want = reference.ils_targets(labels, teacher, "ils", p1=0.9, p2=1.5, temperature=2.0)
    np.testing.assert_allclose(ops.convert_to_numpy(ils.targets(y_true, 3)), want, rtol=1e-5, atol=1e-7)
    ls = losses.functional_form(methods.get("ls").loss(3, epsilon=0.3))
    np.testing.assert_allclose(ops.convert_to_numpy(ls.targets(np.eye(3)[labels], 3)), 0.7 * np.eye(3)[labels] + 0.1)


class TestMakeSearchSpace:
    def test_named_and_own_grids(self):
        assert methods.make_search_space("ils2", "synthetic") == {name: SYNTHETIC[name] for name in TUNED["ils2"]}
        assert methods.make_search_space("ils1", {"p1": 0.9, "p2": [1, 2]}) == {"p1": (0.9,), "p2": (1.0, 2.0)}

    def test_bad_values_fail_with_the_losss_own_error(self):
        with pytest.raises(ValueError, match="Invalid value for argument `p1`"):
            methods.make_search_space("ils1", {"p1": [0.9, 1.5], "p2": [1.0]})

    @pytest.mark.parametrize(
        "method, grid, match",
        [
            ("none", "paper", "`method`"),
            ("dis", "paper", "`method`"),
            ("nope", "paper", "`method`"),
            ("ls", "authors", "`search_space`"),
            ("ls", {"p1": [0.9]}, "`search_space`"),
            ("ls", {"epsilon": []}, "`search_space`"),
        ],
    )
    def test_refused(self, method, grid, match):
        with pytest.raises(ValueError, match=f"Invalid value for argument {match}"):
            methods.make_search_space(method, grid)


class TestRegistration:
    def test_a_registered_method_is_listed_searched_and_built(self, throwaway, rng):
        assert methods.ids()[-1] == "throwaway" and "throwaway" in methods.ids(tunable=True, selectable=True)
        assert not throwaway.reads_teacher and throwaway.engine  # Keras' focal loss wraps a function
        assert methods.make_search_space("throwaway") == {"gamma": (1.0, 2.0)}
        labels, logits = rng.integers(0, 3, 8), rng.normal(size=(8, 3))
        loss = throwaway.loss(3, gamma=2.0)
        p = reference.softmax(logits)[np.arange(8), labels]
        want = np.mean(-0.25 * (1 - p) ** 2 * np.log(p))  # Keras' focal loss: alpha 0.25 by default
        np.testing.assert_allclose(ops.convert_to_numpy(loss(np.eye(3)[labels], logits)), want, rtol=1e-5)

    def test_unregistered_is_gone(self, throwaway):
        methods.unregister("throwaway")
        assert "throwaway" not in methods.ids()
        methods.register(throwaway)  # for the fixture's clean-up

    def test_refusals(self, throwaway):
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            methods.register(throwaway)
        with pytest.raises(TypeError, match="keras_ils.methods.Method"):
            methods.register("ils")
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            methods.get("nope")
        with pytest.raises(ValueError, match="Invalid value for argument `id`"):
            methods.Method(id="has space", name="x", make_loss=lambda k: None)
        with pytest.raises(ValueError, match="Invalid value for argument `grids`"):
            methods.Method(id="x", name="x", make_loss=lambda k: None, hyperparameters=("a",), grids={"paper": {}})
        with pytest.raises(ValueError, match="Invalid value for argument `teacher`"):
            methods.Method(id="x", name="x", make_loss=lambda k: None, teacher="oracle")

    def test_entries_are_frozen(self):
        with pytest.raises(AttributeError):
            methods.get("ils").name = "other"
        with pytest.raises(TypeError):
            methods.get("ils").grids["paper"] = {}


def test_the_tuner_searches_a_registered_method(throwaway, tmp_path):
    keras_tuner = pytest.importorskip("keras_tuner")
    from keras_ils import tuning

    def build_model(hp):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
        model.compile(optimizer="adam")
        return model

    hypermodel = tuning.ILSHyperModel(build_model, num_classes=3, method="throwaway")
    tuner = keras_tuner.GridSearch(hypermodel, objective=hypermodel.objective, directory=str(tmp_path))
    space = tuner.oracle.get_space()
    assert [hp.name for hp in space.space] == ["gamma"] and list(space.space[0].values) == [1.0, 2.0]
    model = hypermodel.build(space)
    assert isinstance(model.loss, keras.losses.CategoricalFocalCrossentropy) and model.loss.gamma == 1.0
