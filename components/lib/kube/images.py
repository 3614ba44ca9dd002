"""How ctpipe's pods pull images: a tag can be pushed again, a digest cannot."""

from __future__ import annotations


def pull_policy(image: str) -> str:
    """``IfNotPresent`` for an image pinned by digest; ``Always`` for a tag, so no node keeps running a stale copy
    of a re-pushed tag (with layers cached, Always costs one manifest request per pod start)."""
    return "IfNotPresent" if "@sha256:" in image else "Always"
