"""Secrets in URIs: found in every '::' part of a chained fsspec URL, described and redacted without the secret."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.credentials import (
    redact_text,
    redact_uri,
    refuse_uri_credentials,
    secret_parameter,
    uri_secrets,
)
from ctpipe.components.lib.errors import ConfigError, UserError

SECRET_URIS = [
    "simplecache::s3://AKIA:hunter2@bucket/data",
    "s3://AKIA:hunt/er2@bucket/data",  # an AWS secret key may hold a '/', which ends urlsplit's netloc early
    "http://etl:hunter2@files.example.com/data",
    "filecache::https://files.example.com/d?password=hunter2",
    "https://files.example.com/d?token=hunter2",
    "https://acct.blob.core.windows.net/c/d?sv=2024-01-01&sp=r&sig=hunter2",
    "s3://bucket/d?X-Amz-Credential=AKIA%2Fhunter2&X-Amz-Signature=hunter2",
    "gs://bucket/d?X-Goog-Signature=hunter2",
    # Issue 46: names outside the old list passed, and were printed, logged and compiled into pipelines.
    "https://files.example.com/d?key=hunter2",
    "https://files.example.com/d#access_token=hunter2",
    "s3://bucket/d?aws_secret_access_key=hunter2",
    "https://files.example.com/d?a=1;token=hunter2",
    "https://files.example.com/d?client-credentials=hunter2",
    "https://files.example.com/d?SESSION_ID=hunter2",
    "https://files.example.com/callback?state=1#code=hunter2",
    "https://files.example.com/d?x-api-key=hunter2",
    "https://files.example.com/d?db_password=hunter2",
]


@pytest.mark.parametrize("uri", SECRET_URIS)
def test_a_uri_with_a_secret_in_any_part_is_refused_without_repeating_it(uri):
    with pytest.raises(UserError, match="--data holds credentials") as info:
        refuse_uri_credentials(uri, name="--data", recorded_in="it is recorded")
    assert "hunter2" not in str(info.value)
    assert "userinfo" in str(info.value) and "*_key" in str(info.value)  # what is refused is said


@pytest.mark.parametrize("uri", SECRET_URIS)
def test_redaction_keeps_the_uri_readable_and_drops_every_secret(uri):
    redacted = redact_uri(uri)
    assert "hunter2" not in redacted and "***" in redacted
    assert redacted.split("::")[0].split(":")[0] == uri.split("::")[0].split(":")[0]  # same scheme or chain


@pytest.mark.parametrize("uri", [
    "s3://bucket/data", "gs://bucket/user@example.com/a:b@c", "/data/local", "simplecache::s3://bucket/d",
    "file:///tmp/x", None,
])
def test_a_uri_without_secrets_passes_and_is_printed_unchanged(uri):
    refuse_uri_credentials(uri, name="--data", recorded_in="it is recorded")
    assert uri_secrets(uri) == []
    if uri:
        assert redact_uri(uri) == uri


@pytest.mark.parametrize("name", ["date", "partition", "monkey", "keyword", "region", "versionId", "prefix"])
def test_a_parameter_named_like_no_secret_passes_but_its_value_is_never_printed(name):
    uri = f"https://files.example.com/d?{name}=v1;page=2#anchor=v3"
    refuse_uri_credentials(uri, name="--data", recorded_in="it is recorded")
    assert redact_uri(uri) == f"https://files.example.com/d?{name}=***;page=***#anchor=***"
    assert redact_uri(uri, query_values=True) == uri  # shown only when asked for


@pytest.mark.parametrize("name", ["key", "api_key", "sas_key", "client_secret", "refresh-token", "Password",
                                  "credential", "credentials_json", "sig", "session", "session_token", "code",
                                  "auth", "authorization", "X-Amz-Security-Token", "X-Goog-Credential", "sv"])
def test_parameter_names_that_look_like_secrets_are_secrets(name):
    assert secret_parameter(name)


def test_every_uri_quoted_in_a_message_is_redacted():
    message = ("data root 'http://user:hunter2@host:9/d' does not exist; nor simplecache::s3://K:hunter2@b/d "
               "nor https://h/x?sig=hunter2&a=1 nor https://h/y?a=1;key=hunter2#access_token=hunter2.")
    redacted = redact_text(message)
    assert "hunter2" not in redacted
    assert "'http://***@host:9/d'" in redacted and "simplecache::s3://***@b/d" in redacted
    assert "https://h/x?sig=***&a=***" in redacted and "https://h/y?a=***;key=***#access_token=***" in redacted


@pytest.mark.parametrize("uri", ["https://mlflow.example.com?token=hunter2", "http://mlflow?password=hunter2"])
def test_a_tracking_uri_with_a_token_in_its_query_is_refused_at_config_time(uri):
    with pytest.raises(ConfigError, match=r"registry\.tracking_uri.*credentials") as info:
        Config.from_dict({"registry": {"tracking_uri": uri}})
    assert "hunter2" not in str(info.value)
