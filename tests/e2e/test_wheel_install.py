"""The wheel is what images and users install: built from the sources, installed into a fresh virtual
environment outside the checkout, ``ctpipe render-job`` and ``ctpipe compile`` work from another directory
and their output validates strictly.

How the fresh environment gets its dependencies, honestly and offline: the wheel goes in with
``pip install --no-deps`` and is the only distribution installed there; the third-party packages (kfp, torch,
...) are taken from this test environment's site-packages, which a ``.pth`` file appends to ``sys.path``
*after* the fresh site-packages. This environment's editable install of ctpipe is an import hook in a
``.pth`` file, and Python runs ``.pth`` files only in site directories, not in directories another ``.pth``
adds, so the fresh interpreter can import ``components``/``pipelines`` only from the wheel (asserted
below). The sources are copied to a temporary folder first (``git ls-files``), so nothing stale from a
previous build in the checkout can slip into the wheel, and every command runs in a directory outside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import REPO_ROOT as ROOT

pytestmark = pytest.mark.slow  # builds a wheel and runs ctpipe three times (~30-60 s)

PROD_CONFIG = ROOT / "manifests" / "overlays" / "prod" / "ctpipe.yaml"


def _sources(target: Path) -> Path:
    """The project's files (tracked and new, not ignored) copied to ``target``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTPIPE_CRDS_DIR", "VIRTUAL_ENV", "CTPIPE_HOME")}
    return {**env, "MLFLOW_DISABLE_TELEMETRY": "true", **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(ctpipe executable, fresh python, a work directory outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the sources")
    src = _sources(base / "src")
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(src)], check=True, cwd=base, env=_clean_env())
    (wheel,) = wheels.glob("ctpipe-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, cwd=base, env=_clean_env())
    fresh_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
    deps = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (fresh_site / "zz_dependencies_from_the_test_env.pth").write_text("\n".join(deps) + "\n")
    work = base / "work"
    work.mkdir()
    shutil.copy(PROD_CONFIG, work / "prod.yaml")
    return venv / "bin" / "ctpipe", python, work, fresh_site


def _run(installed, *args: str) -> subprocess.CompletedProcess:
    ctpipe, _, work, _ = installed
    done = subprocess.run([str(ctpipe), *args], cwd=work, env=_clean_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"ctpipe {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done


def test_the_fresh_environment_imports_ctpipe_only_from_the_wheel(installed):
    _, python, work, fresh_site = installed
    code = ("import ctpipe, ctpipe.components, ctpipe.pipelines, ctpipe.task, ctpipe.components.lib.kube.crds as c; "
            "print(ctpipe.__file__); print(ctpipe.components.__file__); print(ctpipe.pipelines.__file__); "
            "print(c.crd_file(c.PYTORCHJOB_CRD))")
    out = subprocess.run([str(python), "-c", code], cwd=work, env=_clean_env(), capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(out) == 4
    for path in out:
        assert Path(path).is_relative_to(fresh_site), path
        assert not Path(path).is_relative_to(ROOT), path


def test_the_wheel_puts_only_ctpipe_at_the_top_of_site_packages(installed):
    _, python, work, fresh_site = installed
    tops = {p.name for p in fresh_site.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))}
    assert tops == {"ctpipe"}, tops
    for generic in ("components", "pipelines"):
        done = subprocess.run([str(python), "-c", f"import {generic}"], cwd=work, env=_clean_env(),
                              capture_output=True, text=True)
        assert done.returncode != 0 and "No module named" in done.stderr, (generic, done.stderr)


def test_render_job_from_the_wheel_validates_strictly(installed):
    import kubernetes_validate

    from ctpipe.components.lib.kube.pytorchjob import validate_pytorchjob
    from ctpipe.components.lib.kube.trainjob import validate_trainjob

    # train.backend=auto: both kinds it may submit, TrainJob first.
    trainjob, job = yaml.safe_load_all(_run(installed, "render-job", "--config", "prod.yaml").stdout)
    assert (trainjob["kind"], job["kind"]) == ("TrainJob", "PyTorchJob")
    assert job["metadata"]["namespace"] == "${NAMESPACE}"  # the prod config pins none: the step pod's own
    job["metadata"].update(name="ctpipe-train-0123", namespace="team-a")  # the run-time placeholders, filled in
    validate_pytorchjob(job)
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t-{rtype.lower()}"},
                    "template": spec["template"]}
        kubernetes_validate.validate(template, "1.32.0", strict=True)
    trainjob = yaml.safe_load(_run(installed, "render-job", "--config", "prod.yaml",
                                   "--set", "train.backend=trainjob").stdout)
    trainjob["metadata"].update(name="ctpipe-train-0123", namespace="team-a")
    validate_trainjob(trainjob)


def test_compile_from_the_wheel_gives_a_cluster_pipeline(installed):
    from kfp import components as kfp_components

    from ctpipe.pipelines.compile import compiled_config

    _, _, work, _ = installed
    _run(installed, "compile", "--config", "prod.yaml", "--out", "pipeline.yaml")
    compiled = work / "pipeline.yaml"
    loaded = kfp_components.load_component_from_file(str(compiled))  # the KFP SDK's own loader
    assert loaded.name == "ctpipe-continuous-training"
    spec, platform = yaml.safe_load_all(compiled.read_text())
    config = compiled_config(spec)
    assert config.train.backend == "auto"
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {config.kubernetes.image}
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert all(e["secretAsEnv"] for e in executors.values())


def test_a_local_run_starts_its_steps_warm_from_the_wheel(installed):
    """The warm-start client and server are files of the wheel, and a process goes through them there."""
    _, python, work, fresh_site = installed
    (work / "probe_warm.py").write_text(
        "import ctpipe.components.lib.warm_start.server as s; print('warm' if s.IN_CHILD else 'cold', s.__file__)\n"
    )
    code = (
        "import subprocess, sys\n"
        "from ctpipe.components.lib.warm_start import CLIENT, running_server, warm_command\n"
        "print(CLIENT)\n"
        "with running_server(preload=('json',)) as warm:\n"
        "    assert warm is not None\n"
        "    done = subprocess.run(warm_command([sys.executable, '-m', 'probe_warm']), capture_output=True, text=True)\n"
        "    print(done.stdout.strip(), done.returncode)\n"
    )
    out = subprocess.run([str(python), "-c", code], cwd=work, env=_clean_env(), capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    client, (mode, server_file, code) = Path(out[0]), out[1].split()
    assert client.is_file() and client.is_relative_to(fresh_site), client
    assert mode == "warm" and Path(server_file).is_relative_to(fresh_site) and code == "0", out
