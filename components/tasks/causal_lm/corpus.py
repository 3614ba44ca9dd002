"""The demo text corpus: CPython's help topics (``pydoc_data.topics``) as dated Parquet partitions.

The text ships with every CPython (``Lib/pydoc_data/topics.py``, ~465 KB, the Python Software
Foundation License), so demos and tests need no download. Each help topic is cut into documents of a
few paragraphs; documents are dealt to ``days`` daily partitions ``date=YYYY-MM-DD/part-0.parquet``
with columns ``doc_id`` (the split key) and ``text``, and no label: ``causal_lm`` needs none
(``Task.needs_label``). From ``drift_from_day`` on, the partitions hold the docstrings of standard-library
modules instead: another register of English (API prose, more code), so the watcher's text drift has
something real to see.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd

from ctpipe.components.lib.data.demo import write_day_partition

TEXT_COLUMN = "text"
KEY_COLUMN = "doc_id"
MIN_DOC_CHARS = 300
# A paragraph this long is kept once in the corpus; shorter repeats ("See also:") are ordinary text.
MIN_REPEATED_CHARS = 40
MAX_DOC_CHARS = 1500
# Standard-library modules whose docstrings make the drifted partitions (pure Python, always present).
DRIFT_MODULES = (
    "argparse", "asyncio", "collections", "contextlib", "csv", "dataclasses", "datetime", "decimal",
    "email", "enum", "fractions", "functools", "heapq", "http.client", "inspect", "ipaddress", "itertools",
    "json", "logging", "pathlib", "pickle", "random", "re", "shutil", "statistics", "string",
    "subprocess", "tarfile", "textwrap", "threading", "typing", "unittest", "urllib.parse", "uuid",
    "zipfile",
)


def chunk_paragraphs(text: str, *, min_chars: int = MIN_DOC_CHARS, max_chars: int = MAX_DOC_CHARS) -> list[str]:
    """Consecutive paragraphs joined into documents of about ``min_chars``..``max_chars`` characters."""
    docs, current = [], ""
    for para in (p.strip("\n") for p in text.split("\n\n")):
        if not para.strip():
            continue
        para = para[:max_chars]
        if current and len(current) + 2 + len(para) > max_chars:
            docs.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
        if len(current) >= min_chars:
            docs.append(current)
            current = ""
    if current.strip():
        if docs and len(current) < min_chars // 3:
            docs[-1] = f"{docs[-1]}\n\n{current}"
        else:
            docs.append(current)
    return docs


def help_topic_documents() -> pd.DataFrame:
    """Every help topic of this Python, cut into documents: columns doc_id, text."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    rows = [
        {KEY_COLUMN: f"{name}/{i}", TEXT_COLUMN: doc}
        for name in sorted(topics)
        for i, doc in enumerate(chunk_paragraphs(_new_paragraphs(topics[name], seen)))
    ]
    return _unique_texts(pd.DataFrame(rows))


def _new_paragraphs(text: str, seen: set[str]) -> str:
    """``text`` without the paragraphs of MIN_REPEATED_CHARS or more already in ``seen`` (which it updates).

    The help topics repeat passages (``assignment`` and ``augassign``, ``customization`` and
    ``specialnames`` share paragraphs); in two documents, a passage lands in train and test (dropping
    only whole repeated documents left 10% of the demo test split's bytes verbatim in train)."""
    kept = []
    for para in text.split("\n\n"):
        key = para.strip("\n")
        if len(key) >= MIN_REPEATED_CHARS:
            if key in seen:
                continue
            seen.add(key)
        kept.append(para)
    return "\n\n".join(kept)


def _unique_texts(frame: pd.DataFrame) -> pd.DataFrame:
    """The first of documents with the same text (short documents may still repeat), so that a repeated
    text in two splits never leaks the test set into training."""
    return frame.drop_duplicates(TEXT_COLUMN, keep="first").reset_index(drop=True)


def module_docstring_documents() -> pd.DataFrame:
    """Docstrings of DRIFT_MODULES and their public classes and functions, cut into documents (same columns)."""
    rows, seen = [], set()
    for module_name in DRIFT_MODULES:
        module = importlib.import_module(module_name)
        texts = [module.__doc__ or ""]
        for attr in sorted(dir(module)):
            obj = getattr(module, attr, None)
            if not attr.startswith("_") and callable(obj) and getattr(obj, "__module__", None) == module_name:
                texts.append(obj.__doc__ or "")
        for i, doc in enumerate(chunk_paragraphs(_new_paragraphs("\n\n".join(t for t in texts if t), seen))):
            rows.append({KEY_COLUMN: f"module:{module_name}/{i}", TEXT_COLUMN: doc})
    return _unique_texts(pd.DataFrame(rows))


def _deal(frame: pd.DataFrame, parts: int) -> list[pd.DataFrame]:
    """Documents dealt round-robin to ``parts`` partitions, so every day covers every topic."""
    return [frame.iloc[i::parts].reset_index(drop=True) for i in range(parts)]


def write_text_demo_data(out: str | Path, *, days: int = 4, drift_from_day: int | None = None) -> list[Path]:
    """Write ``days`` partitions of the corpus under ``out``; return their paths.

    Without drift all help-topic documents are dealt over the days; with ``drift_from_day=D`` days
    0..D-1 hold the help topics and days D.. the module docstrings, at most as many a day as a clean day.
    """
    if days < 1:
        raise ValueError("days must be >= 1")
    if drift_from_day is not None and not 0 <= drift_from_day < days:
        raise ValueError(f"drift_from_day must be in [0, {days - 1}]")
    clean_days = days if drift_from_day is None else drift_from_day
    frames = _deal(help_topic_documents(), clean_days) if clean_days else []
    if drift_from_day is not None:
        drifted = module_docstring_documents()
        if frames:  # a drifted day no larger than a clean one: the suite's partition row-count rule would stop it
            drifted = drifted.iloc[: max(len(f) for f in frames) * (days - drift_from_day)]
        frames += _deal(drifted, days - drift_from_day)
    root, paths = Path(out), []
    for day, frame in enumerate(frames):
        paths.append(write_day_partition(root, day, frame))
    return paths
