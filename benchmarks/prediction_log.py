"""Prediction-log benchmark: what logging adds to a request, and how fast the writer drains.

    python benchmarks/prediction_log.py [--requests 2000] [--rows 1]

The request path of the log is ``PredictionLog.log`` (frame the rows, append to the queue); its cost is
compared with what MLflow's scoring server does for the same request anyway before the model runs:
parsing the JSON body into a DataFrame (``pd.DataFrame.from_records`` on the ``dataframe_records``), the
baseline measured in the same process. Medians over ``--requests`` requests of ``--rows`` rows of demo data.
The writer: rows per second written as Parquet to a local folder in batches of 5,000. The last line printed
is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import pandas as pd

from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.prediction_log import PredictionLog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1)
    args = parser.parse_args()
    frame = generate_day(0, max(args.rows, 1000), 0, False, key_offset=0)
    records = frame.head(args.rows).drop(columns=["label"]).to_dict(orient="records")
    body = json.dumps({"dataframe_records": records}, default=str)
    served = pd.DataFrame({"predicted_class": ["stay"] * args.rows, "churn": [0.1] * args.rows,
                           "stay": [0.9] * args.rows})
    with tempfile.TemporaryDirectory() as tmp:
        log = PredictionLog(f"{tmp}/log", model_name="m", model_version="1", key_column="customer_id",
                            flush_seconds=3600, max_pending_rows=10**9, batch_rows=10**9)
        parse, logging = [], []
        for _ in range(args.requests):
            start = time.perf_counter()
            inputs = pd.DataFrame.from_records(json.loads(body)["dataframe_records"])
            parse.append(time.perf_counter() - start)
            start = time.perf_counter()
            log.log(inputs, served)
            logging.append(time.perf_counter() - start)
        start = time.perf_counter()
        log.batch_rows = 5000
        log.flush(600)
        drain = time.perf_counter() - start
        stats = log.stats()
        log.close()
    result = {
        "rows_per_request": args.rows,
        "requests": args.requests,
        "parse_ms_median": round(statistics.median(parse) * 1000, 4),
        "log_ms_median": round(statistics.median(logging) * 1000, 4),
        "log_over_parse_ratio": round(statistics.median(logging) / statistics.median(parse), 3),
        "rows_logged": stats["logged_rows"],
        "rows_dropped": stats["dropped_rows"],
        "writer_rows_per_s": round(stats["logged_rows"] / drain, 1) if drain > 0 else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
