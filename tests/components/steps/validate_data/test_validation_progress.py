"""A long validation says what it is doing: rows and partitions done of total, rate and ETA, every few seconds."""

from __future__ import annotations

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.work_progress import WorkLine, WorkMeter
from ctpipe.components.steps.validate_data.validate import validate_data


def test_a_work_line_reads_back_as_it_was_written():
    written = WorkLine("validate_data", "scanning", 1200, 5000, "rows", 410.04, 3725.0, 3, 12)
    text = written.text()
    assert text == "progress validate_data: scanning 1200/5000 rows, partitions 3/12, 410.0 rows/s ETA 1:02:05"
    assert WorkLine.parse("2026-11-27 " + text) == WorkLine("validate_data", "scanning", 1200, 5000, "rows", 410.0,
                                                            3725.0, 3, 12)
    two_words = WorkLine("validate_data", "writing the snapshot", 5, 9, "rows", 1.0, 4.0)
    assert WorkLine.parse(two_words.text()) == two_words
    assert WorkLine.parse("[train] progress step 1/10 loss 0.5000 12.0 samples/s ETA 0:00:01") is None


def test_the_meter_prints_once_a_period_and_the_last_line_only_when_it_printed_any():
    now = [0.0]
    printed: list[str] = []
    meter = WorkMeter("validate_data", "scanning", 100, "rows", parts_total=4, every_seconds=3.0,
                      out=printed.append, clock=lambda: now[0])
    for part in "aabbccdd":  # a batch of 12 rows a second, two batches per partition
        now[0] += 1.0
        meter.advance(12, part)
    meter.finish()
    lines = [WorkLine.parse(p) for p in printed]
    # Every third second; a partition counts as done when the next one begins; at the end all of them.
    assert [(w.done, w.parts_done) for w in lines] == [(36, 1), (72, 2), (100, 4)], printed
    assert all(w.total == 100 and w.parts_total == 4 and w.rate > 0 for w in lines)
    assert lines[-1].eta_seconds == 0

    every: list[str] = []  # a line per batch: the last one is the whole pass, not printed twice
    meter = WorkMeter("validate_data", "scanning", 24, "rows", parts_total=2, every_seconds=0.0, out=every.append)
    meter.advance(12, "a")
    meter.advance(12, "b")
    meter.finish()
    assert [(w.done, w.parts_done) for w in map(WorkLine.parse, every)] == [(12, 0), (24, 2)], every

    quiet: list[str] = []
    short = WorkMeter("validate_data", "scanning", 10, "rows", every_seconds=3600.0, out=quiet.append)
    short.advance(10, "a")
    short.finish()
    assert quiet == []  # a pass shorter than one period prints nothing


def test_streamed_validation_prints_its_passes_on_a_small_dataset(tmp_path, capsys):
    data = tmp_path / "data"
    write_demo_data(data, days=3, rows_per_day=400, seed=0)
    cfg = Config.from_dict({"data": {"key": "customer_id"},
                            "validation": {"in_memory_rows": 0, "progress_seconds": 0.0}})
    validate_data(str(data), cfg, snapshot_dir=str(tmp_path / "snap"), data_docs_path=str(tmp_path / "docs.html"),
                  report_path=str(tmp_path / "report.md"), tracking_uri="", mlflow_run_id="")
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # plain text: it goes to pipeline.log
    lines = [w for w in map(WorkLine.parse, out.splitlines()) if w is not None]
    for doing in ("scanning", "writing the snapshot"):
        passes = [w for w in lines if w.doing == doing]
        assert [w.done for w in passes] == sorted(w.done for w in passes) and len(passes) >= 3, out
        assert {(w.step, w.total, w.parts_total, w.unit) for w in passes} == {("validate_data", 1200, 3, "rows")}
        assert (passes[-1].done, passes[-1].parts_done) == (1200, 3)
