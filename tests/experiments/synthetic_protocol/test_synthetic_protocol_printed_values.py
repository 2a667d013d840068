from keras_ils_experiments.synthetic_protocol import printed_values


def test_every_paper_row_and_claim_names_a_table_row():
    assert set(printed_values.PAPER) <= set(printed_values.ROWS)
    assert all(a in printed_values.ROWS and b in printed_values.ROWS for _, a, b, _ in printed_values.CLAIMS)


def test_claims_are_named_by_their_rows():
    names = [name for name, *_ in printed_values.CLAIMS]
    assert len(set(names)) == len(names) == 20
    assert "ILS +TempS beats Standard LS +TempS in nll" in names
    assert "No LS +TempS beats Standard LS in class_conditional_ece" in names


def test_the_ils_rows_hold_p1_in_its_grid():
    # the paper prints P1 and P2 of its ILS rows swapped; the data holds them in grid order
    assert (
        0.75 <= printed_values.PAPER[("ILS", False)]["p1"] <= 0.85
        and printed_values.PAPER[("ILS", False)]["p2"] == 1.63
    )
