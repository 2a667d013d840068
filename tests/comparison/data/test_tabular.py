"""Tables the Keras way (issue 30, item 2): a CSV file or a DataFrame as `Splits`, typed by a FeatureSpace."""

import csv
import json
import re
import warnings

import keras
import numpy as np
import pandas as pd
import pytest

from keras_ils.comparison.data import datasets, tabular
from keras_ils.comparison.data.splits import as_trained, split_rows, taking_stored_features

N = 150
CLASSES = ("a", "b", "c")


def _key(name):
    """A column's key in the saved models' inputs: `_` for every character but ASCII letters, digits, `_.-`."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in name)


def _columns(n=N, seed=0):
    """A hand-made table: a float, a many-valued int, a few-valued int, a string, a bool, a 3-class string target."""
    rng = np.random.default_rng(seed)
    size = rng.normal(10.0, 3.0, n)
    colour = rng.choice(["red", "green", "blue"], n)
    score = size + 3.0 * (colour == "red")
    return {
        "size": size,
        "age": rng.integers(18, 80, n),  # > 10 distinct integers: a number
        "rooms": rng.integers(1, 5, n),  # 4 distinct integers >= 0: categories
        "od280/od315 (ratio)": rng.choice([-1, 0, 1], n),  # negative integers: a number; key od280_od315__ratio_
        "colour": colour,
        "member": rng.random(n) < 0.4,
        "label": np.array(CLASSES)[np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))],
    }


def _write_csv(path, columns):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(list(columns))
        writer.writerows(zip(*(values.tolist() for values in columns.values()), strict=True))
    return str(path)


def _arrays(dataset):
    x, y = zip(*dataset.as_numpy_iterator(), strict=True)
    return np.stack(x), np.array(y)


def _rows(columns, seed=0):
    """The (train, validation, test) rows `table_splits` takes with the default fractions."""
    y = np.unique(columns["label"], return_inverse=True)[1]
    return split_rows(y, 3, test_fraction=0.2, validation_fraction=0.2, seed=seed, source="t")


class TestEncoding:
    def test_each_column_as_its_type_says_with_training_statistics_only(self, tmp_path):
        columns = _columns()
        splits = tabular.table_splits(_write_csv(tmp_path / "t.csv", columns), "label")
        train, validation, test = _rows(columns)
        # FeatureSpace concatenates the columns in sorted key order: numbers one feature, categories one-hot with
        # one more slot (unseen values) than the training rows hold
        keys = sorted(_key(k) for k in columns if k != "label")
        kinds = {"age": "n", "colour": "c", "member": "c", "od280_od315__ratio_": "n", "rooms": "c", "size": "n"}
        by_key = {_key(k): v for k, v in columns.items()}
        widths = [1 if kinds[k] == "n" else len(np.unique(by_key[k][train])) + 1 for k in keys]
        assert splits.input_shape == (sum(widths),) and splits.num_classes == 3 and splits.class_names == CLASSES
        start = np.cumsum([0, *widths])
        for rows, dataset in ((train, splits.train), (validation, splits.validation), (test, splits.test)):
            x, y = _arrays(dataset)
            assert x.dtype == np.float32 and y.dtype == np.int32
            np.testing.assert_array_equal(np.array(CLASSES)[y], columns["label"][rows])
            for k, a, b in zip(keys, start[:-1], start[1:], strict=True):
                values, block = by_key[k], x[:, a:b]
                if kinds[k] == "n":  # training mean and population standard deviation
                    expected = (values[rows] - values[train].mean()) / values[train].std()
                    np.testing.assert_allclose(block[:, 0], expected, rtol=1e-5, atol=1e-6)
                    continue
                assert np.all(block.sum(1) == 1) and set(np.unique(block)) <= {0, 1}
                slot = block.argmax(1)  # one slot per training value, the same for equal values
                for value in np.unique(values[train]):
                    assert len(set(slot[values[rows] == value])) <= 1
                assert len(set(slot)) == len(np.unique(values[rows]))

    def test_csv_and_dataframe_give_the_same_splits(self, tmp_path):
        columns = _columns()
        from_csv = tabular.table_splits(_write_csv(tmp_path / "t.csv", columns), "label", seed=3)
        from_frame = tabular.table_splits(pd.DataFrame(columns), "label", seed=3)
        for a, b in zip(from_csv[:3], from_frame[:3], strict=True):
            for u, v in zip(_arrays(a), _arrays(b), strict=True):
                np.testing.assert_array_equal(u, v)
        assert (from_csv.name, from_frame.name) == ("t.csv", "dataframe")
        assert tabular.table_splits(pd.DataFrame(columns), "label", name="houses").name == "houses"

    def test_a_value_unseen_in_training_takes_the_unknown_slot(self):
        columns = {"id": np.array([f"id{i}" for i in range(120)]), "x": np.arange(120.0), "label": CLASSES * 40}
        splits = tabular.table_splits(pd.DataFrame(columns), "label")
        x, _ = _arrays(splits.test)  # every id is unseen: the first slot, which no training row takes
        train, _ = _arrays(splits.train)
        assert x.shape[1] == len(train) + 1 + 1 and np.all(x[:, 0] == 1) and np.all(train[:, 0] == 0)

    @pytest.mark.parametrize(
        "values, width",
        [
            (np.arange(120) % 10, 11),  # 10 distinct integers >= 0: categories
            (np.arange(120) % 11, 1),  # 11: a number
            (np.arange(120) % 3 - 1, 1),  # a negative integer: a number
            (np.arange(120) % 2 == 0, 3),  # booleans: 0/1 categories
            (np.arange(120) % 3 + 0.5, 1),  # floats
        ],
    )
    def test_the_typing_rule(self, values, width):
        columns = pd.DataFrame({"v": values, "label": CLASSES * 40})
        assert tabular.table_splits(columns, "label").input_shape == (width,)

    def test_csv_cells_typed_by_what_they_hold(self, tmp_path):
        path = tmp_path / "t.csv"
        labels = [str(v) for v in (2, 9, 10) * 40]  # numbers sort as numbers: 10 after 9
        flags = ["true", "FALSE", "True"] * 40
        path.write_text("flag, label\n" + "\n".join(f"{f}, {v}" for f, v in zip(flags, labels, strict=True)) + "\n\n")
        splits = tabular.table_splits(str(path), "label")
        assert splits.class_names == (2, 9, 10) and splits.input_shape == (3,)  # the flag: 0/1 categories


class TestNumbersWithTypos:
    """A column of numbers with a few cells that are not (`3.1O`) was a category in silence (accuracy 72 % to 33 %):
    refused, naming the column and the cells, unless declared `categorical`."""

    @pytest.mark.parametrize(
        "cells, refused",
        [
            (["1.5", "2.5", "3.1O", "4.0"] * 30, True),  # 90 numbers, 30 typos
            (["1.5", "2.5", "x", "y"] * 30, False),  # half numbers: text that holds some numbers
            (["red", "blue", "3", "green"] * 30, False),  # a category with one number-like value
            (["1", "2", "K", "3"] * 30, True),  # grades with a kindergarten: declare it categorical
        ],
    )
    def test_the_rule(self, tmp_path, cells, refused):
        columns = {"a": np.array(cells, dtype=object), "label": np.array(CLASSES * 40)}
        path = tmp_path / "t.csv"
        _write_csv(path, columns)
        if not refused:
            assert tabular.table_splits(str(path), "label").feature_space.features["a"].dtype == "string"
            return
        bad = [i for i, cell in enumerate(cells) if not cell.replace(".", "", 1).isdigit()]
        lines = ", ".join(f"{cells[i]!r} (line {i + 2})" for i in bad[:5])
        with pytest.raises(ValueError, match="numbers in column 'a' of t.csv, as 90 of its 120 cells are"):
            tabular.table_splits(str(path), "label")
        with pytest.raises(ValueError, match=re.escape(f"Received: 30 cells that are not: {lines} ...")):
            tabular.table_splits(str(path), "label")
        splits = tabular.table_splits(str(path), "label", categorical="a")  # declared: every cell a category
        assert splits.input_shape == (len(set(cells)) + 1,)  # one-hot over the training values, plus the unknown

    def test_a_dataframe_names_the_rows_and_a_category_dtype_is_declared(self):
        frame = pd.DataFrame({"a": [1.5, 2.5, 4.0, 5.5] * 30, "label": CLASSES * 40}, index=np.arange(120) + 100)
        frame["a"] = frame["a"].astype(object)
        frame.loc[[102, 117], "a"] = ["3.1O", "n/a?"]
        received = "Received: 2 cells that are not: '3.1O' (row 102), 'n/a?' (row 117)."
        with pytest.raises(ValueError, match=re.escape(received)):
            tabular.table_splits(frame, "label")
        frame["a"] = frame["a"].astype(str).astype("category")  # a category column: declared, never refused
        assert tabular.table_splits(frame, "label").feature_space.features["a"].dtype == "string"

    @pytest.mark.tensorflow_only  # a string column's input: JAX and torch have no string dtype
    def test_an_integer_column_declared_categorical_and_its_saved_model(self, tmp_path):
        frame = pd.DataFrame({"zip": np.arange(120) % 30 + 1000, "x": np.arange(120.0), "label": CLASSES * 40})
        assert tabular.table_splits(frame, "label").input_shape == (2,)  # 30 distinct integers: a number
        splits = tabular.table_splits(frame, "label", categorical=["zip"])
        labels = np.unique(frame["label"], return_inverse=True)[1]
        train, _, test = split_rows(labels, 3, test_fraction=0.2, validation_fraction=0.2, seed=0, source="t")
        seen = len(np.unique(frame["zip"].to_numpy()[train]))
        assert splits.input_shape == (seen + 1 + 1,)  # one-hot over the training rows' zips and the unknown; x
        model = keras.Sequential([keras.Input(splits.input_shape), keras.layers.Dense(3)], name="mlp")
        wrapped = taking_stored_features(model, splits)
        assert wrapped.input["zip"].dtype == "string"
        x_test, _ = _arrays(splits.test)
        inputs = tabular.model_inputs(frame.iloc[test], wrapped)
        np.testing.assert_allclose(
            wrapped.predict(inputs, verbose=0), model.predict(x_test, verbose=0), rtol=1e-5, atol=1e-6
        )

    def test_categorical_names_feature_columns(self, tmp_path):
        frame = pd.DataFrame({"a": np.arange(120.0), "label": CLASSES * 40})
        for categorical in (["b"], "label"):
            with pytest.raises(ValueError, match="Invalid value for argument `categorical`.*Expected feature columns"):
                tabular.table_splits(frame, "label", categorical=categorical)
        with pytest.raises(ValueError, match="`categorical` applies to .csv tables only"):
            datasets.load("synthetic", categorical=["a"])


class TestSavedModels:
    @pytest.mark.tensorflow_only  # a string column's input: JAX and torch have no string dtype
    def test_the_saved_model_takes_the_raw_rows(self, tmp_path):
        columns = _columns()
        frame = pd.DataFrame(columns)
        splits = tabular.table_splits(frame, "label")
        model = keras.Sequential([keras.Input(splits.input_shape), keras.layers.Dense(3)], name="mlp")
        wrapped = taking_stored_features(model, splits)
        wrapped.save(tmp_path / "m.keras")
        loaded = keras.saving.load_model(tmp_path / "m.keras")
        _, _, test = _rows(columns)
        x_test, _ = _arrays(splits.test)
        expected = model.predict(x_test, verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. Keras' "structure of `inputs`" warning of a tracked dict's inputs
            in_memory = wrapped.predict(tabular.model_inputs(frame.iloc[test], wrapped), verbose=0)
        np.testing.assert_allclose(in_memory, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            loaded.predict(tabular.model_inputs(frame.iloc[test], loaded), verbose=0), expected, rtol=1e-5, atol=1e-6
        )
        raw = {_key(k): v[test] for k, v in columns.items() if k != "label"}  # plain numpy columns
        raw["colour"] = raw["colour"].astype(object)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(raw)), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(as_trained(loaded).predict(x_test, verbose=0), expected, rtol=1e-6)

    def test_a_column_named_like_the_model(self, tmp_path):
        frame = pd.DataFrame({"mlp": np.arange(120.0), "label": CLASSES * 40})
        splits = tabular.table_splits(frame, "label")
        model = keras.Sequential([keras.Input(splits.input_shape), keras.layers.Dense(3)], name="mlp")
        taking_stored_features(model, splits).save(tmp_path / "m.keras")
        loaded = keras.saving.load_model(tmp_path / "m.keras")
        x, _ = _arrays(splits.train)
        np.testing.assert_allclose(as_trained(loaded).predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)

    def test_model_inputs_refuses_what_the_model_cannot_take(self, tmp_path):
        frame = pd.DataFrame({"n": np.arange(120.0), "s": ["u", "v"] * 60, "label": CLASSES * 40})
        splits = tabular.table_splits(frame, "label")
        model = keras.Sequential([keras.Input(splits.input_shape), keras.layers.Dense(3)])
        model = taking_stored_features(model, splits)
        with pytest.raises(ValueError, match=r"Received: dataframe lacks 's'"):
            tabular.model_inputs(frame[["n"]], model)
        with pytest.raises(ValueError, match=r"Expected numbers in column 'n'.*holds text, e.g. 'u'"):
            tabular.model_inputs(frame.assign(n=frame["s"]), model)
        with pytest.raises(ValueError, match=r"argument `model`. Expected a model that takes a dict of columns"):
            tabular.model_inputs(frame, model.layers[-1])


def _frame(**changes):
    columns = {"x": np.arange(120.0), "s": ["u", "v", "w"] * 40, "label": CLASSES * 40}
    return pd.DataFrame({**columns, **changes})


class TestErrors:
    @pytest.mark.parametrize(
        "table, target, match",
        [
            (_frame(x=[np.nan, 1.0] * 60), "label", r"has 60 missing values in column 'x' \(of 120 rows\)"),
            (_frame(s=[None] + ["u"] * 119), "label", r"1 missing values in column 's'"),
            (_frame(), "y", r"argument `target`. Expected one of the table's columns: 'x', 's', 'label'. Received: "),
            (_frame(label=["a"] * 120), "label", r"at least 2 classes. Received: column 'label' holds only 'a'"),
            (_frame(x=np.ones(120), s=["u"] * 120), "label", r"every feature column of dataframe is constant"),
            (_frame()[["label"]], "label", r"at least one feature column besides the target 'label'"),
            (_frame(label=["a", "b"] * 59 + ["rare"] * 2), "label", r"no example of class 2 \('rare'\)"),
            (_frame(x=pd.to_datetime(np.arange(120), unit="D")), "label", r"column 'x' of dtype datetime64"),
            (_frame(x=[np.inf] + [1.0] * 119), "label", r"column 'x' of dataframe has 1 values that are not"),
            (_frame(preprocessing=np.arange(120)), "label", r"rename the column 'preprocessing'"),
            (_frame().iloc[:0], "label", r"Expected rows and columns. Received: a DataFrame of shape \(0, 3\)"),
        ],
    )
    def test_one_clear_error_naming_the_column(self, table, target, match):
        with pytest.raises(ValueError, match=match):
            tabular.table_splits(table, target)

    @pytest.mark.parametrize(
        "text, match",
        [
            ("a,label\n1,a\n,b\nNA,c\n", r"has 2 missing values in column 'a' \(of 3 rows\)"),
            ("a,label\n1,a\n2,b,3\n", r"t.csv, line 3: 3 cells where the header line has 2"),
            ("a,a/b,a b\n1,2,3\n", r"the column names 'a_b' appear more than once"),
            ("a,,label\n1,2,3\n", r"column 2 has no name"),
            ("a,label\n", r"expected a header line of column names, then at least one row"),
        ],
    )
    def test_csv(self, tmp_path, text, match):
        (tmp_path / "t.csv").write_text(text)
        with pytest.raises(ValueError, match=match):
            tabular.table_splits(str(tmp_path / "t.csv"), "label")

    def test_arguments(self, tmp_path):
        with pytest.raises(ValueError, match="No such .csv file"):
            tabular.table_splits(str(tmp_path / "none.csv"), "label")
        with pytest.raises(TypeError, match="Expected a path to a CSV file or a pandas DataFrame"):
            tabular.table_splits([[1, 2]], "label")
        with pytest.raises(ValueError, match="Invalid value for argument `test_fraction`"):
            tabular.table_splits(_frame(), "label", test_fraction=1.0)


class TestLoad:
    def test_a_csv_by_path_with_its_target(self, tmp_path):
        path = _write_csv(tmp_path / "t.csv", _columns())
        splits = datasets.load(path, target="label", validation_fraction=0.25, seed=1, num_classes=3)
        sizes = [int(d.cardinality()) for d in splits[:3]]
        assert splits.class_names == CLASSES and sizes == [90, 30, 30]  # 20 % test, then 25 % of the rest
        with pytest.raises(ValueError, match="Expected 3: .*t.csv has 3 classes"):
            datasets.load(path, target="label", num_classes=4)

    def test_target_only_with_a_csv(self, tmp_path):
        with pytest.raises(ValueError, match=r"the column to predict .*--target COLUMN\). Received: target=None"):
            datasets.load(str(tmp_path / "t.csv"))
        with pytest.raises(ValueError, match="`target` applies to .csv tables only"):
            datasets.load("synthetic", target="label")


@pytest.mark.slow  # 7 s: a whole run; tests/comparison/test_runs.py runs a DataFrame through compare by default
@pytest.mark.tensorflow_only  # the raw rows hold a string column: JAX and torch have no string dtype
def test_command_line_run_on_a_csv_saves_models_that_take_raw_rows(tmp_path, capsys):
    import keras_ils_cli as cli

    columns = _columns()
    path = _write_csv(tmp_path / "houses.csv", columns)
    out = tmp_path / "o"
    argv = ["run", "--dataset", path, "--target", "label", "--model", "mlp-1-8", "--epochs", "2", "--methods", "ls"]
    argv += ["--no-tune"]
    assert cli.main([*argv, "--output-dir", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["dataset"] == "houses.csv"
    loaded = keras.saving.load_model(out / "model_ls.keras")
    _, _, test = _rows(columns)
    x_test, _ = _arrays(datasets.load(path, target="label").test)
    raw = tabular.model_inputs(pd.DataFrame(columns).iloc[test], loaded)
    predicted = loaded.predict(raw, verbose=0)
    assert predicted.shape == (len(test), 3)
    np.testing.assert_allclose(predicted, as_trained(loaded).predict(x_test, verbose=0), rtol=1e-5, atol=1e-6)
    assert cli.main(["run", "--dataset", path, "--epochs", "1"]) == 2
    assert "--target COLUMN" in capsys.readouterr().err
