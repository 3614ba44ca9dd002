"""docs/use-the-model.md, run as written: download the verified champion and predict with MLflow alone; `ctpipe serve`
answers a POST to /invocations on 127.0.0.1; the KServe component it names builds."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.champion import champion  # noqa: F401  (the session fixture)
from tests.fixtures.paths import REPO_ROOT as ROOT
from tests.fixtures.processes import gone_within

pytestmark = pytest.mark.slow  # a registration (with its serving check) and an MLflow scoring server

DOC = ROOT / "docs" / "use-the-model.md"


def _blocks(section: str, language: str) -> list[str]:
    """The fenced ``language`` blocks under the ``## section`` heading of the doc."""
    text = DOC.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _ctpipe(line: str) -> list[str]:
    """A documented `ctpipe ...` line as a command of this environment's ctpipe."""
    words = shlex.split(line)
    assert words[0] == "ctpipe", line
    return [sys.executable, "-m", "ctpipe.pipelines.cli.main", *words[1:]]


@pytest.fixture
def workdir(champion, tmp_path):  # noqa: F811
    """A folder outside the checkout whose .ctpipe is the champion's home, as after `ctpipe run`."""
    (tmp_path / ".ctpipe").symlink_to(champion.home)
    return tmp_path


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTPIPE_HOME")},
            "MLFLOW_DISABLE_TELEMETRY": "true"}


def test_the_python_section_downloads_the_verified_champion_and_predicts_a_class(workdir):
    (download,) = _blocks("Python", "bash")
    done = subprocess.run(_ctpipe(download.strip()), cwd=workdir, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verified and written to" in done.stdout
    (code,) = _blocks("Python", "python")
    done = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (answer,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["predicted_class"] in {"churn", "downgrade", "stay", "upgrade"}
    assert sum(answer[c] for c in ("churn", "downgrade", "stay", "upgrade")) == pytest.approx(1, abs=1e-5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_ping(port: int, server: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"ctpipe serve exited with {server.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the scoring server did not answer /ping within {timeout:.0f} s")


def test_the_rest_section_serves_the_champion_on_localhost(workdir):
    (block,) = _blocks("REST", "bash")
    start, post = [line for line in block.strip().splitlines() if line.strip()]
    port = _free_port()
    start, post = start.replace("5001", str(port)), post.replace("5001", str(port))
    assert start.endswith("&") and "127.0.0.1" in post
    server = subprocess.Popen(_ctpipe(start.rstrip("& ")), cwd=workdir, env=_env(), start_new_session=True)
    try:
        _wait_for_ping(port, server)
        done = subprocess.run(["bash", "-c", post], cwd=workdir, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        (answer,) = json.loads(done.stdout)["predictions"]
        assert answer["predicted_class"] in {"churn", "downgrade", "stay", "upgrade"}
    finally:
        server.send_signal(signal.SIGTERM)  # `ctpipe serve` stops the scoring server it started
        server.wait(timeout=30)
    assert gone_within(server.pid)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)


def test_the_kserve_section_names_a_component_that_builds():
    (block,) = _blocks("KServe", "bash")
    words = shlex.split(block.strip())
    assert words[:2] == ["kubectl", "kustomize"] and (ROOT / words[2] / "kustomization.yaml").is_file()
    if not Path("/usr/bin/kubectl").exists() and not any(
            (Path(p) / "kubectl").exists() for p in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("kubectl is not installed (tests/manifests/test_kserve.py validates the files)")
    done = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "kind: InferenceService" in done.stdout
