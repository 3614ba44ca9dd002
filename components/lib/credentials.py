"""Secrets in URIs: refused before anything records them, redacted wherever one is printed.

A URI a user gives ctpipe (a data root, a tracking URI, a KFP host) is recorded in ledgers, run
summaries, MLflow tags, KFP run parameters and compiled pipelines. A password or a signed token in it
would be kept in all of them, so every command refuses such a URI with ``refuse_uri_credentials``
before it writes anything, and prints URIs only through ``redact_uri`` / ``redact_text``.

A URI carries a secret when any of its parts (fsspec chains parts with ``::``, as in
``simplecache::s3://KEY:SECRET@bucket/d``) has userinfo (``user:password@host``) or a parameter, in its
query or its fragment (``#access_token=`` of an OAuth redirect), separated by ``&`` or ``;``, whose *name
looks like a secret* (``secret_parameter``): ``key`` and ``*_key``, anything with ``secret``, ``token``,
``passw``, ``credential``, ``session`` or ``signature`` in it, ``sig``, ``code``, ``auth*``, an Azure SAS's
``sv``, the signed-URL parameters of AWS and GCS (``X-Amz-*``, ``X-Goog-*``). A pattern, not a list: a
list of names always misses the next service's. A printed URI shows no query or fragment values at all
(``redact_uri``): a value that names no secret may still be one.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ctpipe.components.lib.errors import UserError

# Parameter names that hold a secret, matched on the name lower-cased with '-' and '.' read as '_':
# a whole name (key, sig, code, sv: an Azure SAS), a name ending in _key, or a name containing a word that
# only secrets use; and the signed-URL parameters of AWS (X-Amz-Credential, -Signature, -Security-Token) and
# GCS (X-Goog-Credential, -Signature).
_SECRET_NAME = re.compile(
    r"^(key|sig|code|sv|pwd|jwt|otp|pin|auth\w*|session\w*|credential\w*|x_amz_\w+|x_goog_\w+)$"
    r"|_key$|apikey|accesskey|secretkey|privatekey|secret|token|passw|passphrase|credential|signature|session"
    r"|_sig$|_auth$|cookie|bearer|_pwd$"
)
# What a refusal message lists as refused (the rule above, for a person).
SECRET_PARAMETER_RULE = ("userinfo (user:password@); query or fragment parameters, '&' or ';' separated, named "
                         "key or *_key, sig, code, sv, auth*, session*, credential*, or containing secret, token, "
                         "password, credential, session, signature (AWS X-Amz-*, GCS X-Goog-*)")
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


def secret_parameter(name: str) -> bool:
    """Whether a query or fragment parameter called ``name`` holds a secret (see ``_SECRET_NAME``)."""
    from urllib.parse import unquote_plus

    normal = re.sub(r"[-.\s]+", "_", unquote_plus(name).strip().lower())
    return bool(normal) and bool(_SECRET_NAME.search(normal))


def _parameters(text: str) -> list[tuple[str, str]]:
    """The ``name=value`` pairs of a query or fragment, separated by ``&`` or ``;`` (a name alone: value '')."""
    pairs = []
    for item in re.split(r"[&;]", text):
        if item:
            name, _, value = item.partition("=")
            pairs.append((name, value))
    return pairs


def _secret_parameters(part: str) -> list[str]:
    split = urlsplit(part)
    found = [("query", name) for name, _ in _parameters(split.query) if secret_parameter(name)]
    found += [("fragment", name) for name, _ in _parameters(split.fragment) if secret_parameter(name)]
    return [f"{where} parameter '{name}='" for where, name in found]


def uri_secrets(uri: str | None) -> list[str]:
    """What in ``uri`` carries a secret, each described without the secret (empty when nothing does)."""
    found: list[str] = []
    for part in _parts(uri or ""):
        if (at := _userinfo_end(part)) is not None:
            found.append(f"user:password@{_host(part, at)}")
        found.extend(_secret_parameters(part))
    return found


def refuse_uri_credentials(uri: str | None, *, name: str, recorded_in: str) -> None:
    """Raise ``UserError`` when ``uri`` (the value of ``name``) carries a secret; the message never repeats it.

    ``recorded_in`` says where the URI would be kept, so the user knows why it is refused."""
    found = uri_secrets(uri)
    if found:
        raise UserError(
            f"{name} holds credentials ({', '.join(found)}); {recorded_in}, so it must not carry secrets. "
            f"Give the URI without userinfo and without signed or token parameters (refused: {SECRET_PARAMETER_RULE}; "
            "in every '::' part of a chained URL) and the credentials "
            "in the environment: MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN for MLflow, the storage's "
            "own variables (AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, ...); on a cluster from "
            "kubernetes.env_from_secrets."
        )


def _redact_userinfo(part: str, at: int) -> str:
    """``scheme://***@host...``: the whole userinfo goes (a user name may itself be a token)."""
    return f"{part[:part.index('://') + 3]}{REDACTED}{part[at:]}"


def redact_uri(uri: str, *, query_values: bool = False) -> str:
    """``uri`` as it may be printed: userinfo replaced by ``***`` and every query and fragment value too (a value
    whose name looks harmless may still be a secret); with ``query_values`` (asked for), only the values of
    parameters whose names look like secrets."""
    parts = []
    for part in _parts(uri):
        if (at := _userinfo_end(part)) is not None:
            part = _redact_userinfo(part, at)
        base, fragment_sep, fragment = part.partition("#")
        base, query_sep, query = base.partition("?")
        if query_sep:
            base += "?" + _redact_parameters(query, query_values)
        if fragment_sep:
            base += "#" + _redact_parameters(fragment, query_values)
        parts.append(base)
    return "::".join(parts)


def _redact_parameters(text: str, keep_harmless: bool) -> str:
    """``text`` (a query or a fragment) with its values replaced, keeping its names and separators."""
    def one(item: str) -> str:
        name, sep, value = item.partition("=")
        if not sep:
            return item if keep_harmless and not secret_parameter(name) else (name if not value else REDACTED)
        return item if keep_harmless and not secret_parameter(name) else f"{name}={REDACTED}"

    return "".join(piece if piece in ("&", ";") else one(piece) for piece in re.split(r"([&;])", text))


def redact_text(text: str) -> str:
    """``text`` with every URI in it redacted (``redact_uri``): for messages that may quote a URI."""
    return _URI_IN_TEXT.sub(lambda match: redact_uri(match.group(0)), text)
