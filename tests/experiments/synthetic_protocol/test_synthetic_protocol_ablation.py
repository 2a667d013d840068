import pytest

from keras_ils_experiments import synthetic_protocol
from keras_ils_experiments.synthetic_protocol import ablation


def test_within_paper_against_the_printed_rows(fake_results):
    # No LS 0.003 below the paper's 78.45 % and 0.009 CE above its 0.5589; LS 0.006 below its 79.44 %
    results = fake_results(
        {
            "No LS": [dict(accuracy=0.7815, nll=0.5679)] * 4,
            "Standard LS": [dict(accuracy=0.7884, nll=0.5318)] * 4,
        }
    )
    near = ablation.within_paper(synthetic_protocol.summarise(results))
    assert near[("No LS", False)][0] == pytest.approx(-0.003) and near[("No LS", False)][2]
    assert near[("Standard LS", False)][0] == pytest.approx(-0.006) and not near[("Standard LS", False)][2]


def test_table_has_a_row_per_variant_in_both_parts(fake_results):
    runs = {
        "a": dict(results=fake_results(), meta=dict(commit="0123456789")),
        "b": dict(results=fake_results(), meta={}),
    }
    text = ablation.table(runs)
    assert sum(line.startswith("| a | ") for line in text.splitlines()) == 2
    assert sum(line.startswith("| b | ") for line in text.splitlines()) == 2
    assert "`0123456`" in text and "| **paper** | 100 | | 78.45 | 66.54 | 0.5589 | 79.44 | 0.5318 |" in text
