"""Per-document statistics of a text column: what validation checks and what the watcher judges for drift.

``text_checks``: byte length and whether the text is valid UTF-8 (a str with lone surrogates, or bytes
that do not decode, is not). ``text_drift_columns``: the length and the byte-unigram profile of each
document as shares of byte classes (letters, upper case, digits, whitespace, punctuation, non-ASCII), numeric per-row
values that the watcher compares with the reference like numeric columns (PSI, KS).
``text_byte_counts``: each document's counts of the 256 byte values, which the reference sums into the
corpus-level byte-unigram histogram and the watcher compares as a distribution
(``components/lib/drift/histogram_drift.py``). The vocabulary is the 256 bytes, so no token is ever unseen.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_CLASSES = {
    "letter_share": np.array([c.isalpha() for c in map(chr, range(128))] + [False] * 128),
    # Case is its own class: lower-casing leaves every other share as it was.
    "upper_share": np.array([c.isupper() for c in map(chr, range(128))] + [False] * 128),
    "digit_share": np.array([c.isdigit() for c in map(chr, range(128))] + [False] * 128),
    "space_share": np.array([c.isspace() for c in map(chr, range(128))] + [False] * 128),
    "punct_share": np.array([(not c.isalnum() and not c.isspace() and c.isprintable())
                             for c in map(chr, range(128))] + [False] * 128),
    "non_ascii_share": np.arange(256) >= 128,
}


# The share columns' suffixes: NaN together for a text (null, invalid or empty), so the watcher judges them as one
# joint profile as well (components/lib/drift/profile_drift.py; the watcher passes these names in).
SHARE_NAMES = tuple(_CLASSES)

BYTE_UNIGRAM = "byte_unigram"
# One label per byte value, for the drift report's figure: 0x65 'e', 0x20 ' ', 0x0a, 0xc3.
BYTE_LABELS = [f"{b:#04x} {chr(b)!r}" if 32 <= b < 127 else f"{b:#04x}" for b in range(256)]


def as_bytes(value) -> bytes | None:
    """The UTF-8 bytes of a text cell; None when it is not valid UTF-8 (or not text at all)."""
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            return None
    return None


def text_checks(texts: pd.Series, prefix: str) -> pd.DataFrame:
    """``<prefix>__bytes`` (0 for null/invalid) and ``<prefix>__valid_utf8`` per row."""
    encoded = [as_bytes(v) for v in texts]
    return pd.DataFrame({
        f"{prefix}__bytes": [len(b) if b is not None else 0 for b in encoded],
        f"{prefix}__valid_utf8": [b is not None for b in encoded],
    }, index=texts.index)


def text_drift_columns(texts: pd.Series, prefix: str) -> pd.DataFrame:
    """``<prefix>__bytes`` and ``<prefix>__<class>_share`` of each document (NaN where not text)."""
    out: dict[str, list[float]] = {f"{prefix}__bytes": []} | {f"{prefix}__{k}": [] for k in _CLASSES}
    for value in texts:
        b = as_bytes(value)
        counts = np.bincount(np.frombuffer(b, dtype=np.uint8), minlength=256) if b else None
        out[f"{prefix}__bytes"].append(float(len(b)) if b is not None else np.nan)
        for name, mask in _CLASSES.items():
            out[f"{prefix}__{name}"].append(float(counts[mask].sum() / counts.sum()) if counts is not None else np.nan)
    return pd.DataFrame(out, index=texts.index)


def text_byte_counts(texts: pd.Series, prefix: str) -> dict[str, pd.DataFrame]:
    """``{"<prefix>__byte_unigram": counts}``: per document, how often each byte value occurs (a row of 256
    counts, columns ``BYTE_LABELS``; all zero where not text)."""
    counts = np.zeros((len(texts), 256), dtype=np.int32)  # half of int64: a window may hold many documents
    for row, value in enumerate(texts):
        b = as_bytes(value)
        if b:
            counts[row] = np.bincount(np.frombuffer(b, dtype=np.uint8), minlength=256)
    return {f"{prefix}__{BYTE_UNIGRAM}": pd.DataFrame(counts, index=texts.index, columns=BYTE_LABELS)}
