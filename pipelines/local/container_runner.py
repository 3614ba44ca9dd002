"""``ctpipe run --runner container``: every step in the built component image, through KFP's ``DockerRunner``.

The same local pipeline as ``ctpipe run``, but KFP's local runner starts each step as a container of the image
(``kfp.local.DockerRunner``) on a Docker-compatible API: ``$DOCKER_HOST`` when it is set, else podman's
(``podman system service``, started for the run on a socket of its own, with ci/podman.sh's configuration).

A step sees what a cluster's pod sees: the image, its user (10001), the compiled entry point
(``sh -c ... python3 -m kfp.dsl.executor_main``), the image's environment (plus the run's status folder), a
read-only root filesystem with an in-memory /tmp, no capabilities, no network when data and tracking are local.
The home (pipeline root, MLflow's SQLite database and artifacts, the run's step records) and the data are
mounted at their own paths, so every URI reads the same inside and out. The train step trains in its own
container with the local launcher (``train.backend=local``), as ``ctpipe run`` does.

Files the steps write belong to the image's user: as root (rootful podman, Docker) the home is handed to that
user first, as a cluster's ``fsGroup`` hands it a volume; rootless podman maps the image's user onto yours
(``keep-id``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV

RUN_LABEL = "io.ctpipe.run"
SERVICE_START_SECONDS = 60.0
# torch's data loader and the gloo ranks share memory through /dev/shm: podman's default (64 MB) is too small.
SHM_SIZE = "1g"


@dataclass(frozen=True)
class ContainerRuntime:
    """The Docker-compatible API the steps run on, and how files written in a container are owned."""

    base_url: str
    podman: bool
    rootless: bool


def podman_config_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """CONTAINERS_CONF and CONTAINERS_STORAGE_CONF as ci/podman.sh writes them, unless already set."""
    environ = dict(os.environ if environ is None else environ)
    default_dir = Path(environ.get("XDG_CONFIG_HOME") or Path(environ.get("HOME", "~")).expanduser() / ".config")
    conf_dir = Path(environ.get("CTPIPE_CONTAINERS_CONF_DIR") or default_dir / "ctpipe" / "containers")
    out = {}
    for variable, name in (("CONTAINERS_CONF", "containers.conf"), ("CONTAINERS_STORAGE_CONF", "storage.conf")):
        if not environ.get(variable) and (conf_dir / name).is_file():
            out[variable] = str(conf_dir / name)
    return out


@contextlib.contextmanager
def container_api() -> Iterator[ContainerRuntime]:
    """A Docker-compatible API for this block: ``$DOCKER_HOST``, else podman's, started here and stopped after."""
    if os.environ.get("DOCKER_HOST"):
        yield ContainerRuntime(os.environ["DOCKER_HOST"], podman=False, rootless=os.geteuid() != 0)
        return
    podman = shutil.which("podman")
    if podman is None:
        raise UserError("--runner container needs podman (`bash ci/build_images.sh` installs it on Debian, or "
                        "`apt-get install podman`) or a Docker daemon named by $DOCKER_HOST")
    env = {**os.environ, **podman_config_env()}
    with tempfile.TemporaryDirectory(prefix="ctpipe-podman-") as tmp:
        socket_path = Path(tmp) / "podman.sock"
        with open(Path(tmp) / "service.log", "wb") as log:
            service = subprocess.Popen([podman, "system", "service", "--time=0", f"unix://{socket_path}"],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        try:
            base_url = f"unix://{socket_path}"
            _wait_for_api(base_url, service, Path(tmp) / "service.log")
            yield ContainerRuntime(base_url, podman=True, rootless=os.geteuid() != 0)
        finally:
            service.terminate()
            try:
                service.wait(timeout=10)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()


def _wait_for_api(base_url: str, service: subprocess.Popen, log: Path) -> None:
    import docker

    deadline = time.monotonic() + SERVICE_START_SECONDS
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise RuntimeError(f"podman system service exited ({service.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(Exception):
            client = docker.DockerClient(base_url=base_url)
            try:
                client.ping()
                return
            finally:
                client.close()
        time.sleep(0.2)
    raise RuntimeError(f"podman system service did not answer on {base_url} within {SERVICE_START_SECONDS:.0f} s")


def image_user(base_url: str, image: str) -> tuple[int, int]:
    """The image's configured user as (uid, gid); a clear error when the image is not in the local store."""
    import docker

    client = docker.DockerClient(base_url=base_url)
    try:
        attrs = client.images.get(image).attrs
    except docker.errors.ImageNotFound:
        raise UserError(f"image {image!r} is not in the local image store; build it with `bash ci/build_images.sh` "
                        "(it prints the names it built) or name one that is with --image") from None
    finally:
        client.close()
    user = (attrs.get("Config") or {}).get("User") or ""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or int(uid) == 0:
        raise UserError(f"image {image!r} runs as {user or 'root'!r}; ctpipe's images run as a numeric non-root user")
    return int(uid), int(gid or uid)


def hand_over(paths: list[Path], uid: int, gid: int) -> None:
    """Make the folders the steps write belong to the image's user (as root: a cluster's fsGroup does this)."""
    for root in paths:
        root.mkdir(parents=True, exist_ok=True)
        for folder, dirs, files in os.walk(root):
            for name in [folder, *(os.path.join(folder, d) for d in dirs), *(os.path.join(folder, f) for f in files)]:
                os.lchown(name, uid, gid)


def runner_args(
    *,
    runtime: ContainerRuntime,
    user: tuple[int, int],
    home: Path,
    data_uri: str,
    status_dir: Path,
    tracking_uri: str,
    run_id: str,
) -> dict[str, Any]:
    """The ``DockerRunner`` arguments: a pod's restrictions, the home and the data mounted at their own paths."""
    from docker.types import Mount

    mounts = [Mount(target=str(home), source=str(home), type="bind")]
    local_data = "://" not in data_uri
    if local_data and not Path(data_uri).resolve().is_relative_to(home):
        mounts.append(Mount(target=data_uri, source=data_uri, type="bind", read_only=True))
    args: dict[str, Any] = {
        "environment": {STATUS_DIR_ENV: str(status_dir)},
        "mounts": mounts,
        "read_only": True,
        "tmpfs": {"/tmp": "rw,exec"},
        "shm_size": SHM_SIZE,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": {RUN_LABEL: run_id},
    }
    # No network when nothing the steps reach is remote: the ranks of the train step meet on loopback.
    if local_data and tracking_uri.startswith(("sqlite:", "file:")):
        args["network_mode"] = "none"
    if runtime.podman and runtime.rootless:
        args["userns_mode"] = f"keep-id:uid={user[0]},gid={user[1]}"
    elif runtime.rootless:  # Docker without user namespaces: the steps run as you, to write your files
        args["user"] = f"{os.getuid()}:{os.getgid()}"
    return args


def use_image(pipeline: Any, image: str) -> None:
    """Run every executor of a built pipeline in ``image`` (what ``ctpipe compile --image`` does to the YAML)."""
    executors = pipeline.pipeline_spec.deployment_spec.fields["executors"].struct_value.fields
    for executor in executors.values():
        container = executor.struct_value.fields.get("container")
        if container is not None:
            container.struct_value.fields["image"].string_value = image


def remove_containers(runtime: ContainerRuntime, run_id: str) -> None:
    """Remove the containers this run left (a step still running when the run was stopped). Through podman's
    command for podman: SIGTERM to ``ctpipe run`` stops its service with the steps' processes."""
    label = f"{RUN_LABEL}={run_id}"
    if runtime.podman:
        env = {**os.environ, **podman_config_env()}
        listed = subprocess.run(["podman", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True,
                                env=env, check=False)
        ids = listed.stdout.split()
        if ids:
            subprocess.run(["podman", "rm", "-f", *ids], capture_output=True, env=env, check=False)
        return
    import docker

    with contextlib.suppress(Exception):
        client = docker.DockerClient(base_url=runtime.base_url)
        try:
            for container in client.containers.list(all=True, filters={"label": label}):
                container.remove(force=True)
        finally:
            client.close()


@contextlib.contextmanager
def steps_in_containers(
    pipeline: Any, *, image: str, home: Path, pipeline_root: Path, data_uri: str, status_dir: Path, tracking_uri: str,
    run_id: str,
) -> Iterator[Any]:
    """KFP's ``DockerRunner`` for this block, every executor of ``pipeline`` in ``image``; the run's containers
    are removed when the block ends, however it ends. ``pipeline_root`` is made here, the image user's: KFP's
    ``local.init`` would make it later as this process's user, and a step could not write its outputs in it."""
    from kfp import local

    from ctpipe.pipelines.local.kfp_local_patches import container_exit_codes_kept

    with container_api() as runtime:
        user = image_user(runtime.base_url, image)
        if not runtime.rootless:
            hand_over([home, pipeline_root], *user)
        use_image(pipeline, image)
        args = runner_args(runtime=runtime, user=user, home=home, data_uri=data_uri, status_dir=status_dir,
                           tracking_uri=tracking_uri, run_id=run_id)
        previous = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = runtime.base_url  # what KFP's handler connects to (docker.from_env)
        try:
            with container_exit_codes_kept():
                yield local.DockerRunner(**args)
        finally:
            remove_containers(runtime, run_id)
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous
