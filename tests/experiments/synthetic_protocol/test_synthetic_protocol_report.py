from keras_ils_experiments import synthetic_protocol


def test_markdown_has_a_line_per_row_and_per_claim(fake_results):
    results = fake_results({"ILS": [dict(nll=0.4)] * 4})
    summary = synthetic_protocol.summarise(results)
    text = synthetic_protocol.markdown(results, summary, "keras-ils benchmark synthetic --quick")
    assert text.startswith("Command: `keras-ils benchmark synthetic --quick`\n\n4 replicates (seeds 0..3), ")
    lines = text.splitlines()
    assert sum(line.startswith("| ILS | No | ") for line in lines) == 1
    assert "| 0.4000 (0.5089) |" in next(line for line in lines if line.startswith("| ILS | No | "))
    appendix, table1 = text.split("Table 1 (the motivation table)")
    rows = [
        line for line in appendix.splitlines() if line.startswith("| ") and (" | No | " in line or " | Yes | " in line)
    ]
    assert len(rows) == len(synthetic_protocol.ROWS)
    assert sum(" | No | " in line or " | Yes | " in line for line in table1.splitlines()) == 9
    assert sum(" beats " in line for line in lines) == len(synthetic_protocol.CLAIMS)
