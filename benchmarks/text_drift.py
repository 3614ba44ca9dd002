"""Text drift benchmark: the byte-unigram test on the demo corpus (effect, p, noise bound) and its false flags.

    python benchmarks/text_drift.py [--halves 400] [--copies 60]

The reference is every other help-topic document (``components/tasks/causal_lm/corpus.py``); the windows
are the other half (same source), the same documents in ROT13 (same lengths and byte-class shares,
other letter frequencies) and the module docstrings (the demo's drifted days). Then ``--halves`` random
halves of the corpus are judged against the other half with the PSI threshold off, so only the noise
bound decides: the share flagged at p < watch.max_p_value is the bound's false-flag rate. Last, the time
of each part on ``--copies`` copies of the corpus (byte counts per document, the reference's sums, the
drift test; the best of 3). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import json
import time

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.reference_stats import HistogramStats
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.drift.histogram_drift import histogram_drift
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.task_reference import task_reference_stats
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from ctpipe.components.tasks.causal_lm.text_stats import text_byte_counts
from ctpipe.pipelines.triggers.window_drift import judge_window

COLUMN = "text__byte_unigram"
CONFIG = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
SCHEMA = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])


def judge(window, train, watch=CONFIG.watch):
    """The report of ``window`` against the reference statistics of ``train``."""
    reference = task_reference_stats(train, SCHEMA, load_task(CONFIG.task))
    return judge_window(window, reference, CONFIG, watch=watch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--halves", type=int, default=400)
    parser.add_argument("--copies", type=int, default=60)
    args = parser.parse_args()
    docs = help_topic_documents()
    train, fresh = docs.iloc[::2].reset_index(drop=True), docs.iloc[1::2].reset_index(drop=True)
    windows = {
        "same_source": fresh,
        "rot13": fresh.assign(text=[codecs.encode(t, "rot13") for t in fresh["text"]]),
        "module_docstrings": module_docstring_documents(),
    }
    result: dict[str, object] = {}
    for name, window in windows.items():
        report = judge(window, train)
        psi = report.columns[COLUMN].tests["psi"]
        result[name] = {"psi": round(psi["value"], 4), "p_value": float(f"{psi['p_value']:.3g}"),
                        "noise_bound": round(psi["noise_bound"], 4), "documents": psi["documents"],
                        "byte_unigram_drifted": psi["drifted"], "drifted_columns": report.drifted_columns}
        print(f"{name:18s} PSI {psi['value']:.4f}  p {psi['p_value']:.3g}  noise bound {psi['noise_bound']:.4f}  "
              f"drifted: {', '.join(report.drifted_columns) or 'none'}")
    noise_only = dataclasses.replace(CONFIG.watch, column_thresholds={COLUMN: {"psi": 1e-9}})
    p_values, psis = [], []
    for seed in range(args.halves):
        order = np.random.default_rng(seed).permutation(len(docs))
        half, rest = docs.iloc[order[: len(docs) // 2]], docs.iloc[order[len(docs) // 2:]]
        psi = judge(rest.reset_index(drop=True), half.reset_index(drop=True), noise_only).columns[COLUMN].tests["psi"]
        p_values.append(psi["p_value"])
        psis.append(psi["value"])
    flagged = int(np.sum(np.asarray(p_values) < CONFIG.watch.max_p_value))
    result["random_halves"] = {"halves": args.halves, "flagged_by_noise_bound": flagged,
                               "max_psi": round(max(psis), 4), "median_p": round(float(np.median(p_values)), 3)}
    print(f"random halves, PSI threshold off: {flagged}/{args.halves} flagged at p < {CONFIG.watch.max_p_value}, "
          f"max PSI {max(psis):.4f}, median p {np.median(p_values):.3f}")
    result["seconds"] = timings(pd.concat([docs] * args.copies, ignore_index=True)["text"])
    print(f"{result['seconds']['documents']} documents: " + ", ".join(
        f"{k} {v} s" for k, v in result["seconds"].items() if k != "documents"))
    print(json.dumps(result))


def timings(texts) -> dict[str, float]:
    """Best of 3 seconds of each part of the byte-unigram test on ``texts``."""
    def best(run):
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            out = run()
            seconds.append(time.perf_counter() - start)
        return out, round(min(seconds), 3)

    per_row, counting = best(lambda: text_byte_counts(texts, "text")[COLUMN])
    reference, summing = best(lambda: HistogramStats().add(per_row).to_dict())
    _, testing = best(lambda: histogram_drift(COLUMN, per_row, reference, CONFIG.watch))
    return {"documents": len(texts), "byte_counts": counting, "reference_sums": summing, "drift_test": testing}


if __name__ == "__main__":
    main()
