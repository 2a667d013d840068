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
