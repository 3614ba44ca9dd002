"""The tabular encoding: categorical values find their vocabulary entry whatever dtype holds them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.encoding import Preprocessing, encode_features, preprocessing_of
from ctpipe.components.lib.data.stream_stats import TableStats


def test_an_integer_category_encodes_alike_when_a_null_makes_its_column_float():
    train = pd.DataFrame({"store": np.random.default_rng(0).integers(1, 6, 500)})
    prep = preprocessing_of(TableStats.for_columns([], ["store"]).add(train), [])
    rows = pd.DataFrame({"store": [3, 1, 5, 2]})
    with_null = pd.DataFrame({"store": [3.0, 1.0, 5.0, 2.0, np.nan]})  # e.g. a serving batch with one missing value
    _, as_int = encode_features(rows, prep)
    _, as_float = encode_features(with_null, prep)
    assert (as_int > 0).all()  # every value is a known category
    assert as_float[:4].tolist() == as_int.tolist() and as_float[4, 0] == 0


def test_a_vocabulary_stored_with_float_text_still_knows_the_integers():
    # A model exported before categories were keyed this way stores "3.0" when its train column was float.
    prep = Preprocessing(numeric={}, categorical={"store": ["3.0", "1.0", "x"]}, classes=[])
    _, codes = encode_features(pd.DataFrame({"store": pd.Series([1, 3, None, 7], dtype="Int64")}), prep)
    assert codes[:, 0].tolist() == [2, 1, 0, 0]
    _, text = encode_features(pd.DataFrame({"store": ["x", "3.0", "y"]}), prep)
    assert text[:, 0].tolist() == [3, 1, 0]
