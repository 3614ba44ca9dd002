"""`ctpipe run --task NAME` without --data: the task's own demo data and the settings that go with it."""

from __future__ import annotations

from ctpipe.components.run_config import load_config, resolve_config
from ctpipe.pipelines.local.demo_setup import ensure_demo_data_for


def test_a_task_with_demo_data_gets_its_own_partitions_and_settings(tmp_path):
    uri = ensure_demo_data_for(tmp_path, load_config(None, ["task.name=causal_lm"]))
    assert uri.endswith("data-causal_lm")
    assert len(list((tmp_path / "data-causal_lm").glob("date=*/part-0.parquet"))) == 4
    config = resolve_config(settings=["task.name=causal_lm"], data_uri=uri, demo=True)
    assert (config.data.key, config.data.text_column) == ("doc_id", "text")


def test_the_default_task_keeps_the_tabular_demo_and_its_key(tmp_path):
    uri = ensure_demo_data_for(tmp_path, load_config(None, []))
    assert uri.endswith("/data") and resolve_config(data_uri=uri, demo=True).data.key == "customer_id"


def test_the_config_file_and_set_win_over_the_demo_settings(tmp_path):
    # Before: the demo settings were applied as --set overrides, over the user's config file.
    path = tmp_path / "c.yaml"
    path.write_text("task: {name: causal_lm}\ntrain: {max_steps: 40}\n")
    overrides = ["train.batch_size=8"]
    uri = ensure_demo_data_for(tmp_path / "home", load_config(path, overrides))
    config = resolve_config(file=path, settings=overrides, data_uri=uri, demo=True)
    assert uri.endswith("data-causal_lm")
    assert (config.train.max_steps, config.train.batch_size) == (40, 8)  # the user's, not the demo's 300 / 16
    assert (config.data.key, config.data.text_column) == ("doc_id", "text")  # the demo's, nobody set them
    assert config.select.metric == "val_loss"  # the task's own default


def test_a_key_the_user_sets_wins_over_the_tabular_demo_key(tmp_path):
    assert resolve_config(settings=["data.key=other_id"], demo=True).data.key == "other_id"
    assert resolve_config(demo=True).data.key == "customer_id"


def test_demo_data_cut_short_is_written_again_whole(tmp_path, monkeypatch):
    # Before: a first run killed (or a second run started beside it) while the demo data was being
    # written left the first days only, and every later run on the home trained on them, silently.
    import ctpipe.components.lib.data.demo as demo

    write_day = demo.write_day_partition

    def killed_after_two_days(root, day, frame):
        if day == 2:
            raise KeyboardInterrupt
        return write_day(root, day, frame)

    monkeypatch.setattr(demo, "write_day_partition", killed_after_two_days)
    try:
        ensure_demo_data_for(tmp_path, load_config(None, []))
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(demo, "write_day_partition", write_day)
    ensure_demo_data_for(tmp_path, load_config(None, []))
    assert len(list((tmp_path / "data").glob("date=*/part-0.parquet"))) == 7
    assert not [p.name for p in tmp_path.iterdir() if p.name != "data"]  # nothing staged is left beside it
