"""The kill-safe KerasTuner tuners (`keras_ils.tuning.tuners`): KerasTuner's own, resumable after any kill."""

import ast
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import keras_tuner
import numpy as np
import pytest

from keras_ils import tuning
from keras_ils.comparison import networks
from keras_ils.tuning import tuners

JOB = os.path.join(os.path.dirname(__file__), "tuning_job.py")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMESAKES = [
    (tuners.GridSearch, keras_tuner.GridSearch, {}),
    (tuners.RandomSearch, keras_tuner.RandomSearch, {"max_trials": 2}),
    (tuners.BayesianOptimization, keras_tuner.BayesianOptimization, {"max_trials": 2}),
    (tuners.Hyperband, keras_tuner.Hyperband, {"max_epochs": 4}),
]


def _build_model(hp=None):
    model = networks.mlp(3, (2,), hidden_layers=2, units=16)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    return model


class TestTuners:
    @pytest.mark.parametrize("tuner_class, namesake, kwargs", NAMESAKES, ids=lambda c: getattr(c, "__name__", ""))
    def test_the_keras_tuner_namesakes_constructor_runs_whole(self, tmp_path, tuner_class, namesake, kwargs):
        assert inspect.signature(tuner_class) == inspect.signature(namesake)  # same arguments
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls")
        arguments = dict(objective=hypermodel.objective, directory=str(tmp_path), seed=7, **kwargs)
        tuner = tuner_class(hypermodel, project_name="ours", **arguments)
        stock = namesake(hypermodel, project_name="stock", **arguments)
        assert isinstance(tuner, namesake) and isinstance(tuner.oracle, type(stock.oracle))
        assert type(tuner.oracle) is not type(stock.oracle)  # the kill-safe subclass
        # every attribute the namesake sets is set, with the same values where they are plain settings
        assert sorted(vars(tuner)) == sorted(vars(stock)) and sorted(vars(tuner.oracle)) == sorted(vars(stock.oracle))
        assert tuner.oracle.seed == stock.oracle.seed == 7
        assert getattr(tuner, "seed", None) == getattr(stock, "seed", None)
        if namesake in (keras_tuner.GridSearch, keras_tuner.RandomSearch):  # the two that keep `seed` themselves
            assert tuner.seed == 7
        for name in ("max_trials", "max_epochs", "factor", "alpha", "beta", "num_initial_points"):
            assert getattr(tuner.oracle, name, None) == getattr(stock.oracle, name, None), name


# Every KerasTuner private member that keras_ils.tuning.tuners uses or overrides, and the signature it relies on.
PRIVATE_METHODS = {
    "_get_oracle_fname": (keras_tuner.Oracle, "(self)"),
    "_get_trial_dir": (keras_tuner.Oracle, "(self, trial_id)"),
    "_save_trial": (keras_tuner.Oracle, "(self, trial)"),  # overridden: the oracle writes trial.json through it
    "_compare": (keras_tuner.oracles.GridSearchOracle, "(self, a, b)"),
    "_get_tuner_fname": (keras_tuner.Tuner, "(self)"),
    "_is_worker": (keras_tuner.Tuner, "(self)"),
}
# GridSearchOracle's bookkeeping that ResumableGridSearchOracle rebuilds: `_ordered_ids` (a linked list of
# trial ids in grid order, made empty by calling its type and filled by `insert(trial_id)`) and
# `_populate_next` (a list of trial ids).
PRIVATE_ATTRIBUTES = {"_ordered_ids", "_populate_next"}


class TestKerasTunerPrivateMembers:
    """The KerasTuner private members the tuners rely on are there as relied on; an upgrade changing one fails."""

    def test_the_lists_hold_every_private_member_the_module_uses(self):
        tree = ast.parse(inspect.getsource(tuners))
        own = {  # private names the module defines itself (class attributes such as `_oracle_class`)
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for statement in node.body
            if isinstance(statement, ast.Assign)
            for target in statement.targets
            if isinstance(target, ast.Name)
        }
        private = lambda name: name.startswith("_") and not name.startswith("__")  # noqa: E731
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and private(node.attr)}
        overridden = {
            statement.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for statement in node.body
            if isinstance(statement, ast.FunctionDef) and private(statement.name)
        }
        assert (used | overridden) - own == set(PRIVATE_METHODS) | PRIVATE_ATTRIBUTES

    @pytest.mark.parametrize("name", sorted(PRIVATE_METHODS))
    def test_private_method(self, name):
        owner, expected = PRIVATE_METHODS[name]
        member = getattr(owner, name, None)
        assert callable(member), f"KerasTuner {keras_tuner.__version__} has no `{owner.__name__}.{name}`"
        found = str(inspect.signature(member))
        assert found == expected, (
            f"KerasTuner {keras_tuner.__version__} changed `{owner.__name__}.{name}`: "
            f"keras_ils.tuning.tuners relies on {name}{expected}, found {name}{found}"
        )

    def test_grid_search_bookkeeping(self):
        oracle = keras_tuner.oracles.GridSearchOracle(objective=tuning.OBJECTIVE)
        found = {name: type(getattr(oracle, name, None)).__name__ for name in sorted(PRIVATE_ATTRIBUTES)}
        assert isinstance(getattr(oracle, "_populate_next", None), list), f"found {found}"
        ordered_ids = getattr(oracle, "_ordered_ids", None)
        assert ordered_ids is not None and callable(getattr(ordered_ids, "insert", None)), f"found {found}"
        insert = str(inspect.signature(type(ordered_ids).insert))
        assert insert == "(self, data, data_pre=None)", f"`_ordered_ids.insert` is now insert{insert}"
        empty = type(ordered_ids)()
        empty.insert("0")
        empty.insert("1")
        assert empty.next("0") == "1"  # what GridSearchOracle's populate_space walks


def _small_search(tmp_path, algorithm):
    """A function that makes the same small LS search on `tmp_path`, reloading what is there."""
    hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls", search_space={"epsilon": [0.05, 0.1, 0.15]})
    return lambda: tuning.tuner_for(algorithm, hypermodel, directory=str(tmp_path), project_name="p", max_trials=3)


def _killed():
    raise KeyboardInterrupt  # stands for the process dying at this point


class TestKillSafety:
    """A kill at any point of KerasTuner's bookkeeping leaves a directory the search resumes from."""

    @pytest.mark.parametrize(
        "algorithm, keras_tuner_class",
        [
            ("grid", keras_tuner.GridSearch),
            ("random", keras_tuner.RandomSearch),
            ("bayesian", keras_tuner.BayesianOptimization),
            ("hyperband", keras_tuner.Hyperband),
        ],
    )
    def test_a_write_cut_short_leaves_the_previous_state_files_whole(
        self, tmp_path, monkeypatch, algorithm, keras_tuner_class
    ):
        make = _small_search(tmp_path, algorithm)
        tuner = make()
        assert isinstance(tuner, keras_tuner_class)
        tuner.save()
        trial = tuner.oracle.create_trial("tuner0")
        project = tmp_path / "p"
        before = {path: path.read_text() for path in project.rglob("*.json")}
        assert {path.name for path in before} == {"oracle.json", "tuner0.json", "trial.json"}

        def crash(_):
            raise OSError("the disk went away")

        monkeypatch.setattr(os, "fsync", crash)  # every write now dies after its bytes, before it is in place
        with pytest.raises(OSError, match="went away"):
            tuner.oracle.end_trial(trial)  # writes trial.json, then oracle.json
        with pytest.raises(OSError, match="went away"):
            tuner.save()  # writes oracle.json, then tuner0.json
        with pytest.raises(OSError, match="went away"):
            tuner.oracle._save_trial(trial)
        assert {path: path.read_text() for path in project.rglob("*.json")} == before
        assert [path.name for path in project.rglob("*") if path.is_file() and path.suffix != ".json"] == []
        monkeypatch.undo()
        assert list(make().oracle.trials) == [trial.trial_id]

    def test_temporary_files_of_writes_cut_short_are_removed_when_the_search_is_opened(self, tmp_path):
        make = _small_search(tmp_path, "grid")
        tuner = make()
        tuner.save()
        trial = tuner.oracle.create_trial("tuner0")
        project = tmp_path / "p"
        leftovers = [
            project / ".oracle.json.k1wz8f.tmp",
            project / f"trial_{trial.trial_id}" / ".trial.json.3qp0ab.tmp",
            project / ".tuner0.json.x9_1yz.tmp",
        ]
        others = [project / ".tuner1.json.x9_1yz.tmp", project / "notes.tmp"]  # another worker's, and not ours
        for path in leftovers + others:
            path.write_text("{")
        make()
        assert [path for path in leftovers + others if path.exists()] == others

    @pytest.mark.parametrize("algorithm", tuning.ALGORITHMS)
    def test_a_kill_between_a_trials_file_and_the_oracles_leaves_the_trial_completed(self, tmp_path, algorithm):
        make = _small_search(tmp_path, algorithm)
        tuner = make()
        tuner.save()
        trial = tuner.oracle.create_trial("tuner0")
        tuner.oracle.update_trial(trial.trial_id, {"val_nll": 0.5})
        trial.status = keras_tuner.engine.trial.TrialStatus.COMPLETED
        tuner.oracle.save = _killed
        with pytest.raises(KeyboardInterrupt):
            tuner.oracle.end_trial(trial)  # trial.json written, then killed before oracle.json
        with open(tmp_path / "p" / f"trial_{trial.trial_id}" / "trial.json") as file:
            assert json.load(file)["status"] == "COMPLETED"
        with open(tmp_path / "p" / "oracle.json") as file:
            assert json.load(file)["ongoing_trials"] == {"tuner0": trial.trial_id}

        oracle = make().oracle
        assert oracle.ongoing_trials == {} and oracle._retry_queue == []
        assert oracle.end_order == [trial.trial_id] and oracle.trials[trial.trial_id].score == 0.5
        following = oracle.create_trial("tuner0")
        assert following.trial_id != trial.trial_id
        if algorithm == "grid":
            assert following.hyperparameters.values == {"epsilon": 0.1}

    @pytest.mark.parametrize("algorithm", tuning.ALGORITHMS)
    def test_a_kill_between_a_new_trials_file_and_the_oracles_forgets_the_trial(self, tmp_path, algorithm):
        make = _small_search(tmp_path, algorithm)
        tuner = make()
        tuner.save()
        tuner.oracle.save = _killed
        with pytest.raises(KeyboardInterrupt):
            tuner.oracle.create_trial("tuner0")  # the new trial.json written, then killed before oracle.json
        [written] = (tmp_path / "p").glob("trial_*/trial.json")

        oracle = make().oracle
        assert oracle.trials == {} and oracle.start_order == []
        started = oracle.create_trial("tuner0")  # made again, under the same id: max_trials counts it once
        assert written.parent.name == f"trial_{started.trial_id}" and len(oracle.trials) == 1


def _job(directory, log, *extra, env=None):
    command = [sys.executable, JOB, str(directory), str(log), *extra]
    environment = {**os.environ, "PYTHONPATH": REPOSITORY, **(env or {})}
    return subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _completed(directory):
    trials = {}
    project = os.path.join(directory, "job")
    for name in sorted(os.listdir(project)) if os.path.isdir(project) else []:
        path = os.path.join(project, name, "trial.json")
        if name.startswith("trial_") and os.path.exists(path):
            with open(path) as file:
                trial = json.load(file)
            if trial["status"] == "COMPLETED":
                trials[name] = (trial["hyperparameters"]["values"], trial["score"])
    return trials


def _logged(log):
    with open(log) as file:
        return [json.loads(line) for line in file]


@pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
def test_search_killed_mid_way_resumes_without_rerunning_completed_trials(tmp_path):
    values = "0.01,0.03,0.05,0.07,0.09,0.11"
    job = _job(tmp_path / "search", tmp_path / "first.log", "--values", values, "--epochs", "30")
    deadline = time.time() + 240
    while len(_completed(tmp_path / "search")) < 2:
        assert job.poll() is None, job.communicate()[1][-2000:]
        assert time.time() < deadline, "the search did not complete two trials in time"
        time.sleep(0.05)
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert job.returncode == -signal.SIGKILL
    before = _completed(tmp_path / "search")
    assert 2 <= len(before) < 6

    resumed = _job(tmp_path / "search", tmp_path / "second.log", "--values", values, "--epochs", "30")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-2000:]
    after = _completed(tmp_path / "search")
    assert len(after) == 6
    for name, result in before.items():  # kept, not re-run
        assert after[name] == result
    rerun = _logged(tmp_path / "second.log")
    assert [v for v in rerun if v in [values for values, _ in before.values()]] == []
    assert len(rerun) == 6 - len(before)
    best = min(after.values(), key=lambda result: result[1])
    assert json.loads(out.strip().splitlines()[-1]) == {"best": best[0], "score": best[1]}
    assert list((tmp_path / "search").rglob("*.tmp")) == []  # no half-written state file left by the kill


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
def test_distributed_search_with_two_workers_equals_the_single_process_search(tmp_path):
    arguments = ("--method", "ils1", "--values", "0.75,0.8,0.85,0.9")
    single = _job(tmp_path / "single", tmp_path / "single.log", *arguments)
    out, err = single.communicate(timeout=300)
    assert single.returncode == 0, err[-2000:]
    expected = json.loads(out.strip().splitlines()[-1])

    port = str(_free_port())
    oracle = {"KERASTUNER_ORACLE_IP": "127.0.0.1", "KERASTUNER_ORACLE_PORT": port}
    chief = _job(
        tmp_path / "shared", tmp_path / "chief.log", *arguments, env={**oracle, "KERASTUNER_TUNER_ID": "chief"}
    )
    workers = [
        _job(
            tmp_path / "shared",
            tmp_path / f"worker{i}.log",
            *arguments,
            env={**oracle, "KERASTUNER_TUNER_ID": f"tuner{i}"},
        )
        for i in range(2)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-2000:]
    out, err = chief.communicate(timeout=120)
    assert chief.returncode == 0, err[-2000:]
    distributed = json.loads(out.strip().splitlines()[-1])

    assert distributed["best"] == expected["best"]
    np.testing.assert_allclose(distributed["score"], expected["score"], rtol=1e-6)
    ran = [_logged(tmp_path / f"worker{i}.log") for i in range(2)]
    assert all(ran), "each worker should have trained at least one trial"
    assert sorted(v["p1"] for worker in ran for v in worker) == [0.75, 0.8, 0.85, 0.9]
    assert not os.path.exists(tmp_path / "chief.log")  # the chief only serves the oracle
