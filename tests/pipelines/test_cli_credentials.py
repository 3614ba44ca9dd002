"""Every command refuses a URI with credentials before it records anything, and never prints the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.pipelines.cli.main import main

SECRET = "hunter2"


def _files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()] if root.exists() else []


def test_watch_once_refuses_userinfo_and_does_not_print_the_password(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["watch", "--data", f"http://user:{SECRET}@127.0.0.1:9/d", "--once", "--home", str(home)]) == 2
    out, err = capsys.readouterr()
    assert "--data holds credentials" in err
    assert SECRET not in out + err
    assert _files_holding(tmp_path, SECRET) == []


@pytest.mark.parametrize("prefix", ["", "simplecache::"])
def test_watch_refuses_a_signed_data_url_before_its_hash_cache_or_ledger_records_it(tmp_path, capsys, prefix):
    # A readable data root whose URL carries a signature: listing it works, so today the URI is recorded.
    data = tmp_path / f"d?sig={SECRET}"
    write_demo_data(data, days=2, rows_per_day=40, seed=0)
    home = tmp_path / "home"
    code = main(["watch", "--data", f"{prefix}file://{data}", "--once", "--dry-run", "--home", str(home)])
    out, err = capsys.readouterr()
    assert code == 2 and "query parameter 'sig='" in err
    assert SECRET not in out + err
    assert _files_holding(home, SECRET) == []


def test_run_refuses_a_chained_url_with_credentials_before_it_makes_a_run_folder(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["run", "--home", str(home), "--data", f"simplecache::s3://AKIA:{SECRET}@bucket/d"]) == 2
    err = capsys.readouterr().err
    assert "--data holds credentials (user:password@bucket)" in err and SECRET not in err
    assert not (home / "runs").exists()


def test_submit_refuses_a_chained_url_before_contacting_kfp(tmp_path, capsys):
    code = main(["submit", "--host", "http://127.0.0.1:9", "--data", f"simplecache::s3://AKIA:{SECRET}@bucket/d"])
    err = capsys.readouterr().err
    assert code == 2 and "--data holds credentials" in err and SECRET not in err


@pytest.mark.parametrize("command", [["deploy"], ["submit"], ["watch", "--data", "/nonexistent", "--once"]])
def test_a_kfp_host_with_credentials_is_refused_and_not_echoed(tmp_path, capsys, command):
    code = main([*command, "--host", f"http://admin:{SECRET}@127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "--host holds credentials (user:password@127.0.0.1:9)" in err and SECRET not in err


def test_compile_refuses_a_tracking_uri_with_a_token_query(tmp_path, capsys):
    out = tmp_path / "pipeline.yaml"
    code = main(["compile", "--out", str(out), "--set", f"registry.tracking_uri=https://mlflow.example.com?token={SECRET}"])
    err = capsys.readouterr().err
    assert code == 2 and "registry.tracking_uri" in err and SECRET not in err
    assert not out.exists()


@pytest.mark.parametrize("command", [
    ["train", "--out", "OUT", "--data"],
    ["suite", "profile", "--out", "OUT", "--data"],
    ["models", "list", "--tracking-uri"],
])
def test_every_other_command_taking_a_uri_refuses_credentials_too(tmp_path, capsys, command):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    code = main([*argv, f"simplecache::https://files.example.com/d?token={SECRET}"])
    err = capsys.readouterr().err
    assert code == 2 and "holds credentials (query parameter 'token=')" in err and SECRET not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("secret_part", ["?key=", "#access_token=", "?aws_secret_access_key=", "?a=1;token="])
def test_secrets_named_outside_any_list_are_refused_before_anything_records_them(tmp_path, capsys, secret_part):
    # Issue 46: these passed and were printed, logged and written into validation.md, data_docs.html,
    # pipeline.log and a compiled pipeline. A readable local root whose file:// URL carries the secret.
    data = tmp_path / "data"
    write_demo_data(data, days=2, rows_per_day=40, seed=0)
    home = tmp_path / "home"
    code = main(["watch", "--data", f"file://{data}{secret_part}{SECRET}", "--once", "--dry-run", "--home", str(home)])
    out, err = capsys.readouterr()
    assert code == 2 and "holds credentials" in err
    assert SECRET not in out + err
    assert _files_holding(home, SECRET) == []
    code = main(["compile", "--out", str(tmp_path / "p.yaml"), "--set",
                 f"registry.tracking_uri=http://mlflow:5000/{secret_part}{SECRET}"])
    err = capsys.readouterr().err
    assert code == 2 and SECRET not in err and not (tmp_path / "p.yaml").exists()
