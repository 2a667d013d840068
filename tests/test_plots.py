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
    # four reliability panels (the reference and three others) of 3.4 in, three a line: two lines, 3 x 3.4 in wide;
    # 1.8 in of row names and three scores of 1.9 in
    assert image.shape[:2] == (680, 1770)
    assert os.listdir(tmp_path) == ["c.png"]  # written atomically: no temporary file left


def _reliability_axes(figure):
    return [axis for axis in figure.axes if axis.get_visible() and axis.get_xlabel() == "confidence"]


def _fifteen_methods(seeds, seed=0):
    """15 models, each as trained and + TempS (30 rows), one reliability bin of 40 points per seed, NLL per seed."""
    rng = np.random.default_rng(seed)
    models = ["No LS", "Dis", "cLS", "LS", "ILS1", "ILS2", "ILS", "Focal", "FLSD-53", "MbLS", "MMCE", "MDCA"]
    names = [m + suffix for m in [*models, "OLS", "BS_Soft", "Beta"] for suffix in ("", " + TempS")]
    bins = [(np.array([0.0, 40.0]), np.array([0.0, 30.0]), np.array([0.0, 32.0]))] * seeds
    curves = {name: bins if seeds > 1 else bins[0] for name in names}
    nll = {name: rng.uniform(0.3, 0.9, seeds) for name in names}
    scores = {name: {"nll": list(nll[name]), "ece": list(rng.uniform(0.01, 0.1, seeds))} for name in names}
    return names, curves, scores, nll


@pytest.mark.parametrize("seeds", [1, 3])
def test_comparison_draws_the_reference_and_the_four_rows_of_lowest_nll(seeds):
    names, curves, scores, nll = _fifteen_methods(seeds)
    figure = plots._comparison_figure(curves, scores, "t")
    order = [names[i] for i in np.argsort([nll[name].mean() for name in names], kind="stable")]
    best = [name for name in order if name != "No LS + TempS"][:4]
    reliability = _reliability_axes(figure)
    assert [axis.get_title().split("\n")[0] for axis in reliability] == ["No LS + TempS", *best]
    rank = order.index("No LS + TempS") + 1
    assert reliability[0].get_title() == f"No LS + TempS\nreference, NLL rank {rank} of 30"
    places = [f"NLL rank {order.index(name) + 1} of 30" for name in best]
    assert [axis.get_title().split("\n")[1] for axis in reliability[1:]] == places
    for axis, name in zip(reliability, ["No LS + TempS", *best], strict=True):
        labels = [line.get_label() for line in axis.lines]
        # the row's curve, the reference's thin curve behind it (not in its own panel), the diagonal
        assert labels[:-1] == ([name] if name == "No LS + TempS" else ["reference", name])
    nll_axis = next(axis for axis in figure.axes if axis.get_title() == "NLL")
    assert [label.get_text() for label in nll_axis.get_yticklabels()] == order  # every row, lowest NLL first


def test_comparison_gives_each_drawn_row_its_own_colour_and_a_legible_legend():
    from matplotlib.colors import to_rgb

    names, curves, scores, _ = _fifteen_methods(3, seed=1)
    figure = plots._comparison_figure(curves, scores, None, best=6)
    reliability = _reliability_axes(figure)
    drawn = [axis.get_title().split("\n")[0] for axis in reliability]
    colours = {}
    for axis, name in zip(reliability, drawn, strict=True):
        colours[name] = to_rgb(next(line for line in axis.lines if line.get_label() == name).get_color())
        assert to_rgb(axis.title.get_color()) == colours[name]
        legend = axis.get_legend()
        assert [text.get_text() for text in legend.get_texts()][-1] == name
        assert min(text.get_fontsize() for text in legend.get_texts()) >= 9
    assert len(drawn) == 7 and len(set(colours.values())) == 7  # never two drawn rows of one colour
    assert colours["No LS + TempS"] == (0.0, 0.0, 0.0)
    # the score panels: the drawn rows' names in their colours; every other row's dots grey, none in a drawn colour
    nll_axis = next(axis for axis in figure.axes if axis.get_title() == "NLL")
    for label in nll_axis.get_yticklabels():
        assert label.get_fontsize() >= 8
        if label.get_text() in colours:
            assert to_rgb(label.get_color()) == colours[label.get_text()] and label.get_fontweight() == "bold"
    order = [label.get_text() for label in nll_axis.get_yticklabels()]
    for dot in (c for c in nll_axis.collections if len(c.get_offsets())):
        name, colour = order[round(dot.get_offsets()[0, 1])], to_rgb(dot.get_edgecolor()[0])
        assert colour == colours[name] if name in colours else colour not in colours.values()


@pytest.mark.slow  # 9 s: a second large figure; the drawn rows are checked with the reference by default
def test_comparison_without_the_reference_draws_the_best_rows_only():
    names, curves, scores, nll = _fifteen_methods(1)
    del curves["No LS + TempS"], scores["No LS + TempS"]
    figure = plots._comparison_figure(curves, scores, None, best=2)
    order = sorted(scores, key=lambda name: nll[name].mean())
    reliability = _reliability_axes(figure)
    assert [axis.get_title().split("\n")[0] for axis in reliability] == order[:2]
    assert all("reference" not in [line.get_label() for line in axis.lines] for axis in reliability)
    figure = plots._comparison_figure(curves, scores, None, reference="ILS", best=0)
    assert [axis.get_title() for axis in _reliability_axes(figure)] == [
        f"ILS\nreference, NLL rank {order.index('ILS') + 1} of 29"
    ]


@pytest.mark.parametrize("best", [-1, 7, 2.0, True, "4"])
def test_comparison_refuses_a_best_out_of_the_palette(best, tmp_path):
    _, curves, scores, _ = _fifteen_methods(1)
    with pytest.raises(ValueError, match="Invalid value for argument `best`. Expected an int from 0 to 6"):
        plots.comparison(curves, scores, str(tmp_path / "c.png"), best=best)
    assert not os.listdir(tmp_path)


def test_comparison_puts_a_dot_per_row_and_score_in_nll_order():
    names = [m + suffix for m in ("No LS", "LS", "ILS") for suffix in ("", " + TempS", " + Isotonic")]
    nll = np.array([1.4, 1.1, 1.3, 0.5, 0.9, 0.7, 1.0, 0.6, 15.0])
    curves = {name: (np.array([0.0, 50.0]), np.array([0.0, 40.0]), np.array([0.0, 45.0])) for name in names}
    scores = {n: {"nll": nll[i], "ece": 0.01 * (i + 1), "smooth_ece": 0.02} for i, n in enumerate(names)}
    figure = plots._comparison_figure(curves, scores, "t")
    order = [names[i] for i in np.argsort(nll)]
    by_title = {axis.get_title(): axis for axis in figure.axes}
    assert [t.get_text() for t in by_title["NLL"].get_yticklabels()] == order
    for metric, title in (("nll", "NLL"), ("ece", "ECE")):
        dots = np.concatenate([c.get_offsets() for c in by_title[title].collections if len(c.get_offsets())])
        np.testing.assert_allclose(dots[:, 0], [scores[n][metric] for n in order])
        np.testing.assert_allclose(dots[:, 1], np.arange(len(names)))
    assert by_title["NLL"].get_xscale() == "log" and by_title["smooth ECE"].get_xscale() == "linear"  # 0.5..15 vs flat
    # the reference and four others: five panels, three a line, two lines as tall as the 9 rows' column or taller
    assert len(_reliability_axes(figure)) == 5
    assert figure.get_size_inches()[1] == max(2 * plots._PANEL, 1.4 + plots._ROW_HEIGHT * 9)


def test_comparison_grows_with_the_rows_to_keep_them_legible():
    bins = (np.array([10.0]), np.array([8.0]), np.array([9.0]))
    names = [f"M{m}" + suffix for m in range(15) for suffix in ("", " + TempS", " + VS", " + Isotonic")]
    figure = plots._comparison_figure({n: bins for n in names}, {n: {"nll": 1.0} for n in names}, None)
    assert figure.get_size_inches()[1] == 1.4 + plots._ROW_HEIGHT * 60  # 0.19 in (19 px at 100 dpi) per row


def test_comparison_with_seeds_pools_the_curves_and_whiskers_only_the_full_bins(tmp_path):
    from matplotlib.figure import Figure

    counts = [np.array([0, 4, 12, 20]), np.array([2, 2, 16, 9]), np.array([1, 3, 10, 30])]
    correct = [np.array([0, 1, 6, 20]), np.array([1, 2, 16, 9]), np.array([0, 3, 9, 27])]
    confidence = [np.array([0, 2.0, 7.2, 18.0]), np.array([0.6, 1.2, 9.6, 8.1]), np.array([0.3, 1.8, 6.0, 27.0])]
    runs = list(zip(counts, correct, confidence, strict=True))
    axis = Figure().subplots()
    plots._reliability_curve(axis, plots._runs(runs), "ILS", "C0")
    markers = np.concatenate([collection.get_offsets() for collection in axis.collections[:2]])
    # pooled bins: counts [3, 9, 38, 59], correct [1, 6, 31, 56], confidence [0.9, 5.0, 22.8, 53.1]
    x = np.array([0.9 / 3, 5.0 / 9, 22.8 / 38, 53.1 / 59])
    np.testing.assert_allclose(sorted(markers[:, 0]), x)
    np.testing.assert_allclose(markers[np.argsort(markers[:, 0]), 1], [1 / 3, 6 / 9, 31 / 38, 56 / 59])
    np.testing.assert_allclose(axis.lines[0].get_xdata(), x[2:])  # the bins of >= 10 points per run are joined
    # the whisker: only bin 2 holds >= 10 points in every seed (bin 3's second seed has 9); seeds' accuracies there
    # 6/12, 16/16, 9/10: from 0.5 to 1.0
    (whisker,) = axis.collections[2].get_segments()
    np.testing.assert_allclose(whisker, [[x[2], 0.5], [x[2], 1.0]])
    assert len(axis.collections) == 3
    scores = {"ILS": {"nll": [0.5, 0.7, 0.6], "ece": [0.02, 0.04, 0.03], "cwece": [0.03, 0.01, 0.02]}}
    figure = plots._comparison_figure({"ILS": runs}, scores, "t")
    nll = next(axis for axis in figure.axes if axis.get_title() == "NLL")
    np.testing.assert_allclose(nll.lines[0].get_xdata(), [0.5, 0.7])  # the whisker spans the seeds
    np.testing.assert_allclose(nll.collections[0].get_offsets(), [[0.6, 0.0]])  # the dot is their mean
    assert "3 seeds" in figure.get_suptitle()


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
