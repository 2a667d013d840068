import os
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest

from keras_ils import plots


def test_reliability_diagram_png(tmp_path):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=500)
    labels = rng.integers(0, 4, 500)
    path = plots.reliability_diagram(probs, labels, str(tmp_path / "out" / "r.png"), title="test")
    with open(path, "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 200
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.png"]


_DRAW_UNDER_SVG = """
import sys

import matplotlib
import numpy as np
import pytest

from keras_ils import plots

before = matplotlib.rcParams["backend"]
rng = np.random.default_rng(0)
plots.reliability_diagram(rng.dirichlet(np.ones(3), size=50), rng.integers(0, 3, 50), sys.argv[1])
print(before, matplotlib.rcParams["backend"], matplotlib.get_backend())
"""


@pytest.mark.slow  # ~10 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_reliability_diagram_leaves_the_matplotlib_backend_alone(tmp_path):
    # a fresh process whose backend is svg: a library that called matplotlib.use("Agg") would leave agg
    env = dict(os.environ, MPLBACKEND="svg", TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", _DRAW_UNDER_SVG, str(tmp_path / "r.png")]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["svg", "svg", "svg"]
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_comparison_png(tmp_path):
    from keras_ils import evaluation

    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 300)
    sharp = np.eye(3)[labels] * 0.6 + rng.dirichlet([1, 1, 1], 300) * 0.4
    curves = {name: evaluation.top_label_bins(sharp, labels) for name in ("No LS", "No LS + TempS", "ILS", "ILS + Dir")}
    scores = {name: {"nll": 0.5, "ece": 0.05, "cwece": 0.03} for name in curves}
    path = plots.comparison(curves, scores, str(tmp_path / "c.png"), title="t")
    image = matplotlib.image.imread(path)
    # three reliability panels (as trained, + TempS, + Dir) of 3.9 in, 1.6 in of row names, three scores of 1.9 in
    assert image.shape[:2] == (480, 1900)
    assert os.listdir(tmp_path) == ["c.png"]  # written atomically: no temporary file left


def _titles(figure):
    return [axis.get_title() for axis in figure.axes if axis.get_visible()]


def test_comparison_has_a_panel_per_calibrator_and_a_row_per_name():
    counts, correct, confidence = np.array([0.0, 50.0]), np.array([0.0, 40.0]), np.array([0.0, 45.0])
    models = ["No LS", "LS", "ILS"]
    names = [m + suffix for m in models for suffix in ("", " + TempS", " + Histogram", " + Isotonic", " + Ensemble TS")]
    curves = {name: (counts, correct, confidence) for name in names}
    scores = {name: {"nll": 1.0 + i, "ece": 0.01 * (i + 1), "smooth_ece": 0.02} for i, name in enumerate(names)}
    figure = plots._comparison_figure(curves, scores, "t")
    reliability = ["as trained", "+ TempS", "+ Histogram", "+ Isotonic", "+ Ensemble TS"]
    assert _titles(figure) == [*reliability, "NLL", "ECE", "smooth ECE"]
    by_title = {axis.get_title(): axis for axis in figure.axes}
    assert [len(by_title[title].lines) for title in reliability] == [4] * 5  # three curves and the diagonal each
    assert [t.get_text() for t in by_title["NLL"].get_yticklabels()] == names  # top to bottom in the order given
    for metric, title in (("nll", "NLL"), ("ece", "ECE")):
        dots = np.concatenate([c.get_offsets() for c in by_title[title].collections if len(c.get_offsets())])
        np.testing.assert_allclose(dots[:, 0], [scores[n][metric] for n in names])
        np.testing.assert_allclose(dots[:, 1], np.arange(len(names)))
    assert by_title["NLL"].get_xscale() == "log" and by_title["smooth ECE"].get_xscale() == "linear"  # 1..15 vs flat
    # 15 rows: the panels fill two lines of three; the score column is as tall
    assert figure.get_size_inches()[1] == max(2 * 3.9, 1.4 + plots._ROW_HEIGHT * 15)


def test_comparison_grows_with_the_rows_to_keep_them_legible():
    bins = (np.array([10.0]), np.array([8.0]), np.array([9.0]))
    names = [f"M{m}" + suffix for m in range(15) for suffix in ("", " + TempS", " + VS", " + Isotonic")]
    figure = plots._comparison_figure({n: bins for n in names}, {n: {"nll": 1.0} for n in names}, None)
    height = figure.get_size_inches()[1]
    assert height == 1.4 + plots._ROW_HEIGHT * 60  # about 0.17 in (17 px at 100 dpi) per row
    assert len(set(plots._colours([f"M{m}" for m in range(15)]).values())) == 15  # tab20 beyond ten models


def test_comparison_with_seeds_pools_the_curves_and_bands_their_range(tmp_path):
    from matplotlib.figure import Figure

    counts = [np.array([0, 4, 6]), np.array([2, 2, 6])]
    correct = [np.array([0, 1, 6]), np.array([1, 2, 3])]
    confidence = [np.array([0, 2.0, 5.4]), np.array([0.6, 1.2, 5.0])]
    runs = list(zip(counts, correct, confidence, strict=True))
    axis = Figure().subplots()
    plots._reliability_curve(axis, plots._runs(runs), "ILS", "C0")
    markers = np.concatenate([collection.get_offsets() for collection in axis.collections[:2]])
    # pooled bins: counts [2, 6, 12], correct [1, 3, 9], confidence [0.6, 3.2, 10.4]; per run [1, 3, 6]: all sparse
    np.testing.assert_allclose(sorted(markers[:, 0]), [0.3, 3.2 / 6, 10.4 / 12])
    np.testing.assert_allclose(markers[np.argsort(markers[:, 0]), 1], [0.5, 0.5, 0.75])
    np.testing.assert_allclose(axis.lines[0].get_ydata(), [0.5, 0.5, 0.75])  # none holds enough: all joined
    band = axis.collections[-1].get_paths()[0].vertices  # after the solid and the hollow markers
    # per-bin accuracy of the runs: bin 0 only run 2 (0.5); bin 1: 0.25 and 1.0; bin 2: 1.0 and 0.5
    for x, low, high in ((0.3, 0.5, 0.5), (3.2 / 6, 0.25, 1.0), (10.4 / 12, 0.5, 1.0)):
        at_x = band[np.isclose(band[:, 0], x), 1]
        assert np.isclose(at_x.min(), low) and np.isclose(at_x.max(), high)
    scores = {"ILS": {"nll": [0.5, 0.7], "ece": [0.02, 0.04], "cwece": [0.03, 0.01]}}
    path = plots.comparison({"ILS": runs}, scores, str(tmp_path / "c.png"), title="t")
    assert matplotlib.image.imread(path).shape[:2] == (480, 1120)  # one reliability panel, three scores
    figure = plots._comparison_figure({"ILS": runs}, scores, "t")
    nll = next(axis for axis in figure.axes if axis.get_title() == "NLL")
    np.testing.assert_allclose(nll.lines[0].get_xdata(), [0.5, 0.7])  # the whisker spans the seeds
    np.testing.assert_allclose(nll.collections[0].get_offsets(), [[0.6, 0.0]])  # the dot is their mean


def test_comparison_draws_sparse_bins_faint_and_hollow():
    from matplotlib.figure import Figure

    # one run; bins of 3, 40 and 9 points: only the 40-point bin is read as solid
    run = (np.array([3.0, 40.0, 9.0]), np.array([1.0, 30.0, 9.0]), np.array([1.2, 28.0, 8.1]))
    axis = Figure().subplots()
    plots._reliability_curve(axis, plots._runs(run), "ILS", "C0")
    solid, hollow = axis.collections[:2]
    np.testing.assert_allclose(axis.lines[0].get_xdata(), [28.0 / 40])  # only the solid bin is joined
    np.testing.assert_allclose(solid.get_offsets(), [[28.0 / 40, 30.0 / 40]])
    np.testing.assert_allclose(hollow.get_offsets(), [[1.2 / 3, 1 / 3], [8.1 / 9, 1.0]])
    assert hollow.get_alpha() < 1 and len(hollow.get_facecolors()) == 0  # hollow: no face colour
    # marker area grows with the points per bin: the 40-point bin's marker is the largest
    assert solid.get_sizes()[0] > max(hollow.get_sizes())
