"""`ctpipe demo-data`: daily Parquet partitions, deterministic by seed, drift from a given day."""

import pandas as pd
import pytest

from ctpipe.pipelines.cli.main import main


def _read(root):
    parts = sorted(root.glob("date=*/part-0.parquet"))
    return parts, pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def test_writes_daily_partitions_with_a_key_features_and_a_multiclass_label(tmp_path):
    assert main(["demo-data", "--out", str(tmp_path), "--days", "3", "--rows-per-day", "200", "--seed", "5"]) == 0
    parts, frame = _read(tmp_path)
    assert [p.parent.name for p in parts] == ["date=2026-01-01", "date=2026-01-02", "date=2026-01-03"]
    assert len(frame) == 600 and frame["customer_id"].is_unique
    assert frame["label"].nunique() >= 3
    assert {"region", "device", "plan"} <= set(frame.select_dtypes(exclude="number").columns)


def test_same_seed_same_data_other_seed_other_data(tmp_path):
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        main(["demo-data", "--out", str(tmp_path / name), "--days", "1", "--rows-per-day", "100", "--seed", seed])
    a, b, c = (_read(tmp_path / n)[1] for n in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not a.drop(columns="customer_id").equals(c.drop(columns="customer_id"))


def test_drift_shifts_the_features_from_the_given_day(tmp_path):
    main(["demo-data", "--out", str(tmp_path), "--days", "4", "--rows-per-day", "2000", "--drift-from-day", "2"])
    parts, _ = _read(tmp_path)
    before, after = pd.read_parquet(parts[1]), pd.read_parquet(parts[2])
    assert after["tenure_months"].mean() > before["tenure_months"].mean() * 1.3
    assert (after["region"] == "central").mean() > 3 * (before["region"] == "central").mean()


@pytest.mark.parametrize("args", [["--days", "0"], ["--rows-per-day", "0"], ["--drift-from-day", "9"]])
def test_bad_arguments_are_explained(tmp_path, capsys, args):
    assert main(["demo-data", "--out", str(tmp_path), *args]) == 2
    assert "error:" in capsys.readouterr().err
