"""The registry of comparison methods (`keras_ils.methods`): entries, grids, losses, registration."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_ils import baselines, distillation, methods, teacher_targets

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


def test_the_paper_comparison_in_the_papers_order():
    assert methods.ids() == ("none", "dis", "cls", "bs_soft", "beta", "ls", "ils1", "ils2", "ils")
    assert methods.ids(selectable=True) == methods.ids()[1:]
    names = [methods.get(i).name for i in methods.ids()]
    assert names == ["No LS", "Dis", "cLS", "BS_Soft", "Beta", "LS", "ILS1", "ILS2", "ILS"]


def test_filters():
    assert methods.ids(tunable=True) == tuple(TUNED)
    assert methods.ids(reads_teacher=True) == ("dis", "cls", "ils1", "ils2", "ils")
    # BS_Soft and Beta read the student's own predictions: only model.fit trains them
    assert methods.ids(engine=False) == ("bs_soft", "beta")
    assert methods.get("cls").borrows == ("epsilon",) and methods.get("beta").borrows == ("epsilon",)


@pytest.mark.parametrize("method_id", list(TUNED))
def test_grids_are_the_papers(method_id):
    entry = methods.get(method_id)
    assert entry.hyperparameters == TUNED[method_id]
    assert entry.grid("paper") == {name: PAPER[name] for name in TUNED[method_id]}
    assert entry.grid("synthetic") == {name: SYNTHETIC[name] for name in TUNED[method_id]}


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


def test_engine_targets(rng):
    labels, teacher = rng.integers(0, 3, 8), rng.normal(size=(8, 3))
    one_hot = np.eye(3)[labels]
    dis = ops.convert_to_numpy(methods.get("dis").targets(one_hot, teacher))
    np.testing.assert_allclose(dis, reference.softmax(teacher), rtol=1e-5)
    ils = methods.get("ils").targets(one_hot, teacher, p1=0.9, p2=1.5, temperature=2.0)
    want = reference.ils_targets(labels, teacher, "ils", p1=0.9, p2=1.5, temperature=2.0)
    np.testing.assert_allclose(ops.convert_to_numpy(ils), want, rtol=1e-5, atol=1e-7)


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
        assert not throwaway.reads_teacher and not throwaway.engine
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
