"""`keras_ils.compare`: data in every form, the Comparison it returns, whole result sets, clear refusals."""

import json
import logging
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_iris

import keras_ils
from keras_ils.comparison import seed_list

FAST = dict(methods=["ls"], tune=False, epochs=2, log=None)


def _quietly(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small validation splits warn; their own tests check that
        return keras_ils.compare(**kwargs)


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def two_seeds(iris, tmp_path_factory):
    directory = tmp_path_factory.mktemp("compare") / "out"
    found = _quietly(x=iris[0], y=iris[1], seeds=2, seed=4, conformal=0.2, output_dir=str(directory), **FAST)
    return found, directory


def test_the_comparison_holds_every_seed_the_table_the_verdict_and_the_models(two_seeds, iris):
    found, directory = two_seeds
    assert found.rows == ["No LS", "No LS + TempS", "LS", "LS + TempS"] and [r["seed"] for r in found.runs] == [4, 5]
    assert found.class_names is None  # labels given as class indices
    table = found.table
    assert list(table.index) == found.rows
    for name in found.rows:  # each score the mean over the seeds' results.json
        stored = [json.loads((directory / f"seed{s}" / "results.json").read_text()) for s in (4, 5)]
        values = [next(r for r in run["rows"] if r["model"] == name)["all"]["nll"] for run in stored]
        assert table.loc[name, "nll"] == pytest.approx(np.mean(values))
        assert table.loc[name, "nll_std"] == pytest.approx(np.std(values, ddof=1))
    verdict = json.loads((directory / "verdict.json").read_text())
    assert verdict["choice"] == found.best and found.best in found.rows and verdict["seeds"] == 2
    assert verdict["shared_examples"] is False  # arrays: each seed draws its own test split, as the fingerprints show
    assert found.verdict["reference"] == "No LS + TempS"
    model = found.models["LS + TempS"]  # the saved model takes the features as given
    outputs = model.predict(iris[0][:5], verbose=0)
    assert outputs.shape == (5, 3) and np.isfinite(outputs).all()
    assert set(found.figures) >= {"comparison", "LS + TempS"}
    assert str(found).rstrip().splitlines()[-1].startswith(("Use ", "Keep "))
    with pytest.raises(ValueError, match="Invalid value for argument `name`"):
        found.model("ILS")


def test_rows_ranked_by_set_size_against_the_reference(two_seeds):
    found, directory = two_seeds
    sizes = [np.load(directory / f"seed{s}" / "test_set_sizes.npz") for s in (4, 5)]
    ranked = found.set_size_verdict("lac")
    row = ranked["families"]["training methods"]["rows"]["LS + TempS"]
    differences = np.concatenate([s["lac:LS + TempS"] - s["lac:No LS + TempS"] for s in sizes])
    assert row["difference"] == pytest.approx(differences.mean(), abs=1e-12)
    table = found.table  # the table's set size is the mean of the per-example sizes
    assert table.loc["LS", "lac_mean_set_size"] == pytest.approx(np.mean([s["lac:LS"].mean() for s in sizes]))
    assert 0.0 <= table.loc["LS", "lac_coverage"] <= 1.0
    with pytest.raises(ValueError, match="Invalid value for argument `method`"):
        found.set_size_verdict("raps")


def test_the_printed_comparison_shows_the_prediction_sets(two_seeds):
    from keras_ils.comparison.reporting import results

    found, _ = two_seeds
    printed = str(found)  # several seeds: each row's mean ± standard deviation
    assert "alpha = 0.2), calibrated on 12 held-out validation examples" in printed
    line = next(text for text in printed.splitlines() if text.startswith("LS + TempS "))
    for column in ("lac_coverage", "lac_mean_set_size", "aps_coverage", "aps_mean_set_size"):
        spread = found.summary["rows"][3][column]
        assert f"{spread['mean']:.4f} ± {spread['std']:.4f}" in line
        assert spread["mean"] == pytest.approx(found.table.loc["LS + TempS", column])
    one_seed = results.format_table(found.runs[0]).splitlines()  # one seed: the run's own values
    header = next(text for text in one_seed if text.startswith("model"))
    assert header.index("LAC cov") < header.index("LAC size") < header.index("APS cov") < header.index("APS size")
    sets = found.runs[0]["rows"][3]["conformal"]
    row = next(text for text in one_seed if text.startswith("LS + TempS "))
    assert f"{sets['lac']['coverage']:>10.3f}{sets['lac']['mean_set_size']:>10.3f}" in row


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_progress_counts_the_rows_it_scores_and_nothing_retraces(iris, tmp_path):
    lines, records = [], _Records()
    settings = {**FAST, "log": lines.append, "calibrators": ["isotonic", "histogram", "venn_abers"]}
    tf.get_logger().addHandler(records)  # TensorFlow's warnings of functions traced again and again
    try:
        found = _quietly(x=iris[0], y=iris[1], conformal=0.2, output_dir=str(tmp_path / "o"), **settings)
    finally:
        tf.get_logger().removeHandler(records)
    assert len(found.rows) == 10  # No LS and LS: as trained, + TempS, + Isotonic, + Histogram, + Venn-Abers
    assert "scoring the table's rows: 10 rows" in lines
    assert not [message for message in records.messages if "retracing" in message]


def test_warnings_name_the_users_call_and_log_none_prints_nothing(iris, tmp_path, capsys):
    """A fit's warning deep inside `compare` points at the line that called `compare`, not at the package's; with
    `log=None` no progress bar is drawn either."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keras_ils.compare(iris[0], iris[1], conformal=0.2, output_dir=str(tmp_path / "o"), **FAST)  # 12 validate
    ours = [w for w in caught if w.category.__module__.startswith("keras_ils")]
    assert {w.category.__name__ for w in ours} >= {"SmallValidationWarning", "TemperatureFitWarning"}
    assert capsys.readouterr().out == ""
    assert {(w.filename, w.lineno) for w in ours} == {
        (__file__, test_warnings_name_the_users_call_and_log_none_prints_nothing.__code__.co_firstlineno + 5)
    }


def test_the_reference_on_a_small_table_is_not_absurd(iris, tmp_path):
    """Iris, seed 9: 24 validation examples classified without error, so the validation NLL falls as long as the
    network grows more confident. The paper's MLP recipe (Adam 1e-2) left No LS at test NLL 3.87 (83 % accuracy,
    examples at -log p of 37); the tables' recipe (Adam 1e-3, weight decay 1e-2) trains it in the engine too."""
    found = _quietly(x=iris[0], y=iris[1], seeds=[9], output_dir=str(tmp_path / "o"), **FAST | {"epochs": None})
    run = found.runs[0]
    assert run["engine"] == "vectorised" and (run["recipe"]["learning_rate"], run["recipe"]["weight_decay"]) == (
        1e-3, 1e-2)  # fmt: skip
    assert found.table.loc["No LS", "nll"] < 0.5


def test_save_copies_the_whole_result_set(two_seeds, tmp_path):
    found, directory = two_seeds
    found.save(str(tmp_path / "copy"))
    copied = {p.relative_to(tmp_path / "copy") for p in (tmp_path / "copy").rglob("*") if p.is_file()}
    original = {p.relative_to(directory) for p in directory.rglob("*") if p.is_file() and "search" not in p.parts}
    assert copied == original and (tmp_path / "copy" / "seed5" / "test_nll.npz").exists()


def test_a_rerun_replaces_the_whole_set_seeds_included_and_reads_a_dataset(two_seeds, iris, tmp_path):
    found, directory = two_seeds
    rerun_into = tmp_path / "rerun"
    found.save(str(rerun_into))
    dataset = tf.data.Dataset.from_tensor_slices(iris).batch(16)  # the same data as a batched tf.data.Dataset
    again = _quietly(x=dataset, seeds=[4], output_dir=str(rerun_into), **FAST)
    assert not list(rerun_into.glob("seed*")) and not (rerun_into / "summary.json").exists()
    assert (rerun_into / "results.json").exists() and (rerun_into / "verdict.json").exists()
    first_seed = json.loads((directory / "seed4" / "results.json").read_text())
    assert again.runs[0]["rows"][0]["all"]["count"] == first_seed["rows"][0]["all"]["count"] == 30


def test_a_dataframe_with_a_target_column(iris, tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(iris[0], columns=["sepal length", "sepal width", "petal length", "petal width"])
    frame["species"] = np.array(["setosa", "versicolor", "virginica"])[iris[1]]
    found = _quietly(x=frame, target="species", output_dir=str(tmp_path / "t"), **{**FAST, "methods": "ls"})
    assert found.rows == ["No LS", "No LS + TempS", "LS", "LS + TempS"]  # methods="ls": one id, a list of one
    model = found.models["LS"]
    columns = {name.replace(" ", "_"): frame[name].to_numpy()[:4, None] for name in frame.columns[:4]}
    assert model.predict(columns, verbose=0).shape == (4, 3)
    assert found.class_names == ("setosa", "versicolor", "virginica")  # output column k is class_names[k]
    assert json.loads((tmp_path / "t" / "results.json").read_text())["class_names"] == list(found.class_names)


def test_the_default_network_is_the_mlp_on_vectors_and_the_cnn_on_images():
    from keras_ils.comparison.data.arrays import array_splits
    from keras_ils.comparison.main_job.config import RunConfig

    y = np.arange(60) % 3
    for shape, name in (((60, 4), "mlp"), ((60, 6, 6), "cnn"), ((60, 6, 6, 2), "cnn")):
        x = np.zeros(shape, "float32") + y.reshape(-1, *[1] * (len(shape) - 1))
        splits = array_splits(x, y, test_fraction=0.2, validation_fraction=0.2)
        assert RunConfig().model_for(splits) == name
        assert keras_ils.comparison.networks.build(name, 3, splits.input_shape).output_shape == (None, 3)


@pytest.mark.slow  # 11 s: a whole compare on images; the test above checks the choice and that the cnn takes them
def test_images_without_a_network_get_the_librarys_cnn(tmp_path):
    rng = np.random.default_rng(0)
    y = np.arange(90) % 3
    x = rng.normal(size=(90, 6, 6, 1)).astype("float32") + y[:, None, None, None]  # learnable: the class shifts all
    found = _quietly(x=x, y=y, output_dir=str(tmp_path / "i"), **FAST)
    assert found.runs[0]["model"] == "cnn" and found.runs[0]["engine"] == "keras-tuner"
    model = found.models["LS"]

    def layers(layer):  # the saved model wraps the network (the stored images' preprocessing first)
        return [layer, *(inner for sub in getattr(layer, "layers", []) for inner in layers(sub))]

    assert sum(isinstance(layer, keras.layers.Conv2D) for layer in layers(model)) == 2
    assert model.predict(x[:5], verbose=0).shape == (5, 3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(y=[0, 1]), ValueError, "Argument `y` must be None for a table"),
        (dict(target=None), ValueError, "Invalid value for argument `target`|no column"),
    ],
)
def test_a_table_takes_its_labels_from_target(kwargs, error, match, tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"a": np.arange(30.0), "label": np.arange(30) % 2})
    with pytest.raises(error, match=match):
        keras_ils.compare(frame, output_dir=str(tmp_path / "o"), **{**FAST, **kwargs})
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(y=None), "Argument `y` is required with array features"),
        (dict(target="label"), "Argument `target` names a column of a table"),
        (dict(seeds=0), "Invalid value for argument `seeds`"),
        (dict(seeds=[1, 1]), "distinct seeds"),
        (dict(seeds=[2**63]), r"integers in \[0, 2\*\*63\)"),
        (dict(methods=["ls", "nope"]), "Invalid value for argument `methods`"),
        (dict(calibrators=["platt"]), "Invalid value for argument `calibrators`"),
        (dict(conformal=1.5), "Invalid value for argument `conformal`"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(iris, tmp_path, kwargs, match):
    arguments = {"x": iris[0], "y": iris[1], "output_dir": str(tmp_path / "o"), **FAST, **kwargs}
    with pytest.raises(ValueError, match=match):
        keras_ils.compare(**arguments)
    assert not (tmp_path / "o").exists()


def test_build_model_must_output_logits(iris, tmp_path):
    def softmax_net(num_classes):
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(num_classes, activation="softmax")])

    with pytest.raises(ValueError, match="ends in a softmax"):
        _quietly(x=iris[0], y=iris[1], build_model=softmax_net, output_dir=str(tmp_path / "o"), **FAST)


def test_seed_list():
    assert seed_list(2, 7) == [7, 8] and seed_list((3, 1)) == [3, 1]
    with pytest.raises(ValueError, match="Invalid value for argument `seeds`"):
        seed_list("3")
    with pytest.raises(ValueError, match=r"Expected a number of seeds in \[1, 10000\]"):
        seed_list(10**12)  # was a MemoryError with an empty message
    with pytest.raises(ValueError, match="Expected at most 10000 seeds. Received: 10001"):
        seed_list(list(range(10_001)))
    with pytest.raises(
        ValueError, match=r"`--seed` and `--seeds`: .* --seed \+ --seeds - 1 = \d+, which overflows \[0, 2\*\*63\)"
    ):
        seed_list(2, 2**63 - 1, names=("--seeds", "--seed"))
    with pytest.raises(ValueError, match="overflows"):
        seed_list(np.int64(2), np.int64(2**63 - 1))  # numpy's int64 sum would wrap around
    assert seed_list(1, 2**63 - 1) == [2**63 - 1]


def _snapshot(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_compare_and_save_into_the_users_folder_touch_nothing_of_theirs(iris, tmp_path):
    # issue 36: compare(x, y, output_dir="mine") and Comparison.save deleted seed_data.csv, model_final.keras and
    # seedlings/: now a file named like a result (model_*.keras) is refused before the work, the others are kept
    mine = tmp_path / "mine"
    (mine / "seedlings").mkdir(parents=True)
    for name in ("seed_data.csv", "model_final.keras", "seedlings/a.txt"):
        (mine / name).write_text(f"the user's {name}")
    before = _snapshot(mine)
    with pytest.raises(ValueError, match="argument `output_dir`.*holds model_final.keras, which keras_ils did not"):
        keras_ils.compare(iris[0], iris[1], output_dir=str(mine), **FAST)
    assert _snapshot(mine) == before
    (mine / "model_final.keras").rename(tmp_path / "model_final.keras")
    before = _snapshot(mine)
    found = _quietly(x=iris[0], y=iris[1], seeds=2, output_dir=str(mine), **FAST)
    after = _snapshot(mine)
    assert {path: after[path] for path in before} == before and (mine / "seed1" / "results.json").exists()
    other = tmp_path / "other"  # Comparison.save into another folder of the user's: the same rule, on exact names
    (other / "seedlings").mkdir(parents=True)
    for name in ("seed_data.csv", "model_final.keras", "seedlings/a.txt", "summary.json"):
        (other / name).write_text(f"the user's {name}")
    before_save = _snapshot(other)
    with pytest.raises(ValueError, match="argument `directory`.*holds summary.json, which keras_ils did not"):
        found.save(str(other))
    assert _snapshot(other) == before_save
    (other / "summary.json").unlink()
    before_save = _snapshot(other)
    found.save(str(other))
    saved = _snapshot(other)
    assert {path: saved[path] for path in before_save} == before_save
    ours = lambda files: {p for p in files if p not in before and p.name != ".keras-ils-manifest.json"}
    assert ours(saved) - before_save.keys() == ours(after)  # exactly the result set, nothing of mine
