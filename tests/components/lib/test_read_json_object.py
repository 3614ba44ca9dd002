"""read_json_object: a record that is missing, torn or not an object reads as empty, never as an error."""

from __future__ import annotations

import json

from ctpipe.components.lib.atomic_files import atomic_write_text, read_json_object


def test_a_whole_object_reads_back(tmp_path):
    path = tmp_path / "state.json"
    atomic_write_text(path, json.dumps({"run_id": "abc", "points": 3}))
    assert read_json_object(path) == {"run_id": "abc", "points": 3}


def test_missing_torn_or_not_an_object_reads_as_empty(tmp_path):
    assert read_json_object(tmp_path / "absent.json") == {}
    torn = tmp_path / "torn.json"
    torn.write_text('{"run_id": "ab')  # a writer cut short before atomic writes, or a hand edit
    assert read_json_object(torn) == {}
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert read_json_object(listed) == {}
    assert read_json_object(tmp_path) == {}  # a folder where the file should be
