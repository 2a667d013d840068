import matplotlib.image
import numpy as np

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
