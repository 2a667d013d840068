"""Output directories: the package deletes only what it wrote; result sets replaced whole; killed runs completed."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from keras_ils import _files

RESULTS = ("results.json", "results.csv", "reliability_*.png", "model_*.keras", "seed0", "seed1")


def _write(path, text="x"):
    with open(path, "w") as file:
        file.write(text)


def _snapshot(folder) -> dict:
    """`{relative path: content}` of every file under `folder`, hidden ones included; folders as `None`."""
    found = {}
    for root, folders, files in os.walk(folder):
        for name in folders:
            found[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in files:
            with open(os.path.join(root, name), "rb") as file:
                found[os.path.relpath(os.path.join(root, name), folder)] = file.read()
    return found


def _users_files(folder):
    """A folder of the user's: data, notes, a model and a folder whose names look like results but are not."""
    (folder / "seedlings").mkdir(parents=True)
    _write(folder / "seedlings" / "a.txt", "mine")
    for name in ("seeds.csv", "seed_data.csv", "notes.txt", "model_final_notes.txt"):
        _write(folder / name, f"user's {name}")
    return _snapshot(folder)


def _stray(folder) -> list:
    """Hidden entries other than the manifest: what a run must never leave behind."""
    return [name for name in os.listdir(folder) if name.startswith(".") and name != _files.MANIFEST]


def _commit(out, contents: dict, planned=RESULTS, **settings):
    with _files.staged_directory(str(out), planned, **settings) as staging:
        for name, text in contents.items():
            os.makedirs(os.path.dirname(os.path.join(staging, name)), exist_ok=True)
            _write(os.path.join(staging, name), text)


class TestStagedDirectory:
    def test_a_new_directory_gets_the_results_and_a_manifest(self, tmp_path):
        out = tmp_path / "run"
        _commit(out, {"results.json": "new", "seed0/results.json": "new"})
        assert sorted(os.listdir(out)) == [_files.MANIFEST, "results.json", "seed0"]
        assert _files.owned_entries(str(out)) == {"results": ["results.json", "seed0"], "kept": []}
        assert os.listdir(tmp_path) == ["run"]

    def test_failure_writes_nothing_and_removes_the_directory_it_made(self, tmp_path):
        out = tmp_path / "run"
        with pytest.raises(RuntimeError), _files.staged_directory(str(out), RESULTS) as staging:
            _write(os.path.join(staging, "results.json"))
            raise RuntimeError("training failed")
        assert os.listdir(tmp_path) == []

    def test_failure_in_a_users_folder_leaves_it_as_it_was(self, tmp_path):
        before = _users_files(tmp_path)
        with pytest.raises(RuntimeError), _files.staged_directory(str(tmp_path), RESULTS) as staging:
            _write(os.path.join(staging, "results.json"))
            raise RuntimeError("training failed")
        assert _snapshot(tmp_path) == before

    def test_results_go_beside_the_users_files_which_are_never_touched(self, tmp_path):
        before = _users_files(tmp_path)
        _commit(tmp_path, {"results.json": "1", "model_ls.keras": "1", "seed0/results.json": "1"})
        _commit(tmp_path, {"results.json": "2", "reliability_ls.png": "2"})
        after = _snapshot(tmp_path)
        assert {k: v for k, v in after.items() if k in before} == before
        ours = {k for k in after if k not in before}
        assert ours == {_files.MANIFEST, "results.json", "reliability_ls.png"}  # the first set replaced whole
        assert after["results.json"] == b"2"

    def test_a_rerun_keeps_the_kept_entries(self, tmp_path):
        _commit(tmp_path, {"results.json": "1"}, kept=("search",))
        (tmp_path / "search").mkdir()
        _write(tmp_path / "search" / "trial.json", "kept")
        _commit(tmp_path, {"results.json": "2"}, kept=("search",))
        assert (tmp_path / "search" / "trial.json").read_text() == "kept"
        assert _files.owned_entries(str(tmp_path))["kept"] == ["search"]

    @pytest.mark.parametrize(
        "name",
        ["results.json", "results.csv", "reliability_x.png", "model_final.keras", "seed0", "seed1", "search"],
    )
    def test_an_entry_named_like_a_result_is_refused_before_the_work(self, tmp_path, name):
        if name.startswith("seed") or name == "search":
            (tmp_path / name).mkdir()
            _write(tmp_path / name / "data.csv", "mine")
        else:
            _write(tmp_path / name, "mine")
        before, ran = _snapshot(tmp_path), []
        with pytest.raises(ValueError, match=rf"argument `--output-dir`.*holds {name}, which keras_ils did not write"):
            with _files.staged_directory(str(tmp_path), RESULTS, kept=("search",), argument="--output-dir"):
                ran.append(True)
        assert ran == [] and _snapshot(tmp_path) == before

    def test_every_collision_is_named_at_once(self, tmp_path):
        for name in ("results.json", "model_a.keras", "notes.txt"):
            _write(tmp_path / name)
        with pytest.raises(ValueError, match="holds model_a.keras, results.json, which"):
            with _files.staged_directory(str(tmp_path), RESULTS):
                pass

    def test_a_users_file_made_during_the_run_is_not_overwritten(self, tmp_path):
        with pytest.raises(ValueError, match="holds results.json, which keras_ils did not write"):
            with _files.staged_directory(str(tmp_path), ("results.*",)) as staging:
                _write(os.path.join(staging, "results.json"), "ours")
                _write(tmp_path / "results.json", "the user's")
        assert (tmp_path / "results.json").read_text() == "the user's" and _stray(tmp_path) == []

    def test_an_input_inside_the_replaced_result_set_is_refused(self, tmp_path):
        _commit(tmp_path, {"results.csv": "1", "seed0/data.npz": "1"})
        for inside in ("results.csv", "seed0/data.npz"):
            before = _snapshot(tmp_path)
            with pytest.raises(ValueError, match=f"The input .*{inside} is inside the result set"):
                with _files.staged_directory(str(tmp_path), RESULTS, inputs=[str(tmp_path / inside)]):
                    pass
            assert _snapshot(tmp_path) == before

    def test_an_input_beside_the_results_is_kept(self, tmp_path):
        _write(tmp_path / "seeds.csv", "data")
        _commit(tmp_path, {"results.csv": "1"}, inputs=[str(tmp_path / "seeds.csv")])
        _commit(tmp_path, {"results.csv": "2"}, inputs=[str(tmp_path / "seeds.csv")])
        assert (tmp_path / "seeds.csv").read_text() == "data"

    def test_dot_is_resolved_before_the_work(self, tmp_path, monkeypatch):
        before = _users_files(tmp_path)
        monkeypatch.chdir(tmp_path)
        with _files.staged_directory(".", RESULTS) as staging:
            assert os.path.dirname(staging) == str(tmp_path)
            monkeypatch.chdir("/")  # where the process is when the commit happens does not matter
            _write(os.path.join(staging, "results.json"), "new")
        assert (tmp_path / "results.json").read_text() == "new"
        assert {k: v for k, v in _snapshot(tmp_path).items() if k in before} == before

    def test_an_unreadable_manifest_is_refused_by_name(self, tmp_path):
        _write(tmp_path / _files.MANIFEST, "not json")
        with pytest.raises(ValueError, match="is not a keras_ils manifest"):
            with _files.staged_directory(str(tmp_path), RESULTS):
                pass

    @pytest.mark.parametrize("output_dir", ["/proc/keras-ils-test/run", "/proc/self"])
    def test_an_unwritable_output_directory_fails_before_the_work(self, output_dir):
        ran = []
        with pytest.raises(ValueError, match="Cannot write the output directory"):
            with _files.staged_directory(output_dir, RESULTS):
                ran.append(True)
        assert ran == []

    def test_an_output_path_that_is_a_file_fails_before_the_work(self, tmp_path):
        _write(tmp_path / "run")
        with pytest.raises(ValueError, match="exists and is not a directory"):
            with _files.staged_directory(str(tmp_path / "run")):
                pass


class TestClaim:
    def test_claimed_patterns_are_the_packages_and_other_entries_refused(self, tmp_path):
        _files.claim(str(tmp_path), ("runs", "table3.md"))
        (tmp_path / "runs").mkdir()
        _write(tmp_path / "table3.md", "ours")
        _files.claim(str(tmp_path), ("runs", "table3.md"))  # ours now: a resumed run is not refused
        _write(tmp_path / "cd_table3_nll.png", "mine")
        with pytest.raises(ValueError, match="holds cd_table3_nll.png"):
            _files.claim(str(tmp_path), ("runs", "table3.md", "cd_table3_*.png"))


class TestAbandonedStaging:
    def test_a_killed_run_leaves_staging_that_the_next_start_removes(self, tmp_path):
        before = _users_files(tmp_path)
        script = textwrap.dedent(f"""
            import os, sys, time
            from keras_ils import _files
            with _files.staged_directory({str(tmp_path)!r}, ("results.json",)) as staging:
                open(os.path.join(staging, "results.json"), "w").close()
                print("staged", flush=True)
                time.sleep(60)
        """)
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "staged"
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert len(_stray(tmp_path)) == 1
        _commit(tmp_path, {"results.json": "new"})
        assert _stray(tmp_path) == [] and (tmp_path / "results.json").read_text() == "new"
        assert {k: v for k, v in _snapshot(tmp_path).items() if k in before} == before

    def test_staging_of_live_runs_is_kept(self, tmp_path):
        live = tmp_path / f".keras-ils-staging-{os.getppid()}-abc"
        live.mkdir()
        _files.finish_interrupted_commits(str(tmp_path))
        assert live.exists()


# The commit run in a child that loads `keras_ils/_files.py` alone (no TensorFlow) and kills itself with SIGKILL
# just before its `kill_at`-th `os.replace`: every moment of the commit is a possible kill (the manifest and the
# journal written into the staging folder, the old set moved aside, the new set moved in, the manifest moved in).
_KILLED_COMMIT = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("files", sys.argv[1])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
calls, replace = [0], os.replace
def killing_replace(*args):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(*args)
files.os.replace = killing_replace
with files.staged_directory(sys.argv[2], ("results.json", "reliability_*.png", "seed0")) as staging:
    for name in ("results.json", "reliability_new.png", "seed0"):
        if name == "seed0":
            os.mkdir(os.path.join(staging, name))
            name = "seed0/results.json"
        open(os.path.join(staging, name), "w").write("new")
"""


def _result_set(out) -> dict:
    names = ("results.json", "reliability_old.png", "reliability_new.png", "seed0/results.json")
    return {name: (out / name).read_text() for name in names if (out / name).exists()}


class TestKilledCommit:
    # 9 replaces: manifest and journal into the staging folder (1-2), the old set aside (3-5), the new set in (6-8),
    # the manifest in (9); killing at 10 kills nothing
    @pytest.mark.parametrize("kill_at", range(1, 11))
    def test_the_old_set_or_the_new_never_a_mix_and_the_users_files_untouched(self, tmp_path, kill_at):
        out = tmp_path / "run"
        before = _users_files(out)
        _commit(out, {"results.json": "old", "reliability_old.png": "old", "seed0/results.json": "old"})
        script = [sys.executable, "-c", _KILLED_COMMIT, _files.__file__, str(out), str(kill_at)]
        killed = subprocess.run(script).returncode == -signal.SIGKILL
        assert killed == (kill_at <= 9)
        if kill_at == 7:  # the first new entry moved in: the next run is not refused for it, and replaces the set
            _commit(out, {"results.json": "next"}, planned=("results.json", "reliability_*.png", "seed0"))
            assert _result_set(out) == {"results.json": "next"} and _stray(out) == []
            assert {k: v for k, v in _snapshot(out).items() if k in before} == before
            return
        _files.finish_interrupted_commits(str(out))  # what the next run into `out` does first
        old = {"results.json": "old", "reliability_old.png": "old", "seed0/results.json": "old"}
        new = {"results.json": "new", "reliability_new.png": "new", "seed0/results.json": "new"}
        assert _result_set(out) == (old if kill_at <= 2 else new)  # once the journal is written, the new set
        assert _stray(out) == []
        assert {k: v for k, v in _snapshot(out).items() if k in before} == before
        manifest = json.loads((out / _files.MANIFEST).read_text())
        assert sorted(manifest["results"]) == sorted({name.split("/")[0] for name in _result_set(out)})
        _commit(out, {"results.json": "again"}, planned=("results.json", "reliability_*.png", "seed0"))
        assert _result_set(out) == {"results.json": "again"} and _stray(out) == []
        assert {k: v for k, v in _snapshot(out).items() if k in before} == before
