"""A version's export is read only when the downloaded file has the SHA-256 its version's tag records; one check
for every reader (evaluation's champion, reproduction's registered weights, the language-model decay check)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.registry.model_files import EXPORT_DIGEST_TAG, UntrustedModelError, verify_export


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt"
    path.write_bytes(b"weights" * 1000)
    return path


@pytest.mark.parametrize("require_tag", [False, True])
def test_the_registered_file_passes(export, require_tag):
    tags = {EXPORT_DIGEST_TAG: hashlib.sha256(export.read_bytes()).hexdigest()}
    verify_export(export, tags, what="version 3's model.pt", require_tag=require_tag)


@pytest.mark.parametrize("require_tag", [False, True])
def test_a_file_changed_after_registration_is_refused_whether_or_not_the_tag_is_required(export, require_tag):
    registered = hashlib.sha256(export.read_bytes()).hexdigest()
    export.write_bytes(export.read_bytes()[:-1] + b"X")  # one byte, same size
    found = hashlib.sha256(export.read_bytes()).hexdigest()
    with pytest.raises(UntrustedModelError) as caught:
        verify_export(export, {EXPORT_DIGEST_TAG: registered}, what="version 3's model.pt", require_tag=require_tag)
    message = str(caught.value)
    assert message.startswith("version 3's model.pt does not match its ctpipe.model_sha256 tag")
    assert found[:12] in message and registered[:12] in message and "not loaded" in message
    assert isinstance(caught.value, UserError)  # the callers' own handling of a user-facing refusal


def test_a_version_without_the_tag_passes_only_where_the_tag_is_not_required(export):
    verify_export(export, {}, what="version 1's model.pt", require_tag=False)  # registered before the tag existed
    verify_export(export, None, what="version 1's model.pt", require_tag=False)
    with pytest.raises(UntrustedModelError, match="version 1's model.pt has no ctpipe.model_sha256 tag"):
        verify_export(export, {"other": "x"}, what="version 1's model.pt", require_tag=True)
