"""The byte-level tokenizer: UTF-8 bytes are tokens 0..255, then BOS, EOS and PAD. Nothing to download or fit.

Every text has an encoding (no unknown token), and decoding is exact for any token run that ends on a
character boundary; a cut-off multi-byte character decodes with U+FFFD.
"""

from __future__ import annotations

import numpy as np

BYTE_TOKENS = 256
BOS = 256
EOS = 257
PAD = 258
VOCAB_SIZE = 259
SPECIAL = {"<bos>": BOS, "<eos>": EOS, "<pad>": PAD}


def encode(text: str, *, bos: bool = True, eos: bool = True) -> np.ndarray:
    """The tokens of ``text``: optional BOS, its UTF-8 bytes, optional EOS (int64)."""
    body = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    head = np.array([BOS], dtype=np.int64) if bos else np.zeros(0, dtype=np.int64)
    tail = np.array([EOS], dtype=np.int64) if eos else np.zeros(0, dtype=np.int64)
    return np.concatenate([head, body, tail])


def decode(tokens) -> str:
    """Text of ``tokens``; special tokens are dropped, a cut-off character becomes U+FFFD."""
    values = np.asarray(tokens, dtype=np.int64).ravel()
    return bytes(values[values < BYTE_TOKENS].astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def byte_length(text: str) -> int:
    """How many bytes (hence byte tokens) ``text`` has: the denominator of bits per byte."""
    return len(text.encode("utf-8"))
