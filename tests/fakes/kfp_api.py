"""A stand-in Kubeflow Pipelines API server on 127.0.0.1 speaking the ``apis/v2beta1`` REST paths.

Only what ``kfp.Client`` 2.17 (``kfp_server_api``) really calls for deploy/submit: healthz, pipelines
(multipart ``pipelines/upload`` and ``pipelines/upload_version``), pipeline versions, experiments, runs
and recurring runs, with the filter (``display_name`` EQUALS), ``sort_by`` and paging the client uses.
Like the real server it names an uploaded pipeline's first version after the pipeline, checks run
parameters against the spec's root inputs and cron expressions for 6 fields, and resolves a recurring
run without a version id to the latest version. Requests are recorded for assertions.
"""

from __future__ import annotations

import datetime as dt
import email.parser
import itertools
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

PREFIX = "/apis/v2beta1"


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class FakeKfpState:
    """The server's in-memory objects."""

    def __init__(self, token: str | None = None, finish_runs_as: str | None = None) -> None:
        self.lock = threading.Lock()
        self.token = token
        # When set, a run reaches this state the first time it is read (a pipeline that ends at once).
        self.finish_runs_as = finish_runs_as
        self.pipelines: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}
        self.experiments: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.recurring_runs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        # Injected failures, each answered once to the next request it matches: (method, path prefix, HTTP status),
        # and optionally True: answered after the request was carried out (a gateway timing out on a slow answer).
        self.failures: list[tuple] = []
        self.auth_headers: list[str | None] = []
        self.cookies: list[str | None] = []
        self._clock = itertools.count()

    def now(self) -> str:
        # Strictly increasing timestamps so "created_at desc" is well defined within one test.
        base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=next(self._clock))
        return base.isoformat().replace("+00:00", "Z")

    def set_run_state(self, run_id: str, state: str) -> None:
        """A state reported by the persistence agent; a change is appended to ``state_history``, as KFP does."""
        with self.lock:
            run = self.runs[run_id]
            run["state"] = state
            if run["state_history"][-1]["state"] != state:
                run["state_history"].append({"update_time": self.now(), "state": state})

    def terminate_run(self, run_id: str) -> None:
        """An operator's Terminate, as KFP 2.17 on Argo reports it: CANCELING while the workflow stops, then
        FAILED (Argo has no cancelled phase; KFP never sets CANCELED), with both in ``state_history``."""
        self.set_run_state(run_id, "CANCELING")
        self.set_run_state(run_id, "FAILED")

    def fail_run(self, run_id: str, *failed_tasks: str) -> None:
        """End a run as FAILED with these tasks FAILED in its run details, as KFP 2.17 reports it: which tasks
        failed, never why (``error`` of a run or a task is set only when the server cannot convert it)."""
        with self.lock:
            run = self.runs[run_id]
            run["state"] = "FAILED"
            run["state_history"].append({"update_time": self.now(), "state": "FAILED"})
            run["run_details"] = {
                "task_details": [
                    {"run_id": run_id, "task_id": str(uuid.uuid4()), "display_name": name, "state": "FAILED"}
                    for name in failed_tasks
                ]
            }

    def versions_of(self, pipeline_id: str) -> list[dict[str, Any]]:
        return [v for v in self.versions.values() if v["pipeline_id"] == pipeline_id]


def _filter(items: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    text = (query.get("filter") or [""])[0]
    if text:
        for predicate in json.loads(text).get("predicates", []):
            if predicate.get("operation") not in ("EQUALS", 1):
                raise ApiError(400, f"fake KFP supports only EQUALS filters, got {predicate}")
            key, value = predicate["key"], predicate.get("stringValue", predicate.get("string_value"))
            items = [i for i in items if str(i.get(key)) == str(value)]
    sort_by = (query.get("sort_by") or [""])[0]
    if sort_by:
        # As the real server: ties are broken by the object's id, in the same order.
        key, _, order = sort_by.partition(" ")
        ids = ("pipeline_version_id", "run_id", "recurring_run_id", "pipeline_id", "experiment_id")
        ident = next((k for k in ids if items and k in items[0]), None)
        items = sorted(items, key=lambda i: (i.get(key) or "", i.get(ident) or ""), reverse=order.strip() == "desc")
    size = int((query.get("page_size") or ["10"])[0] or 10)
    start = int((query.get("page_token") or ["0"])[0] or 0)
    return items[start : start + size], (str(start + size) if start + size < len(items) else "")


def _spec_inputs(spec: dict[str, Any]) -> set[str]:
    return set(((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {})


def _parse_upload(headers, body: bytes) -> tuple[str, dict[str, Any]]:
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + headers["Content-Type"].encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + body
    )
    for part in message.get_payload():
        if part.get_param("name", header="content-disposition") == "uploadfile":
            filename = part.get_filename() or "pipeline.yaml"
            docs = list(yaml.safe_load_all(part.get_payload(decode=True)))
            spec = docs[0] if docs else None
            if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
                raise ApiError(400, f"{filename} is not a KFP v2 pipeline spec")
            return filename, spec
    raise ApiError(400, "multipart field 'uploadfile' is missing")


class _Handler(BaseHTTPRequestHandler):
    state: FakeKfpState

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        parsed = urlparse(self.path)
        query = parse_qs(parsed.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        state = self.state
        with state.lock:
            state.requests.append((method, parsed.path))
            state.auth_headers.append(self.headers.get("Authorization"))
            state.cookies.append(self.headers.get("Cookie"))
        try:
            if state.token and self.headers.get("Authorization") != f"Bearer {state.token}":
                raise ApiError(401, "missing or wrong bearer token")
            if not parsed.path.startswith(PREFIX):
                raise ApiError(404, f"no route {parsed.path}")
            with state.lock:
                failure = next((f for f in state.failures if f[0] == method and parsed.path.startswith(f[1])), None)
                if failure:
                    state.failures.remove(failure)
            if failure and not failure[3:]:
                raise ApiError(failure[2], "injected failure (e.g. the API server restarting behind its gateway)")
            with state.lock:
                code, payload = route(state, method, parsed.path[len(PREFIX) :], query, self.headers, body)
            if failure:
                raise ApiError(failure[2], "injected failure after the request was carried out (a gateway timeout)")
        except ApiError as err:
            code, payload = err.code, {"error": str(err), "code": err.code, "message": str(err)}
        self._send(code, payload)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def route(state: FakeKfpState, method: str, path: str, query, headers, body: bytes) -> tuple[int, Any]:
    """Dispatch one request to the in-memory objects."""
    parts = [p for p in path.split("/") if p]
    data = json.loads(body) if body and headers.get("Content-Type", "").startswith("application/json") else {}
    if parts == ["healthz"]:
        return 200, {"multi_user": False, "pipeline_store": "fake"}
    if parts[:1] == ["pipelines"]:
        return _pipelines(state, method, parts[1:], query, headers, body)
    if parts[:1] == ["experiments"]:
        return _experiments(state, method, parts[1:], query, data)
    if parts[:1] == ["runs"]:
        return _runs(state, method, parts[1:], query, data)
    if parts[:1] == ["recurringruns"]:
        return _recurring(state, method, parts[1:], query, data)
    raise ApiError(404, f"no route {method} {path}")


def _new_version(state: FakeKfpState, pipeline_id: str, name: str, description: str, spec: dict[str, Any]) -> dict:
    if any(v["display_name"] == name for v in state.versions_of(pipeline_id)):
        raise ApiError(409, f"pipeline version '{name}' already exists")
    version = {
        "pipeline_id": pipeline_id,
        "pipeline_version_id": str(uuid.uuid4()),
        "display_name": name,
        "name": name,
        "description": description,
        "created_at": state.now(),
        "pipeline_spec": spec,
    }
    state.versions[version["pipeline_version_id"]] = version
    return version


def _pipelines(state, method, parts, query, headers, body):
    q = {k: v[0] for k, v in query.items()}
    if method == "POST" and parts == ["upload"]:
        _, spec = _parse_upload(headers, body)
        name = q.get("display_name") or q.get("name") or spec["pipelineInfo"]["name"]
        if any(p["display_name"] == name for p in state.pipelines.values()):
            raise ApiError(409, f"pipeline '{name}' already exists")
        pipeline = {
            "pipeline_id": str(uuid.uuid4()),
            "display_name": name,
            "name": name,
            "description": q.get("description", ""),
            "created_at": state.now(),
            "namespace": q.get("namespace", ""),
        }
        state.pipelines[pipeline["pipeline_id"]] = pipeline
        _new_version(state, pipeline["pipeline_id"], name, q.get("description", ""), spec)
        return 200, pipeline
    if method == "POST" and parts == ["upload_version"]:
        _, spec = _parse_upload(headers, body)
        pipeline_id = q.get("pipelineid")
        if pipeline_id not in state.pipelines:
            raise ApiError(404, f"pipeline {pipeline_id} not found")
        return 200, _new_version(state, pipeline_id, q.get("name") or q.get("display_name"), q.get("description", ""), spec)
    if method == "GET" and not parts:
        # As in multi-user KFP: a namespace lists that namespace's pipelines, none lists the shared ones.
        scope = q.get("namespace", "")
        items, token = _filter([p for p in state.pipelines.values() if p["namespace"] == scope], query)
        return 200, {"pipelines": items, "total_size": len(items), "next_page_token": token}
    if not parts or parts[0] not in state.pipelines:
        raise ApiError(404, f"pipeline {parts[:1]} not found")
    pipeline_id = parts[0]
    if method == "GET" and len(parts) == 1:
        return 200, state.pipelines[pipeline_id]
    if method == "GET" and parts[1:] == ["versions"]:
        items, token = _filter(state.versions_of(pipeline_id), query)
        return 200, {"pipeline_versions": items, "total_size": len(items), "next_page_token": token}
    if len(parts) == 3 and parts[1] == "versions" and parts[2] in state.versions:
        if method == "GET":
            return 200, state.versions[parts[2]]
        if method == "DELETE":
            del state.versions[parts[2]]
            return 200, {}
    raise ApiError(404, f"no route {method} pipelines/{'/'.join(parts)}")


def _experiments(state, method, parts, query, data):
    if method == "POST" and not parts:
        namespace = data.get("namespace") or ""
        if any(e["display_name"] == data.get("display_name") and e["namespace"] == namespace for e in state.experiments.values()):
            raise ApiError(409, "experiment exists")
        experiment = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": data["display_name"],
            "description": data.get("description") or "",
            "namespace": data.get("namespace") or "",
            "created_at": state.now(),
            "storage_state": "AVAILABLE",
        }
        state.experiments[experiment["experiment_id"]] = experiment
        return 200, experiment
    if method == "GET" and not parts:
        # As in multi-user KFP: experiments are listed per namespace (none: the shared ones, namespace "").
        scope = (query.get("namespace") or [""])[0]
        items, token = _filter([e for e in state.experiments.values() if e["namespace"] == scope], query)
        return 200, {"experiments": items, "total_size": len(items), "next_page_token": token}
    if method == "GET" and len(parts) == 1 and parts[0] in state.experiments:
        return 200, state.experiments[parts[0]]
    raise ApiError(404, f"no route {method} experiments/{'/'.join(parts)}")


def _resolve_version(state, reference: dict[str, Any]) -> dict[str, Any]:
    pipeline_id = reference.get("pipeline_id")
    if pipeline_id not in state.pipelines:
        raise ApiError(400, f"pipeline {pipeline_id} not found")
    version_id = reference.get("pipeline_version_id")
    if version_id:
        if version_id not in state.versions or state.versions[version_id]["pipeline_id"] != pipeline_id:
            raise ApiError(400, f"pipeline version {version_id} not found")
        return state.versions[version_id]
    return max(state.versions_of(pipeline_id), key=lambda v: v["created_at"])


def _check_parameters(version: dict[str, Any], runtime_config: dict[str, Any] | None) -> None:
    allowed = _spec_inputs(version["pipeline_spec"])
    unknown = sorted(set((runtime_config or {}).get("parameters") or {}) - allowed)
    if unknown:
        raise ApiError(400, f"unknown pipeline parameters {unknown}; the pipeline takes {sorted(allowed)}")


def _runs(state, method, parts, query, data):
    if method == "POST" and not parts:
        if data.get("experiment_id") not in state.experiments:
            raise ApiError(400, "experiment_id is required and must exist")
        version = _resolve_version(state, data.get("pipeline_version_reference") or {})
        _check_parameters(version, data.get("runtime_config"))
        run = {
            **data,
            "run_id": str(uuid.uuid4()),
            "state": "PENDING",
            "created_at": state.now(),
            "state_history": [{"update_time": state.now(), "state": "PENDING"}],
            "storage_state": "AVAILABLE",
            "pipeline_version_reference": {
                "pipeline_id": version["pipeline_id"],
                "pipeline_version_id": version["pipeline_version_id"],
            },
        }
        state.runs[run["run_id"]] = run
        return 200, run
    if method == "GET" and not parts:
        items = list(state.runs.values())
        if query.get("experiment_id"):
            items = [r for r in items if r.get("experiment_id") == query["experiment_id"][0]]
        items, token = _filter(items, query)
        return 200, {"runs": items, "total_size": len(items), "next_page_token": token}
    if method == "GET" and len(parts) == 1 and parts[0] in state.runs:
        run = state.runs[parts[0]]
        if state.finish_runs_as and run["state"] == "PENDING":
            run["state"] = state.finish_runs_as
            run["state_history"].append({"update_time": state.now(), "state": state.finish_runs_as})
        return 200, run
    raise ApiError(404, f"no route {method} runs/{'/'.join(parts)}")


def _recurring(state, method, parts, query, data):
    if method == "POST" and not parts:
        if data.get("experiment_id") not in state.experiments:
            raise ApiError(400, "experiment_id is required and must exist")
        cron = ((data.get("trigger") or {}).get("cron_schedule") or {}).get("cron")
        if cron is not None and len(cron.split()) != 6:
            raise ApiError(400, f"cron '{cron}' must have 6 fields")
        version = _resolve_version(state, data.get("pipeline_version_reference") or {})
        _check_parameters(version, data.get("runtime_config"))
        recurring = {
            **data,
            # As the real server: the recurring run lives in its experiment's namespace.
            "namespace": state.experiments[data["experiment_id"]]["namespace"],
            "recurring_run_id": str(uuid.uuid4()),
            "created_at": state.now(),
            "status": "ENABLED" if data.get("mode") == "ENABLE" else "DISABLED",
        }
        state.recurring_runs[recurring["recurring_run_id"]] = recurring
        return 200, recurring
    if method == "GET" and not parts:
        items = list(state.recurring_runs.values())
        if query.get("experiment_id"):
            items = [r for r in items if r.get("experiment_id") == query["experiment_id"][0]]
        elif query.get("namespace"):  # multi-user KFP scopes by namespace (single-user ignores it; all are "")
            items = [r for r in items if r.get("namespace") == query["namespace"][0]]
        items, token = _filter(items, query)
        return 200, {"recurringRuns": items, "total_size": len(items), "next_page_token": token}
    if not parts:
        raise ApiError(404, "no route")
    run_id, _, action = parts[0].partition(":")
    if run_id not in state.recurring_runs:
        raise ApiError(404, f"recurring run {run_id} not found")
    if method == "GET":
        return 200, state.recurring_runs[run_id]
    if method == "DELETE":
        del state.recurring_runs[run_id]
        return 200, {}
    if method == "POST" and action in ("enable", "disable"):
        state.recurring_runs[run_id]["mode"] = action.upper()
        state.recurring_runs[run_id]["status"] = "ENABLED" if action == "enable" else "DISABLED"
        return 200, {}
    raise ApiError(404, f"no route {method} recurringruns/{parts[0]}")


class FakeKfpServer:
    """Run the fake API in a thread: ``with FakeKfpServer() as server: kfp.Client(host=server.url)``."""

    def __init__(self, token: str | None = None, finish_runs_as: str | None = None) -> None:
        self.state = FakeKfpState(token=token, finish_runs_as=finish_runs_as)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeKfpServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
