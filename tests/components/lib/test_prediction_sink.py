"""KServe's request logger into the prediction log: CloudEvents shaped as KServe's logger sends them (binary mode,
pkg/logger/worker.go: ce-id shared by a request and its response, ce-type ...inference.request/response,
ce-inferenceservicename, ce-annotations from logger.metadataAnnotations) become the same Parquet rows as the serving
wrapper's own log, in whichever order the halves arrive."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pandas as pd
import pytest

from ctpipe.components.lib.prediction_log import PredictionLog
from ctpipe.components.lib.prediction_sink import (
    REQUEST_TYPE,
    RESPONSE_TYPE,
    EventError,
    PredictionSink,
    make_server,
    parse_event,
)


def cloud_event(event_id: str, kind: str, body: dict, version: str = "7") -> tuple[dict[str, str], bytes]:
    headers = {
        "Ce-Specversion": "1.0", "Ce-Id": event_id, "Ce-Type": REQUEST_TYPE if kind == "request" else RESPONSE_TYPE,
        "Ce-Source": "http://localhost:9081/", "Ce-Time": "2026-03-20T12:00:00.000Z",
        "Ce-Inferenceservicename": "ctpipe-champion", "Ce-Namespace": "ctpipe", "Ce-Component": "predictor",
        "Ce-Endpoint": "default", "Ce-Metadata": "{}",
        "Ce-Annotations": json.dumps({"ctpipe.io/champion-version": version}), "Content-Type": "application/json",
    }  # fmt: skip
    return headers, json.dumps(body).encode()


REQUEST = {"dataframe_split": {"columns": ["customer_id", "tenure"], "data": [["c1", 3], ["c2", 40]]}}
RESPONSE = {"predictions": [{"predicted_class": "churn", "p_churn": 0.7, "p_stay": 0.3},
                            {"predicted_class": "stay", "p_churn": 0.1, "p_stay": 0.9}]}


def post(url: str, headers: dict[str, str], body: bytes) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers, method="POST")) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_logged_events_over_http_become_prediction_log_rows_in_either_order(tmp_path):
    logs: list[PredictionLog] = []

    def open_log(version):
        logs.append(PredictionLog(str(tmp_path / "log"), model_name="ctpipe-classifier", model_version=version,
                                  key_column="customer_id"))
        return logs[-1]

    sink = PredictionSink(open_log)
    server = make_server(sink, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        assert post(url, *cloud_event("a1", "request", REQUEST)) == 200
        assert post(url, *cloud_event("a1", "response", RESPONSE)) == 200
        # The response first (KServe's workers send concurrently), a records request.
        records = {"dataframe_records": [{"customer_id": "c3", "tenure": 7}]}
        assert post(url, *cloud_event("b2", "response", {"predictions": [RESPONSE["predictions"][0]]})) == 200
        assert post(url, *cloud_event("b2", "request", records)) == 200
        assert post(url, *cloud_event("c3", "request", REQUEST)) == 200  # its response never came
        headers, _ = cloud_event("d4", "request", REQUEST)
        assert post(url, headers, b"not json") == 400
    finally:
        server.shutdown()
        sink.close()
    rows = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "log").rglob("*.parquet"))], ignore_index=True)
    rows = rows.sort_values(["request_id", "row"]).reset_index(drop=True)
    assert rows["request_id"].tolist() == ["a1", "a1", "b2"] and rows["row"].tolist() == [0, 1, 0]
    assert rows["key"].tolist() == ["c1", "c2", "c3"] and set(rows["model_version"]) == {"7"}
    assert rows["predicted_class"].tolist() == ["churn", "stay", "churn"] and rows["p_stay"].tolist() == [0.3, 0.9, 0.3]
    assert sink.counts == {"events": 5, "paired": 2, "unpaired_dropped": 0, "unreadable": 1}


def test_an_unreadable_event_says_what_is_wrong():
    headers, body = cloud_event("x", "request", {"nothing": 1})
    with pytest.raises(EventError, match="none of dataframe_split"):
        parse_event(headers, body)
    with pytest.raises(EventError, match="ce-type"):
        parse_event({**headers, "Ce-Type": "dev.knative.other"}, body)
    with pytest.raises(EventError, match="ce-id"):
        parse_event({"Ce-Type": REQUEST_TYPE}, body)


def test_halves_waiting_for_their_other_half_are_bounded():
    sink = PredictionSink(lambda version: pytest.fail("nothing is paired"), max_unpaired=2)
    for i in range(5):
        sink.receive(*cloud_event(f"r{i}", "request", REQUEST))
    assert sink.counts["unpaired_dropped"] == 3 and sink.counts["paired"] == 0
