"""``data.text_column`` is the key naming the text column; ``task.options.text_column`` is its deprecated alias."""

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config


def test_data_text_column_is_a_data_key():
    config = load_config(None, ["task.name=causal_lm", "data.text_column=body"])
    assert config.data.text_column == "body"
    assert Config.from_json(config.to_json()).data.text_column == "body"


def test_the_text_column_is_unset_by_default():
    assert Config().data.text_column is None


def test_the_deprecated_alias_still_names_the_column():
    with pytest.warns(FutureWarning, match=r"task\.options\.text_column.*data\.text_column"):
        config = load_config(None, ["task.name=causal_lm", "task.options.text_column=body"])
    assert config.data.text_column == "body"


def test_the_alias_with_the_same_value_is_accepted():
    config = load_config(None, ["data.text_column=body", "task.options.text_column=body"])
    assert config.data.text_column == "body"


def test_a_conflicting_pair_names_both_keys():
    with pytest.raises(ConfigError, match=r"data\.text_column.*'body'.*task\.options\.text_column.*'text'"):
        load_config(None, ["data.text_column=body", "task.options.text_column=text"])


@pytest.mark.parametrize("value", ["''", "[a, b]", "{a: 1}"])
def test_a_bad_text_column_names_the_key(value):
    with pytest.raises(ConfigError, match=r"data\.text_column"):
        load_config(None, [f"data.text_column={value}"])


def test_the_text_column_must_not_be_a_feature_or_the_key():
    with pytest.raises(ConfigError, match=r"data\.text_column"):
        load_config(None, ["data.text_column=doc_id", "data.key=doc_id"])
