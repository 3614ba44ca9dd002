"""A cheap fingerprint of a data root: its listing and each file's footer, for the pipeline's cache key.

The full fingerprint (``files.fingerprint_files``) hashes every byte and is taken by validation. The
prepare step needs one before any step runs, so that KFP reuses validate, sanity, train and select when
the data is unchanged: the listing (names, sizes) and the last ``FOOTER_BYTES`` of each file. A Parquet
file ends with its metadata (schema, row groups, column statistics), so a rewritten partition changes
it; a CSV file's tail holds its newest rows. An edit that keeps a file's size and its last 64 KiB is
not seen; validation's full fingerprint still records the exact data on the model.
"""

from __future__ import annotations

import hashlib

from ctpipe.components.lib.data.files import scan_data_files

FOOTER_BYTES = 64 * 1024


def quick_fingerprint(data_uri: str) -> str:
    """SHA-256 over the data files' paths, sizes and last ``FOOTER_BYTES`` bytes (a UserError when none)."""
    fs, listed = scan_data_files(data_uri)
    h = hashlib.sha256()
    for f in sorted(listed, key=lambda f: f.path):
        h.update(f"{f.path}\0{f.size}\0".encode())
        with fs.open(f.full_path, "rb") as stream:
            stream.seek(max(f.size - FOOTER_BYTES, 0))
            h.update(hashlib.sha256(stream.read(FOOTER_BYTES)).digest())
    return h.hexdigest()
