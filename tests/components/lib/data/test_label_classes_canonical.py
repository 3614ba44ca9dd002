"""Label classes are canonical text: a numeric label stored as float in some partitions is the same class."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.encoding import encode_labels
from ctpipe.components.lib.data.snapshot import infer_schema


def _frame(labels) -> pd.DataFrame:
    return pd.DataFrame({"x": np.arange(len(labels), dtype="float64"), "label": labels})


def test_a_float_label_gives_the_same_classes_as_the_integer_label():
    as_int = infer_schema(_frame(pd.Series([0, 1, 1, 0], dtype="int64")), label="label", key=None,
                          features=[], categorical=[])
    # One partition with a null label turns the column into float64: 1 -> 1.0.
    as_float = infer_schema(_frame(pd.Series([0.0, 1.0, np.nan, 1.0])), label="label", key=None,
                            features=[], categorical=[])
    assert as_int.classes == ["0", "1"]
    assert as_float.classes == ["0", "1"]


def test_float_labels_encode_against_classes_learned_from_integer_labels():
    classes = ["0", "1"]
    encoded = encode_labels(_frame(pd.Series([1.0, 0.0, 1.0])), "label", classes)
    assert encoded.tolist() == [1, 0, 1]


def test_boolean_and_text_labels_keep_their_canonical_names():
    schema = infer_schema(_frame(pd.Series([True, False, True])), label="label", key=None, features=[],
                          categorical=[])
    assert schema.classes == ["false", "true"]
    assert encode_labels(_frame(pd.Series([True, False])), "label", schema.classes).tolist() == [1, 0]
    text = infer_schema(_frame(pd.Series(["stay", "churn"])), label="label", key=None, features=[], categorical=[])
    assert text.classes == ["churn", "stay"]
