import json
import os
import subprocess
import sys

import pytest

from keras_ils_experiments import synthetic_protocol
from keras_ils_experiments.synthetic_protocol import figures


@pytest.mark.parametrize("teacher", ["bayes", "no_ls_temps"])
def test_plot_curves_writes_a_png(tmp_path, fake_results, teacher):
    summary = synthetic_protocol.summarise(fake_results())
    path = figures.plot_curves(summary, str(tmp_path / "out" / "curve.png"), teacher)
    assert (tmp_path / "out" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path == str(tmp_path / "out" / "curve.png") and os.listdir(tmp_path / "out") == ["curve.png"]


_DRAW_UNDER_SVG = """
import json
import sys

import matplotlib

from keras_ils_experiments.synthetic_protocol import figures

before = matplotlib.rcParams["backend"]
figures.plot_curves(json.load(open(sys.argv[1])), sys.argv[2], "bayes")
print(before, matplotlib.rcParams["backend"], matplotlib.get_backend())
"""


@pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_plot_curves_leaves_the_matplotlib_backend_alone(tmp_path, fake_results):
    # a fresh process whose backend is svg: a library that called matplotlib.use("Agg") would leave agg
    (tmp_path / "summary.json").write_text(json.dumps(synthetic_protocol.summarise(fake_results())))
    env = dict(os.environ, MPLBACKEND="svg", TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", _DRAW_UNDER_SVG, str(tmp_path / "summary.json"), str(tmp_path / "c.png")]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["svg", "svg", "svg"]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
