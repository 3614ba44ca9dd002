"""A numeric column that arrives as numeric text is reported as text, not as '0 non-numeric values'."""

from __future__ import annotations

import pandas as pd

from ctpipe.components.lib.data.splits import PARTITION_COLUMN
from ctpipe.components.steps.validate_data.checks import check_numeric_types

REFERENCE = {"label": "label", "key": None, "numeric": ["amount"], "categorical": []}


def test_numbers_written_as_text_are_named_as_such():
    data = pd.DataFrame({"amount": ["1.5", "2", "3.25", None], "label": ["a", "b", "a", "b"],
                         PARTITION_COLUMN: ["p"] * 4})
    (finding,) = check_numeric_types(data, REFERENCE, [])
    assert not finding.passed
    assert "0 non-numeric" not in finding.message
    assert "as text" in finding.message and "all 3" in finding.message
    assert "'1.5'" in finding.message  # an example of the text values
    assert finding.observed.endswith("(numbers as text)")


def test_stray_text_in_a_numeric_column_still_counts_the_bad_values():
    data = pd.DataFrame({"amount": ["1.5", "oops", "3", "n/a"], "label": ["a", "b", "a", "b"],
                         PARTITION_COLUMN: ["p"] * 4})
    (finding,) = check_numeric_types(data, REFERENCE, [])
    assert "holds 2 non-numeric value(s)" in finding.message
    assert "n/a" in finding.message and "oops" in finding.message


def test_a_numeric_column_arriving_as_booleans_or_dates_is_named_by_its_type_not_as_numbers_in_text():
    for values, family in (([True, False, True, None], "boolean"),
                           (pd.to_datetime(["2026-01-01", "2026-01-02", None, "2026-01-04"]), "datetime")):
        data = pd.DataFrame({"amount": values, "label": ["a", "b", "a", "b"], PARTITION_COLUMN: ["p"] * 4})
        (finding,) = check_numeric_types(data, REFERENCE, [])
        # Before: "arrives as text (dtype bool): all 3 non-null values are numbers written as text".
        assert not finding.passed and finding.severity == "error"
        assert "numbers written as text" not in finding.message and "as text" not in finding.message
        assert f"arrives as {family} values (dtype {data['amount'].dtype})" in finding.message, finding.message
