"""The champion history kept within MLflow's limits for ever: size-capped entries, pages of older ones, clipped
reasons that point to their full text.

A registered-model tag holds at most ``MAX_HISTORY`` entries of at most ``MAX_ENTRY_BYTES`` each, so the tag
can never pass MLflow's limit (``MAX_REGISTRY_TAG_BYTES``) however many promotions happen. When it is full,
its oldest ``PAGE_ENTRIES`` entries move to a JSON page (an artifact of the promoted version's run) that points
to the page before it: ``ctpipe models history --all`` follows that chain. A reason longer than
``MAX_REASON_CHARS_IN_TAG`` is stored whole as an artifact first and clipped in the tags with its address.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlflow.utils.validation import MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH

from ctpipe.components.lib.errors import UserError

# MLflow refuses longer registered-model and model-version tag values ('value' exceeds the maximum length);
# counted here in UTF-8 bytes, which is never less than characters, so a database that counts bytes agrees.
MAX_REGISTRY_TAG_BYTES = MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH
MAX_HISTORY = 50
PAGE_ENTRIES = 25  # paged out together when the tag is full, so a page is written every 25 promotions
MAX_REASON_CHARS_IN_TAG = 500
MAX_BY_CHARS = 100
MAX_ENTRY_BYTES = 1_600  # 500 reason characters (up to 4 bytes each in UTF-8 is 2,000: clipped again by bytes)
# A reason is text a person typed: more than this is a mistake (a pasted file), refused before anything moves.
MAX_REASON_CHARS = 1_000_000
PAGE_DIR = "ctpipe-registry"
# The tag holds {"entries": [...], "older": address of the newest page or null}; a bare list is the old format.
assert MAX_HISTORY * MAX_ENTRY_BYTES + 1_000 < MAX_REGISTRY_TAG_BYTES, "the history tag could outgrow MLflow's limit"


class TagTooLargeError(ValueError):
    """A registry tag value would pass MLflow's limit; raised before anything is written."""


def checked_tag(key: str, value: str) -> str:
    """``value`` unchanged, or TagTooLargeError naming the tag, its size and the limit."""
    size = len(value.encode("utf-8"))
    if size > MAX_REGISTRY_TAG_BYTES:
        raise TagTooLargeError(
            f"registry tag '{key}' would hold {size:,} bytes; MLflow allows {MAX_REGISTRY_TAG_BYTES:,}. "
            "Nothing was written and no alias moved."
        )
    return value


def check_reason(reason: str) -> None:
    """UserError (exit 2) for a reason nobody meant to type: empty, or longer than ``MAX_REASON_CHARS``."""
    if len(reason) > MAX_REASON_CHARS:
        raise UserError(
            f"--reason is {len(reason):,} characters; at most {MAX_REASON_CHARS:,} are kept (the first "
            f"{MAX_REASON_CHARS_IN_TAG} in the registry, the whole text as an artifact of the version's run). "
            "Give a shorter reason that links to the long text."
        )


def clip_text(text: str, max_chars: int, pointer: str | None = None) -> str:
    """``text`` if it fits, else its start and where the whole text is (or that it was cut)."""
    if len(text) <= max_chars:
        return text
    tail = f" …[clipped; full text: {pointer}]" if pointer else " …[clipped]"
    return text[: max(0, max_chars - len(tail))] + tail


def reason_needs_artifact(reason: str) -> bool:
    return len(reason) > MAX_REASON_CHARS_IN_TAG


def bounded_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with its free text clipped so that its JSON is at most ``MAX_ENTRY_BYTES``."""
    out = dict(entry)
    out["by"] = clip_text(str(out.get("by", "")), MAX_BY_CHARS)
    out["reason"] = clip_text(str(out.get("reason", "")), MAX_REASON_CHARS_IN_TAG, out.get("reason_uri"))
    while len(json.dumps(out).encode("utf-8")) > MAX_ENTRY_BYTES:  # multi-byte text: cut by bytes as well
        out["reason"] = out["reason"][: len(out["reason"]) * 3 // 4] + " …[clipped]"
    return out


@dataclass
class HistoryTag:
    """The history tag's content: the newest entries, and the address of the newest page of older ones."""

    entries: list[dict[str, Any]]
    older: str | None = None

    @staticmethod
    def parse(text: str | None) -> HistoryTag:
        data = json.loads(text or "[]")
        if isinstance(data, list):
            return HistoryTag(entries=data)
        return HistoryTag(entries=list(data.get("entries", [])), older=data.get("older"))

    def to_json(self) -> str:
        return json.dumps({"entries": self.entries, "older": self.older})


@dataclass
class HistoryUpdate:
    """What appending one entry writes: a page of the oldest entries (if the tag is full), then the tag."""

    tag: HistoryTag
    page: dict[str, Any] | None  # {"entries": [...], "older": ...}, written before the tag points to it
    page_file: str | None


def append_entry(current: HistoryTag, entry: dict[str, Any], *, page_file: str, page_uri: str) -> HistoryUpdate:
    """The history after ``entry``; past ``MAX_HISTORY`` the oldest ``PAGE_ENTRIES`` go to a new page at
    ``page_uri`` (which the caller writes to ``page_file`` of the run before it writes the tag)."""
    entries = [*current.entries, entry]
    if len(entries) <= MAX_HISTORY:
        return HistoryUpdate(HistoryTag([bounded_entry(e) for e in entries], current.older), None, None)
    cut = len(entries) - MAX_HISTORY + PAGE_ENTRIES - 1
    page = {"entries": entries[:cut], "older": current.older}  # whole, as recorded (a tag written before bounds)
    return HistoryUpdate(HistoryTag([bounded_entry(e) for e in entries[cut:]], page_uri), page, page_file)
