"""KServe's request logger into the prediction log: CloudEvents of requests and responses in, log rows out.

    CTPIPE_PREDICTION_LOG=s3://ctpipe/predictions python -m ctpipe.components.lib.prediction_sink --port 8080

An InferenceService whose predictor has ``logger: {mode: all, url: <this sink>}`` sends, for every call, two
CloudEvents over HTTP in binary mode (KServe ``pkg/logger/worker.go``): a POST whose body is the request's or the
response's bytes, with the headers ``ce-id`` (the same for a request and its response), ``ce-type``
(``org.kubeflow.serving.inference.request`` or ``...response``), ``ce-inferenceservicename``, ``ce-namespace``,
``ce-component``, ``ce-endpoint`` and, with ``logger.metadataAnnotations``, ``ce-annotations`` (a JSON object of
the predictor's annotations: ``ctpipe.io/champion-version`` says which version served). The two may arrive in
either order (KServe sends them from a pool of workers). The sink pairs them by id and hands the request's rows
(for the key column) and the response's predictions to ``PredictionLog`` (``prediction_log.py``): the same
Parquet rows as the serving wrapper's own log, with ``ce-id`` as the request id. The bodies are MLflow's scoring
protocol, what ``ctpipe serve`` answers: ``dataframe_split``, ``dataframe_records``, ``instances`` or ``inputs`` in,
``{"predictions": ...}`` out.

Bounded like the log: at most ``max_unpaired`` halves wait for their other half (the oldest is dropped and
counted); an event that cannot be read is answered 400 and counted, never retried forever by KServe.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pandas as pd

from ctpipe.components.lib.prediction_log import (
    ENV_KEY,
    ENV_MODEL_NAME,
    ENV_MODEL_VERSION,
    ENV_URI,
    PredictionLog,
)

REQUEST_TYPE = "org.kubeflow.serving.inference.request"
RESPONSE_TYPE = "org.kubeflow.serving.inference.response"
VERSION_ANNOTATION = "ctpipe.io/champion-version"


class EventError(ValueError):
    """A logged event the sink cannot read: what is wrong with it."""


@dataclass
class LoggedEvent:
    """One half of a logged call: its id, whether request or response, the service, the version and the rows."""

    id: str
    kind: str  # request | response
    service: str
    version: str | None
    rows: pd.DataFrame


def parse_event(headers: Mapping[str, str], body: bytes) -> LoggedEvent:
    """The event in a binary-mode CloudEvent's ``headers`` (any case) and ``body``; EventError when unreadable."""
    h = {k.lower(): v for k, v in headers.items()}
    event_id, event_type = h.get("ce-id"), h.get("ce-type")
    if not event_id:
        raise EventError("no ce-id header: not a CloudEvent in binary mode")
    if event_type not in (REQUEST_TYPE, RESPONSE_TYPE):
        raise EventError(f"ce-type {event_type!r} is not {REQUEST_TYPE} or {RESPONSE_TYPE}")
    try:
        annotations = json.loads(h.get("ce-annotations") or "{}")
        payload = json.loads(body or b"null")
    except ValueError as err:
        raise EventError(f"event {event_id}: the body or ce-annotations is not JSON ({err})") from err
    version = annotations.get(VERSION_ANNOTATION) if isinstance(annotations, dict) else None
    kind = "request" if event_type == REQUEST_TYPE else "response"
    rows = request_rows(payload) if kind == "request" else response_rows(payload)
    return LoggedEvent(event_id, kind, h.get("ce-inferenceservicename", ""), version, rows)


def request_rows(payload: Any) -> pd.DataFrame:
    """The rows of an MLflow scoring request (``dataframe_split``, ``dataframe_records``, ``instances``, ``inputs``)."""
    if not isinstance(payload, dict):
        raise EventError("the request body is not a JSON object")
    if "dataframe_split" in payload:
        split = payload["dataframe_split"]
        return pd.DataFrame(split.get("data") or [], columns=split.get("columns"))
    for name in ("dataframe_records", "instances", "inputs"):
        if name in payload:
            value = payload[name]
            return pd.DataFrame(value) if isinstance(value, list | dict) else pd.DataFrame({"input": [value]})
    raise EventError(f"the request has none of dataframe_split, dataframe_records, instances, inputs "
                     f"(keys: {sorted(payload)[:10]})")


def response_rows(payload: Any) -> pd.DataFrame:
    """The predictions of an MLflow scoring response: ``{"predictions": [records or values]}``."""
    predictions = payload.get("predictions") if isinstance(payload, dict) else payload
    if not isinstance(predictions, list):
        raise EventError("the response has no list of predictions")
    if predictions and all(isinstance(p, dict) for p in predictions):
        return pd.DataFrame.from_records(predictions)
    return pd.DataFrame({"prediction": predictions})


class PredictionSink:
    """Pairs the halves of each logged call and logs them, one ``PredictionLog`` per served version."""

    def __init__(self, open_log: Callable[[str | None], PredictionLog], max_unpaired: int = 10_000) -> None:
        self.open_log = open_log
        self.max_unpaired = max_unpaired
        self._waiting: OrderedDict[str, LoggedEvent] = OrderedDict()
        self._logs: dict[str | None, PredictionLog] = {}
        self._lock = threading.Lock()
        self.counts = {"events": 0, "paired": 0, "unpaired_dropped": 0, "unreadable": 0}

    def receive(self, headers: Mapping[str, str], body: bytes) -> None:
        """Take one event (EventError when unreadable, counted); log its call once both halves are here."""
        try:
            event = parse_event(headers, body)
        except EventError:
            with self._lock:
                self.counts["unreadable"] += 1
            raise
        with self._lock:
            self.counts["events"] += 1
            other = self._waiting.pop(event.id, None)
            if other is None or other.kind == event.kind:
                self._waiting[event.id] = event
                while len(self._waiting) > self.max_unpaired:
                    self._waiting.popitem(last=False)
                    self.counts["unpaired_dropped"] += 1
                return
            self.counts["paired"] += 1
            request, response = (event, other) if event.kind == "request" else (other, event)
            version = request.version or response.version
            log = self._logs.get(version)
            if log is None:
                log = self._logs[version] = self.open_log(version)
        log.log(request.rows, response.rows, request_id=event.id)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()


def sink_from_environment(environ: Mapping[str, str] | None = None) -> PredictionSink:
    """A sink logging where ``CTPIPE_PREDICTION_LOG`` says (the serving wrapper's variables, ``prediction_log.py``);
    the version is the event's ``ctpipe.io/champion-version`` annotation, else ``CTPIPE_MODEL_VERSION``."""
    env = dict(os.environ if environ is None else environ)
    if not (env.get(ENV_URI) or "").strip():
        raise SystemExit(f"{ENV_URI} is not set: the sink needs the prediction log's URI (docs/monitoring.md)")

    def open_log(version: str | None) -> PredictionLog:
        return PredictionLog(env[ENV_URI].strip(), model_name=env.get(ENV_MODEL_NAME),
                             model_version=version or env.get(ENV_MODEL_VERSION), key_column=env.get(ENV_KEY))

    return PredictionSink(open_log)


def make_server(sink: PredictionSink, host: str = "0.0.0.0", port: int = 8080) -> ThreadingHTTPServer:
    """An HTTP server taking each POSTed event into ``sink`` (200, or 400 naming what is wrong); GET is a probe."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                sink.receive(dict(self.headers.items()), body)
            except EventError as err:
                self._answer(400, str(err))
                return
            self._answer(200, "ok")

        def do_GET(self) -> None:  # noqa: N802
            self._answer(200, json.dumps(sink.counts))

        def _answer(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # one line per event would flood the pod's log
            return

    return ThreadingHTTPServer((host, port), Handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="KServe request logger sink into the ctpipe prediction log")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sink = sink_from_environment()
    server = make_server(sink, args.host, args.port)
    try:
        server.serve_forever()
    finally:
        sink.close()


if __name__ == "__main__":
    main()
