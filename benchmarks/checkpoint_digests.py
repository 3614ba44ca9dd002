"""What the checkpoint digests cost: one save of a 25M-parameter model with AdamW state, and hashing its files.

    python benchmarks/checkpoint_digests.py [--repeats 3]

Single process, no group (a rank 0 alone). ``save_seconds`` includes ``write_digests`` (what training now
pays per checkpoint); ``hash_seconds`` is one more pass over the same files (what resume and selection pay per
checkpoint they verify). The last line printed is JSON, with their ratio (the machine is shared: read the ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
from torch import nn

from ctpipe.components.engine import checkpointing as ckpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(24)])  # ~25M parameters
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 1024)).sum().backward()
    optimizer.step()  # so the checkpoint holds AdamW's state
    saves, hashes = [], []
    with tempfile.TemporaryDirectory(prefix="ctpipe-digests-") as tmp:
        for step in range(1, args.repeats + 1):
            start = time.perf_counter()
            path = ckpt.save_checkpoint(tmp, step, model=model, optimizer=optimizer, rank_state={},
                                        meta={"step": step}, rank=0)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            ckpt.file_digests(path)
            hashes.append(time.perf_counter() - start)
        size = sum(f.stat().st_size for f in path.iterdir())
    save, digest = statistics.median(saves), statistics.median(hashes)
    print(json.dumps({
        "parameters": sum(p.numel() for p in model.parameters()),
        "checkpoint_mb": round(size / 1e6),
        "save_seconds": round(save, 3),
        "hash_seconds": round(digest, 3),
        "hash_share_of_save": round(digest / save, 2),
        "load_average": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
