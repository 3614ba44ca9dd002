"""How the watcher starts local runs and learns their outcome, and the continuous watch loop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ctpipe.pipelines.local.local_run
import ctpipe.pipelines.local.run_summary
from ctpipe.components.lib.processes import pid_alive
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.triggers.ledger import Ledger
from ctpipe.pipelines.triggers.start import LocalStarter
from ctpipe.pipelines.triggers.watch import watch_loop


def test_local_starter_runs_ctpipe_submit_with_the_trigger_the_record_and_the_drift_report(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.claim("f" * 64, {"trigger": "drift", "drift_report": "/reports/drift-1.json"})
    starter = LocalStarter(tmp_path, config_path="cfg.yaml", overrides=["train.max_steps=50"])
    cmd = starter.command(trigger="drift", data_uri="/data", record_path=ledger.path("f" * 64))
    assert cmd[:4] == [sys.executable, "-m", "ctpipe.pipelines.cli.main", "submit"]
    joined = " ".join(cmd)
    assert "--trigger drift --data /data" in joined and f"--home {tmp_path}" in joined
    assert f"--record {ledger.path('f' * 64)}" in joined and "--drift-report /reports/drift-1.json" in joined
    assert "--config cfg.yaml --set train.max_steps=50" in joined
    new_data = starter.command(trigger="new_data", data_uri="/data", record_path=ledger.path("f" * 64))
    assert "--drift-report" not in new_data
    ledger.claim("d" * 64, {"trigger": "decay", "decay_report": "/reports/decay-1-2026-03-20.json"})
    decay = " ".join(starter.command(trigger="decay", data_uri="/data", record_path=ledger.path("d" * 64)))
    assert "--trigger decay" in decay and "--drift-report /reports/decay-1-2026-03-20.json" in decay


def test_a_recorded_local_run_is_active_while_its_process_lives(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record = {"status": "running", "pid": child.pid, "backend": "local"}
        starter = LocalStarter(tmp_path)
        assert pid_alive(child.pid) and starter.is_active(record)
        assert not starter.is_active({**record, "status": "succeeded"})
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not starter.is_active(record)


@pytest.mark.parametrize("status,code", [("succeeded", 0), ("failed", 1)])
def test_submit_records_the_outcome_of_a_local_run_in_the_ledger(tmp_path, monkeypatch, capsys, status, code):
    calls = []

    def fake_run_local(**kwargs):
        calls.append(kwargs)
        return {"status": status, "run_id": "r1", "summary_path": str(tmp_path / "summary.json"), "model_version": "3"}

    # The real local pipeline is covered by the end-to-end tests; here only the ledger bookkeeping is.
    monkeypatch.setattr(ctpipe.pipelines.local.local_run, "run_local", fake_run_local)
    monkeypatch.setattr(ctpipe.pipelines.local.run_summary, "format_summary", lambda summary: f"run {summary['run_id']}")
    ledger = Ledger(tmp_path)
    ledger.claim("a" * 64, {"trigger": "new_data"})
    argv = ["submit", "--trigger", "new_data", "--data", "/data", "--home", str(tmp_path), "--record", str(ledger.path("a" * 64))]
    assert main(argv) == code
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(tmp_path / "summary.json")
    assert calls[0]["trigger"] == "new_data" and calls[0]["data_uri"] == "/data"
    record = ledger.get("a" * 64)
    assert record["status"] == status and record["model_version"] == "3" and record["finished_at"] >= record["started_at"]
    assert record["host"] == socket.gethostname()  # its pid means something on this machine only


def test_watch_loop_prints_one_decision_per_check_and_survives_errors(tmp_path, capsys):
    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.components.run_config import load_config

    write_demo_data(tmp_path / "data", days=1, rows_per_day=50)
    common = dict(home=tmp_path / "home", config=load_config(None, []), tracking_uri=local_tracking_uri(tmp_path / "home"), dry_run=True)
    start = time.perf_counter()
    watch_loop(interval=0.05, iterations=2, data_uri=str(tmp_path / "data"), **common)
    watch_loop(interval=0.05, iterations=1, data_uri=str(tmp_path / "missing"), **common)
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [line["action"] for line in lines] == ["run", "run", "error"]  # no champion yet: a first run
    assert "does not exist" in lines[-1]["error"] and time.perf_counter() - start < 60


def test_watch_rejects_host_and_local_together(tmp_path, capsys):
    assert main(["watch", "--data", str(tmp_path), "--host", "http://127.0.0.1:9", "--local", "--once"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert Path(tmp_path).exists()


def test_a_decision_reads_as_a_sentence_for_people_and_as_json_for_programs():
    from ctpipe.pipelines.triggers.watch import Decision

    started = Decision(action="run", trigger="drift", fingerprint="ab" * 32, reason="drift in 2 columns",
                       champion_version="3", drifted_columns=["region", "age"], attempt=1)
    assert started.to_text().splitlines() == [
        "started run attempt 1 for data version abababababab (trigger drift): drift in 2 columns",
        "  drifted columns: region, age",
        "  champion: version 3",
    ]
    assert json.loads(started.to_line())["drifted_columns"] == ["region", "age"]
    nothing = Decision(action="none", trigger=None, fingerprint="cd" * 32, reason="the champion was trained on it")
    assert nothing.to_text() == "no run for data version cdcdcdcdcdcd: the champion was trained on it"
    assert Decision(action="run", trigger="new_data", fingerprint="ef" * 32, reason="new data", dry_run=True,
                    attempt=1).to_text().startswith("would start a run for data version efefefefefef")
