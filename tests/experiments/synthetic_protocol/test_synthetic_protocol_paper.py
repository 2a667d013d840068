from keras_ils.experiments.synthetic_protocol import paper


def test_every_paper_row_and_claim_names_a_table_row():
    assert set(paper.PAPER) <= set(paper.ROWS)
    assert all(a in paper.ROWS and b in paper.ROWS for _, a, b, _ in paper.CLAIMS)


def test_claims_are_named_by_their_rows():
    names = [name for name, *_ in paper.CLAIMS]
    assert len(set(names)) == len(names) == 20
    assert "ILS +TempS beats Standard LS +TempS in nll" in names
    assert "No LS +TempS beats Standard LS in class_conditional_ece" in names


def test_the_ils_rows_hold_p1_in_its_grid():
    # the paper prints P1 and P2 of its ILS rows swapped; the data holds them in grid order
    assert 0.75 <= paper.PAPER[("ILS", False)]["p1"] <= 0.85 and paper.PAPER[("ILS", False)]["p2"] == 1.63
