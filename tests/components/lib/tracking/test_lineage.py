"""A version's lineage artifact: written whole with its format, read only when its digest matches; older tags read."""

from __future__ import annotations

import hashlib
import json

import pytest

from ctpipe.components.lib.errors import RegistryRecordError, UserError
from ctpipe.components.lib.tracking.lineage import (
    LINEAGE_DIGEST_TAG,
    LINEAGE_FORMAT,
    LineageError,
    legacy_lineage,
    lineage_from,
    parse_lineage,
    write_lineage,
)

RECORD = {"data_uri": "s3://bucket/data", "config": {"registry": {"champion_alias": "prod"}},
          "blessing_reasons": ["beats the prior predictor"], "metrics": {"accuracy": 0.91}, "split": None}


def test_a_record_round_trips_and_its_digest_is_the_files(tmp_path):
    path = tmp_path / "lineage.json"
    digest = write_lineage(path, RECORD)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert json.loads(path.read_text())["format"] == LINEAGE_FORMAT
    assert parse_lineage(path.read_bytes(), digest, "v1") == RECORD
    assert write_lineage(tmp_path / "again.json", dict(reversed(RECORD.items()))) == digest  # same record, same bytes


def test_a_changed_artifact_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "lineage.json"
    digest = write_lineage(path, RECORD)
    tampered = path.read_bytes().replace(b"prod", b"evil")
    with pytest.raises(LineageError, match=rf"v1: its SHA-256 is .* records {digest}; .*changed after registration"):
        parse_lineage(tampered, digest, "v1")
    # The registry's damaged record, not the user's input: the CLI exits 1 and the watcher does not settle the data.
    assert issubclass(LineageError, RegistryRecordError) and not issubclass(LineageError, UserError)


def test_another_format_and_an_unknown_field_are_named(tmp_path):
    text = json.dumps({"format": "ctpipe.lineage/v9"}).encode()
    with pytest.raises(LineageError, match=r"format 'ctpipe.lineage/v9'; this ctpipe reads 'ctpipe.lineage/v1'"):
        parse_lineage(text, hashlib.sha256(text).hexdigest(), "v1")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['secret'\]"):
        write_lineage(tmp_path / "x.json", {"secret": 1})


def test_a_version_with_a_digest_but_no_artifact_is_an_error_not_an_empty_lineage():
    with pytest.raises(LineageError, match=r"records ctpipe.lineage_sha256 but its run has no ctpipe/lineage.json"):
        lineage_from({LINEAGE_DIGEST_TAG: "0" * 64}, None, "champion m v3")


def test_a_version_of_the_older_layout_reads_from_its_tags():
    tags = {
        "ctpipe.config": json.dumps({"registry": {"champion_alias": "prod"}}),
        "ctpipe.blessing_reasons": json.dumps(["ok"]),
        "ctpipe.task_code": "not recorded",
        "ctpipe.evaluation": '{"intervals": {"acc',  # clipped at the old 20,000-character limit
        "ctpipe.compared_with": "",
        "ctpipe.metric.accuracy": "0.9",
        "ctpipe.metric.log_loss": "0.3",
        "ctpipe.blessed": "true",
    }
    lineage = lineage_from(tags, None, "v1")
    assert lineage == {
        "config": {"registry": {"champion_alias": "prod"}},
        "blessing_reasons": ["ok"],
        "evaluation": '{"intervals": {"acc',
        "compared_with": "",
        "metrics": {"accuracy": 0.9, "log_loss": 0.3},
    }
    assert lineage == legacy_lineage(tags)
