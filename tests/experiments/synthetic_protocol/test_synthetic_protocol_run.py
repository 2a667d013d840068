import pytest

from keras_ils import methods as method_registry
from keras_ils_experiments import synthetic_protocol


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
    "arguments, name",
    [
        (dict(replicates=0), "replicates"),
        (dict(group=0), "group"),
        (dict(n_test=0), "n_test"),
        (dict(epochs=0), "epochs"),
        (dict(pool_size=0), "pool_size"),
        (dict(seed=-1), "seed"),
        (dict(quick="yes"), "quick"),
        (dict(init="jax"), "init"),
    ],
)
def test_bad_options_fail_when_made_before_any_training(arguments, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        synthetic_protocol.ProtocolOptions(**arguments)


def test_run_replicates_takes_protocol_options():
    with pytest.raises(TypeError, match="Argument `options` must be a ProtocolOptions"):
        synthetic_protocol.run_replicates({"replicates": 2}, log=None)


def test_options_resolve_the_preset_and_build_the_trainers_settings():
    options = synthetic_protocol.ProtocolOptions(preset="authors", batch_size=64, epochs=7, pool_size=8)
    assert options.settings == synthetic_protocol.resolve_options("authors", batch_size=64)
    assert options.init is None and options.settings["init"] == "pytorch"  # the fields keep what was given
    training = options.training()
    assert (training.epochs, training.pool_size, training.batch_size) == (7, 8, 64)
    assert (training.weight_decay, training.validation_loss) == (1e-4, "batch_mean")  # the preset's, engine-named
