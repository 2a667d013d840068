"""Results written whole: staged output directories, abandoned staging removed, result sets replaced."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from keras_ils import _files

RESULTS = ("results.json", "results.csv", "reliability_*.png")


def _write(path, text="x"):
    with open(path, "w") as file:
        file.write(text)


class TestStagedDirectory:
    def test_success_moves_the_files_in_and_leaves_no_staging(self, tmp_path):
        out = tmp_path / "run"
        with _files.staged_directory(str(out), RESULTS) as staging:
            _write(os.path.join(staging, "results.json"))
        assert sorted(os.listdir(out)) == ["results.json"]
        assert [p for p in os.listdir(tmp_path) if p.startswith(".keras-ils-staging-")] == []

    def test_failure_writes_nothing(self, tmp_path):
        out = tmp_path / "run"
        with pytest.raises(RuntimeError), _files.staged_directory(str(out), RESULTS) as staging:
            _write(os.path.join(staging, "results.json"))
            raise RuntimeError("training failed")
        assert not out.exists() and os.listdir(tmp_path) == []

    def test_a_rerun_replaces_the_whole_result_set_and_keeps_other_files(self, tmp_path):
        out = tmp_path / "run"
        (out / "search").mkdir(parents=True)
        for name in ("results.json", "results.csv", "reliability_ils.png", "reliability_ls.png", "notes.txt"):
            _write(out / name, "old")
        with _files.staged_directory(str(out), RESULTS) as staging:
            _write(os.path.join(staging, "results.json"), "new")
            _write(os.path.join(staging, "reliability_ls.png"), "new")
        assert sorted(os.listdir(out)) == ["notes.txt", "reliability_ls.png", "results.json", "search"]
        assert (out / "results.json").read_text() == (out / "reliability_ls.png").read_text() == "new"

    def test_a_writable_output_directory_in_an_unwritable_parent_names_the_parent(self, tmp_path, monkeypatch):
        out = tmp_path / "run"
        out.mkdir()
        mkstemp = _files.tempfile.mkstemp

        def refuse_the_parent(dir=None, **kwargs):  # root ignores permission bits, so refuse as the kernel would
            if os.path.abspath(dir) == str(tmp_path):
                raise PermissionError(13, "Permission denied")
            return mkstemp(dir=dir, **kwargs)

        monkeypatch.setattr(_files.tempfile, "mkstemp", refuse_the_parent)
        with pytest.raises(ValueError, match=f"{tmp_path}, where the results are staged .* is not writable"):
            _files.check_writable(str(out))

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


class TestAbandonedStaging:
    def test_a_killed_run_leaves_staging_that_the_next_start_removes(self, tmp_path):
        out = tmp_path / "run"
        script = textwrap.dedent(f"""
            import os, sys, time
            from keras_ils import _files
            with _files.staged_directory({str(out)!r}) as staging:
                open(os.path.join(staging, "results.json"), "w").close()
                print("staged", flush=True)
                time.sleep(60)
        """)
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "staged"
        child.send_signal(signal.SIGKILL)
        child.wait()
        left = [p for p in os.listdir(tmp_path) if p.startswith(".keras-ils-staging-run-")]
        assert len(left) == 1 and not out.exists()
        with _files.staged_directory(str(out)) as staging:
            _write(os.path.join(staging, "results.json"))
        assert [p for p in os.listdir(tmp_path) if p.startswith(".keras-ils-staging-")] == []

    def test_staging_of_live_runs_and_of_other_outputs_is_kept(self, tmp_path):
        live = tmp_path / f".keras-ils-staging-run-{os.getppid()}-abc"
        other = tmp_path / ".keras-ils-staging-other-999999999-abc"
        longer_name = tmp_path / ".keras-ils-staging-run-2024-999999999-abc"  # output "run-2024", not "run"
        for path in (live, other, longer_name):
            path.mkdir()
        _files.remove_abandoned_staging(str(tmp_path / "run"))
        assert live.exists() and other.exists() and longer_name.exists()


# The replacement run in a child that loads `keras_ils/_files.py` alone (no TensorFlow) and kills itself with
# SIGKILL just before its `kill_at`-th `os.replace`: every moment of the final move is a possible kill.
_KILLED_REPLACEMENT = """
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
with files.staged_directory(sys.argv[2], ("results.json", "reliability_*.png")) as staging:
    for name in ("results.json", "reliability_new.png"):
        open(os.path.join(staging, name), "w").write("new")
"""


class TestKilledReplacement:
    @pytest.mark.parametrize("kill_at", range(1, 7))
    def test_the_old_set_or_the_new_never_a_mix_and_kept_entries_come_back(self, tmp_path, kill_at):
        out = tmp_path / "run"
        (out / "search").mkdir(parents=True)
        _write(out / "search" / "trial.json", "kept")
        for name in ("results.json", "reliability_old.png", "notes.txt"):
            _write(out / name, "old")
        script = [sys.executable, "-c", _KILLED_REPLACEMENT, _files.__file__, str(out), str(kill_at)]
        killed = subprocess.run(script).returncode == -signal.SIGKILL
        assert killed == (kill_at <= 5)  # the carried list, notes.txt, search, the old set aside, the new set in
        results = {
            n: (out / n).read_text()
            for n in ("results.json", "reliability_old.png", "reliability_new.png")
            if (out / n).exists()
        }
        old = {"results.json": "old", "reliability_old.png": "old"}
        new = {"results.json": "new", "reliability_new.png": "new"}
        assert results in (old, new, {}), results
        assert results != {} or kill_at == 5  # only between the two renames is there no result set at all
        _files.remove_abandoned_staging(str(out))
        assert (out / "search" / "trial.json").read_text() == "kept" and (out / "notes.txt").read_text() == "old"
        assert [p for p in os.listdir(tmp_path) if p != "run"] == []
        assert ".keras-ils-carried" not in os.listdir(out)
