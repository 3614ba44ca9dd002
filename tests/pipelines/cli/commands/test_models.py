"""`ctpipe models list|show|promote|rollback` on a home with two registered versions."""

from __future__ import annotations

import json

import pytest

from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import promotion_record
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.pipelines.cli.main import main
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


def _home_with_two_versions(root, **config_kwargs):
    """Version 1 blessed (the champion alias), version 2 registered but not blessed (floor out of reach)."""
    snap = make_snapshot(root)
    home = root / "home"
    uri = local_tracking_uri(home)
    for i, floor in ((1, 0.5), (2, 0.999)):
        config = fast_config(**config_kwargs)
        config.evaluate.thresholds["accuracy"].value = floor
        model = make_model(snap, root / f"m{i}.pt", steps=60, seed=i)
        run_id = make_run(uri, config, f"p{i}")
        blessing, card = root / f"b{i}.json", root / f"c{i}.md"
        evaluate_candidate(str(model), str(snap), config, tracking_uri=uri, mlflow_run_id=run_id,
                           blessing_path=str(blessing), card_path=str(card))  # fmt: skip
        register_candidate(str(model), str(snap), str(blessing), config, tracking_uri=uri, mlflow_run_id=run_id,
                           pipeline_run_id=f"p{i}", trigger="schedule", reports={})  # fmt: skip
    return home


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Version 1 champion (blessed), version 2 challenger (not blessed: floor out of reach).

    Shared by the module: the promote/rollback test ends in this same state.
    """
    return _home_with_two_versions(tmp_path_factory.mktemp("models-cli"))


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_the_contract_fields_newest_first(home, capsys):
    code, out, _ = _run(capsys, "models", "list", "--home", str(home), "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["version"] for r in rows] == ["2", "1"]
    for row in rows:
        assert {"version", "aliases", "blessed", "trigger", "data_fingerprint", "metrics"} <= set(row)
        # The headline metric from the tags (one registry call lists every version); `show` has every metric.
        assert set(row["metrics"]) == {"accuracy"} and row["trigger"] == "schedule"
        assert row["pipeline_run_id"] == f"p{row['version']}"
    assert rows[0]["aliases"] == ["challenger"] and rows[0]["blessed"] is False
    assert rows[1]["aliases"] == ["champion"] and rows[1]["blessed"] is True
    code, out, _ = _run(capsys, "models", "list", "--tracking-uri", local_tracking_uri(home))
    assert code == 0 and "champion" in out and "challenger" in out


def test_show_prints_lineage_and_reasons(home, capsys):
    code, out, _ = _run(capsys, "models", "show", "2", "--home", str(home), "--json")
    record = json.loads(out)
    assert code == 0 and record["version"] == "2" and record["compared_with"] == "1"
    assert any("fails value threshold" in r for r in record["blessing_reasons"])
    assert record["lineage"]["pipeline_run_id"] == "p2" and record["config"]["evaluate"]
    assert set(record["metrics"]) >= {"accuracy", "macro_f1", "log_loss"}
    code, out, _ = _run(capsys, "models", "show", "2", "--home", str(home))
    assert code == 0 and "\nlineage (ctpipe/lineage.json):\n" in out and "\n  pipeline_run_id: p2\n" in out
    assert "\n  intervals" not in out and '"intervals"' not in out  # the evaluation's detail: --json only


def test_promote_by_hand_is_recorded_and_rollback_returns_to_the_previous_champion(home, capsys):
    code, out, err = _run(
        capsys,
        "models",
        "promote",
        "2",
        "--reason",
        "canary looked good",
        "--by",
        "alice",
        "--home",
        str(home),
    )
    assert code == 0 and out.strip().splitlines()[-1] == "2"
    # Version 2 was not blessed: allowed by hand, but said, with evaluation's reason.
    assert "evaluation did not bless version 2" in err and "fails value threshold" in err
    registry = Registry(local_tracking_uri(home), fast_config().registry)
    tags = registry.get_version("2").tags
    promotion = promotion_record(tags)
    assert (promotion["kind"], promotion["by"], promotion["reason"]) == (
        "manual",
        "alice",
        "canary looked good",
    )
    assert registry.alias_version("champion") == "2"
    code, out, _ = _run(capsys, "models", "rollback", "--home", str(home), "--reason", "errors in prod")
    assert code == 0 and out.strip().splitlines()[-1] == "1"
    assert registry.alias_version("champion") == "1"
    assert [e["kind"] for e in registry.champion_history()] == ["auto", "manual", "rollback"]
    code, _, err = _run(capsys, "models", "rollback", "--home", str(home))
    assert code == 2 and "no previous champion to roll back to" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["models", "promote", "9", "--reason", "x"], "has no version 9; existing versions: 1, 2"),
        (["models", "show", "abc"], "is not a version number"),
    ],
)
def test_unknown_versions_fail_clearly(home, capsys, argv, message):
    code, _, err = _run(capsys, *argv, "--home", str(home))
    assert code == 2 and message in err


def test_a_home_without_a_registry_fails_clearly(tmp_path, capsys):
    code, _, err = _run(capsys, "models", "list", "--home", str(tmp_path / "nowhere"))
    assert code == 2 and "no MLflow registry" in err
    assert not (tmp_path / "nowhere").exists()


@pytest.fixture(scope="module")
def production_home(tmp_path_factory):
    """A registry whose pipeline names its champion alias 'production' (registry.champion_alias):
    version 1 is the production model, version 2 is not blessed."""
    return _home_with_two_versions(tmp_path_factory.mktemp("models-alias"), champion_alias="production")


def test_promote_moves_the_configured_champion_alias_and_refuses_another(production_home, capsys, tmp_path):
    registry = Registry(local_tracking_uri(production_home), fast_config(champion_alias="production").registry)
    assert registry.alias_version("production") == "1"
    # Without the pipeline's config the command would move 'champion', an alias the pipeline never reads.
    code, _, err = _run(capsys, "models", "promote", "2", "--reason", "x", "--home", str(production_home))
    assert code == 2 and "'production'" in err and "registry.champion_alias" in err and "Traceback" not in err
    assert registry.aliases() == {"production": "1", "challenger": "2"}
    # With it (a file as the pipeline's, or --set), the pipeline's champion moves, and rolls back.
    cfg = tmp_path / "ctpipe.yaml"
    cfg.write_text("registry:\n  champion_alias: production\n")
    code, out, _ = _run(capsys, "models", "promote", "2", "--reason", "canary", "--home", str(production_home),
                        "--config", str(cfg))  # fmt: skip
    assert code == 0 and out.strip().splitlines()[-1] == "2"
    assert registry.aliases() == {"production": "2", "challenger": "2"}
    code, out, _ = _run(capsys, "models", "rollback", "--home", str(production_home),
                        "--set", "registry.champion_alias=production")  # fmt: skip
    assert code == 0 and out.strip().splitlines()[-1] == "1"
    assert registry.aliases() == {"production": "1", "challenger": "2"}


@pytest.mark.parametrize("action", [["list"], ["show", "1"], ["promote", "1", "--reason", "x"]])
def test_a_model_name_the_registry_does_not_have_fails_naming_the_ones_it_has(home, capsys, action):
    # Before: 'list' printed "no registered versions yet" for a mistyped --model-name, as for an empty registry.
    code, _, err = _run(capsys, "models", *action, "--home", str(home), "--model-name", "ctpipe-clasifier")
    assert code == 2 and "no registered model 'ctpipe-clasifier'" in err and "ctpipe-classifier" in err
    assert "promotion-lock" not in err


def test_a_registry_with_nothing_registered_yet_lists_no_versions(tmp_path, capsys):
    from ctpipe.components.lib.tracking import ensure_experiment

    ensure_experiment(local_tracking_uri(tmp_path), "ctpipe")  # a first run that stopped before registering
    code, out, _ = _run(capsys, "models", "list", "--home", str(tmp_path))
    assert code == 0 and "no registered versions yet" in out


def test_the_configs_registry_is_the_one_read_and_promoted_in(home, capsys, tmp_path):
    """``registry.tracking_uri`` (where the pipeline registers) is where `ctpipe models` looks, as `ctpipe run`
    and `ctpipe watch` do; before, it read the --home's own SQLite registry instead, so a promote moved the
    alias in a registry the pipeline does not use."""
    from ctpipe.components.lib.tracking import ensure_experiment

    other_home = tmp_path / "laptop"
    ensure_experiment(local_tracking_uri(other_home), "ctpipe")  # an unrelated local registry, nothing registered
    code, out, _ = _run(capsys, "models", "list", "--home", str(other_home), "--json",
                        "--set", f"registry.tracking_uri={local_tracking_uri(home)}")
    assert code == 0
    assert [r["version"] for r in json.loads(out)] == ["2", "1"]
    # --tracking-uri still wins over the config.
    code, out, _ = _run(capsys, "models", "list", "--tracking-uri", local_tracking_uri(other_home),
                        "--set", f"registry.tracking_uri={local_tracking_uri(home)}")
    assert code == 0 and "no registered versions yet" in out


def test_the_recorded_user_falls_back_to_the_uid_where_there_is_no_user_name(monkeypatch):
    """In a container running under an arbitrary uid (no passwd entry, no USER), getpass.getuser() raises:
    promote and rollback record the uid instead of failing."""
    import getpass
    import os

    from ctpipe.pipelines.cli.commands import models

    def no_user():
        raise KeyError(f"getpwuid(): uid not found: {os.getuid()}")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert models._current_user() == f"uid {os.getuid()}"


def test_listing_the_registry_imports_only_what_a_bare_mlflow_client_would(tmp_path):
    """Before: `ctpipe models list` found the default home through the local runner, which imported KFP, the run's
    terminal progress and with it torch and torch.distributed.checkpoint: 1.5x the CPU of a bare MlflowClient listing
    the same versions (benchmarks/cli.py). A command that only reads the registry imports neither."""
    import os
    import subprocess
    import sys

    from ctpipe.components.lib.tracking import ensure_experiment

    ensure_experiment(local_tracking_uri(tmp_path), "ctpipe")
    script = (
        "import sys; from ctpipe.pipelines.cli.main import main; code = main(sys.argv[1:]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'kfp', 'great_expectations'})); "
        "print(sorted(m for m in sys.modules if m.startswith(('ctpipe.pipelines.local.local_run', "
        "'ctpipe.components.engine', 'ctpipe.components.steps'))))"
    )
    done = subprocess.run([sys.executable, "-c", script, "models", "list", "--home", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "CTPIPE_HOME": str(tmp_path)})
    lines = done.stdout.strip().splitlines()
    assert "no registered versions yet" in done.stdout and lines[-2:] == ["[]", "[]"], done.stdout + done.stderr
