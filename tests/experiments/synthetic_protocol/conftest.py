import pytest

from keras_ils_experiments import synthetic_protocol


@pytest.fixture
def fake_results():
    """Builds `run_replicates`-shaped results (4 replicates) whose rows hold the given metric values."""

    def build(per_row=None):
        metrics = dict.fromkeys(synthetic_protocol.METRICS, 0.5)
        per_replicate = {}
        for method, temps in synthetic_protocol.ROWS:
            key = f"{method}{' +TempS' if temps else ''}"
            values = (per_row or {}).get(key, [{}] * 4)
            per_replicate[key] = [dict(metrics, temps=1.0, val_loss=0.5, **v) for v in values]
        per_replicate["ILS1"] = [dict(r, p1=0.8, p2=2.0) for r in per_replicate["ILS1"]]
        curves = {
            t: dict(teacher_sum=[0.0] * 50, student_sum=[[0.0] * 50, [0.0] * 50], count=[0] * 50)
            for t in ("bayes/train", "bayes/test", "no_ls_temps/train", "no_ls_temps/test")
        }
        settings = dict(replicates=4, seed=0, quick=True, n_test=200, models_trained=34, model_epochs=340, seconds=1.0)
        return dict(settings, per_replicate=per_replicate, curves=curves, ls_epsilons=[0.01, 0.2])

    return build
