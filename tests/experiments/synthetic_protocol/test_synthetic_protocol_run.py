import pytest

from keras_ils import methods as method_registry
from keras_ils.experiments import synthetic_protocol


def test_grids_are_the_appendix_grids_and_counts():
    grid = synthetic_protocol.grids()
    appendix = {**method_registry.get("ils").grid("synthetic"), **method_registry.get("ls").grid("synthetic")}
    assert grid == {name: tuple(appendix[name]) for name in grid} and set(grid) == set(appendix)
    assert grid["epsilon"] == (0.001, 0.005, 0.01, 0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15, 0.17, 0.19)
    free, taught = synthetic_protocol.model_configs(grid)
    methods = [name for name, _ in free + taught]
    assert [methods.count(m) for m in ("No LS", "Standard LS", "Standard LS-0.2", "ILS1", "ILS2", "ILS")] == [
        1,
        12,
        1,
        5 * 6,
        12 * 4,
        5 * 6 * 4,
    ]


@pytest.mark.parametrize(
    "arguments, name", [(dict(replicates=0), "replicates"), (dict(group=0), "group"), (dict(init="jax"), "init")]
)
def test_bad_arguments_fail_before_any_training(arguments, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        synthetic_protocol.run_replicates(log=None, **arguments)
