"""Secrets in URIs: refused before anything records them, redacted wherever one is printed.

A URI a user gives ctpipe (a data root, a tracking URI, a KFP host) is recorded in ledgers, run
summaries, MLflow tags, KFP run parameters and compiled pipelines. A password or a signed token in it
would be kept in all of them, so every command refuses such a URI with ``refuse_uri_credentials``
before it writes anything, and prints URIs only through ``redact_uri`` / ``redact_text``.

A URI carries a secret when any of its parts (fsspec chains parts with ``::``, as in
``simplecache::s3://KEY:SECRET@bucket/d``) has userinfo (``user:password@host``) or a query parameter
that holds one (``password=``, ``token=``, ``sig=``, ``X-Amz-Signature=``, an Azure SAS's ``sv=``, ...).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from ctpipe.components.lib.errors import UserError

# Query parameters that carry a secret (compared lower-case): passwords and tokens, AWS and GCS
# pre-signed URLs, Azure shared access signatures (``sv`` marks one; ``sig`` is its signature).
SECRET_QUERY_PARAMETERS = frozenset({
    "password", "passwd", "pwd", "secret", "client_secret", "token", "access_token", "refresh_token", "id_token",
    "api_key", "apikey", "auth", "sig", "signature", "sv",
    "x-amz-credential", "x-amz-signature", "x-amz-security-token",
    "x-goog-credential", "x-goog-signature",
})
REDACTED = "***"

# ``scheme://user:secret@`` even when the secret holds a '/' (AWS secret keys may), which ends
# urlsplit's netloc early; the user part has no '/', so a path holding "a:b@c" is not mistaken for one.
_USERINFO_WITH_SLASH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@:?#]*:[^@?#]*@")
# A URI inside free text (an error message): a scheme, '://', and everything up to a space or a quote,
# with the fsspec chain prefixes (``simplecache::``) in front of it.
_URI_IN_TEXT = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*::)*[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def _parts(uri: str) -> list[str]:
    return uri.split("::")


def _userinfo_end(part: str) -> int | None:
    """The index of the '@' that ends ``part``'s userinfo, or None when it has none."""
    netloc = urlsplit(part).netloc
    if "@" in netloc:
        return part.index("://") + 3 + netloc.rfind("@")
    match = _USERINFO_WITH_SLASH.match(part)
    return match.end() - 1 if match else None


def _host(part: str, at: int) -> str:
    """The host after the userinfo ending at ``at`` (never any of the userinfo itself)."""
    return re.split(r"[/?#]", part[at + 1:], maxsplit=1)[0] or "?"


def _secret_parameters(part: str) -> list[str]:
    query = urlsplit(part).query
    return [key for key, _ in parse_qsl(query, keep_blank_values=True) if key.lower() in SECRET_QUERY_PARAMETERS]


def uri_secrets(uri: str | None) -> list[str]:
    """What in ``uri`` carries a secret, each described without the secret (empty when nothing does)."""
    found: list[str] = []
    for part in _parts(uri or ""):
        if (at := _userinfo_end(part)) is not None:
            found.append(f"user:password@{_host(part, at)}")
        found.extend(f"query parameter '{key}='" for key in _secret_parameters(part))
    return found


def refuse_uri_credentials(uri: str | None, *, name: str, recorded_in: str) -> None:
    """Raise ``UserError`` when ``uri`` (the value of ``name``) carries a secret; the message never repeats it.

    ``recorded_in`` says where the URI would be kept, so the user knows why it is refused."""
    found = uri_secrets(uri)
    if found:
        raise UserError(
            f"{name} holds credentials ({', '.join(found)}); {recorded_in}, so it must not carry secrets. "
            "Give the URI without userinfo and without signed or token query parameters (refused: userinfo, "
            f"{', '.join(sorted(SECRET_QUERY_PARAMETERS))}; in every '::' part of a chained URL) and the credentials "
            "in the environment: MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN for MLflow, the storage's "
            "own variables (AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, ...); on a cluster from "
            "kubernetes.env_from_secrets."
        )


def _redact_userinfo(part: str, at: int) -> str:
    """``scheme://***@host...``: the whole userinfo goes (a user name may itself be a token)."""
    return f"{part[:part.index('://') + 3]}{REDACTED}{part[at:]}"


def redact_uri(uri: str) -> str:
    """``uri`` with every part's password and secret query values replaced by ``***`` (the rest kept)."""
    parts = []
    for part in _parts(uri):
        if (at := _userinfo_end(part)) is not None:
            part = _redact_userinfo(part, at)
        base, sep, query = part.partition("?")
        if sep:
            fragment = ""
            if "#" in query:
                query, fragment = query.split("#", 1)
                fragment = "#" + fragment
            pairs = [
                f"{key}={REDACTED}" if key.lower() in SECRET_QUERY_PARAMETERS else pair
                for pair in query.split("&")
                for key in [pair.split("=", 1)[0]]
            ]
            part = f"{base}?{'&'.join(pairs)}{fragment}"
        parts.append(part)
    return "::".join(parts)


def redact_text(text: str) -> str:
    """``text`` with every URI in it redacted (``redact_uri``): for messages that may quote a URI."""
    return _URI_IN_TEXT.sub(lambda match: redact_uri(match.group(0)), text)
