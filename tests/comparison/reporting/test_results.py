"""The line under a one-seed table when "+ TempS" rows are worse than their networks (`results.temperature_note`)."""

from keras_ils.comparison.reporting import results


def _results(dataset, nll):
    rows = [{"model": name, "all": {"nll": value}} for name, value in nll.items()]
    return {"dataset": dataset, "rows": rows, "validation_examples": 150, "teacher_temperature": 0.721}


def test_worse_scaled_rows_are_counted_and_the_advice_names_a_flag_the_data_take():
    nll = {"No LS": 0.5091, "No LS + TempS": 0.5283, "LS": 0.50, "LS + TempS": 0.49}
    note = results.temperature_note(_results("synthetic", nll))
    assert note.startswith("Note: + TempS is worse than its network on 1 of 2 rows. T* is fitted on the 150 ")
    assert "(No LS: T* = 0.721, test NLL 0.5091 -> 0.5283)" in note and "(--validation-size 600)" in note
    assert "(--validation-fraction)" in results.temperature_note(_results("wine.csv", nll))


def test_no_note_when_every_scaled_row_is_at_least_as_good():
    nll = {"No LS": 0.51, "No LS + TempS": 0.50, "LS": 0.49, "LS + TempS": 0.49}
    assert results.temperature_note(_results("synthetic", nll)) is None
