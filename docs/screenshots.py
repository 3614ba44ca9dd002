"""Screenshots of what a person sees in MLflow after `ctpipe run`, taken with headless Chromium.

    python docs/screenshots.py                      # a fresh demo run in a temporary home, PNGs into docs/images/
    python docs/screenshots.py --home .ctpipe       # the pages of an existing home's latest run
    python docs/screenshots.py --only runs --dom    # the runs list alone, with the page's DOM beside the PNG

Pages: ``runs`` (the experiment's run list, the link `ctpipe run` prints), ``run`` (the pipeline run's page),
``version`` (the registered model version) and ``validation`` (the validation step's Data Docs as MLflow
shows the artifact). Needs Debian's ``chromium`` (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PAGES = ("runs", "run", "version", "validation")
# As Debian's Chromium runs here: headless, no network of its own, a new profile every time.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,900", "--hide-scrollbars"]
QUICK_RUN = ["--set", "train.max_steps=60", "--set", "train.eval_every=20", "--set", "train.checkpoint_every=20"]


def chromium() -> str:
    """The Chromium binary, or exit naming the package to install."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        sys.exit("docs/screenshots.py needs Chromium: apt-get install chromium")
    return found


def capture(url: str, png: Path, *, dom: Path | None = None, wait_ms: int = 25000) -> None:
    """Load ``url`` headless, let its scripts run ``wait_ms`` of virtual time, save a PNG (and the DOM)."""
    with tempfile.TemporaryDirectory() as profile:
        base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={wait_ms}"]
        subprocess.run([*base, f"--screenshot={png}", url], check=True, capture_output=True, timeout=300)
        if dom is not None:
            page = subprocess.run([*base, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=300)
            dom.write_text(page.stdout)


def start_ui(home: Path, port: int) -> subprocess.Popen:
    """``mlflow ui`` on the home's database and artifacts, on 127.0.0.1; returns once it answers."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{home.resolve() / 'mlflow.db'}",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit("mlflow ui exited before it answered")
            time.sleep(0.5)
    proc.kill()
    sys.exit("mlflow ui did not answer within 300 s")


def latest_summary(home: Path) -> dict:
    """The summary.json of the home's newest run."""
    summaries = sorted((home / "runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    if not summaries:
        sys.exit(f"no run under {home}/runs: run `ctpipe run --home {home}` first, or leave --home out")
    return json.loads(summaries[-1].read_text())


def page_urls(summary: dict, base: str) -> dict[str, str]:
    """The MLflow UI address of each page, in the machine-learning view (MLflow 3 opens on GenAI otherwise)."""
    from ctpipe.pipelines.local.run_summary import mlflow_ui_url

    view = "workflowType=machine_learning"
    experiment, run = summary["mlflow_experiment_id"], summary["mlflow_run_id"]
    # validate..select log to the run of this data, config and code (shared by cached reruns)
    training = summary.get("training_mlflow_run_id") or run
    return {
        "runs": mlflow_ui_url(summary, base),
        "run": f"{base}/#/experiments/{experiment}/runs/{run}?{view}",
        "version": f"{base}/#/models/{summary['model_name']}/versions/{summary['model_version']}?{view}",
        "validation": f"{base}/#/experiments/{experiment}/runs/{training}/artifacts/validation/data_docs.html?{view}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="a ctpipe home with a run (default: a fresh demo run)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "images", help="where the PNGs go")
    parser.add_argument("--only", choices=PAGES, action="append", help="these pages only (repeatable)")
    parser.add_argument("--dom", action="store_true", help="also save each page's DOM as PAGE.html")
    parser.add_argument("--port", type=int, default=5077)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = args.home or Path(scratch) / "home"
        if args.home is None:
            subprocess.run([sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--quiet", "--home", str(home),
                            *QUICK_RUN], check=True)
        urls = page_urls(latest_summary(home), f"http://127.0.0.1:{args.port}")
        args.out.mkdir(parents=True, exist_ok=True)
        ui = start_ui(home, args.port)
        try:
            for page in args.only or PAGES:
                capture(urls[page], args.out / f"{page}.png", dom=args.out / f"{page}.html" if args.dom else None)
                print(args.out / f"{page}.png")
        finally:
            os.killpg(ui.pid, 15)
            ui.wait(timeout=30)


if __name__ == "__main__":
    main()
