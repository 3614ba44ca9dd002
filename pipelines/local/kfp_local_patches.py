"""How ``ctpipe run`` adjusts KFP's local runner (kfp 2.17): step output decoded leniently, logs without colour.

``kfp.local.subprocess_task_handler.run_local_subprocess`` reads a step's output as strict UTF-8 text:
the first byte that is not (a C library's message, a user's model printing raw bytes) raised
UnicodeDecodeError in ``ctpipe run`` and failed the run, the step's pipe closed under it.

``kfp.local.docker_task_handler.run_docker_container`` (``ctpipe run --runner container``) starts each step's
container with ``auto_remove`` and, when the container is gone before its exit code is read, "assumes success":
a step that failed fast passed. Here the container stays until its exit code is read, then goes.

KFP's local runner colours task names and statuses with ANSI codes (``kfp.local.logging_utils.Color``)
whatever its output is; ``ctpipe run`` sends it to ``pipeline.log``, where the codes are noise.

``kfp`` itself imports its API client (``kfp.Client``) with the package, which a local run never uses.

Its SubprocessRunner also warns, for every step, that an image without "python" in its name may need the
DockerRunner; ctpipe's steps run from the package installed here, as in the component image, so that warning
says nothing true.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import warnings
from collections.abc import Iterator

ANSI_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
KFP_RUNTIME_ENV = "_KFP_RUNTIME"


def kfp_without_its_client() -> None:
    """Import KFP's package as its executor does, without its API client (``kfp/__init__.py`` skips it under
    ``_KFP_RUNTIME=true``; 0.3 s of the CLI before the first step, 1 s loaded); ``kfp.dsl``, ``kfp.local`` and
    ``kfp.compiler``, imported after it with the switch back as it was, are whole. Only for a local run, which
    never uses ``kfp.Client``; nothing once KFP is imported."""
    import sys

    if "kfp" in sys.modules:
        return
    previous = os.environ.get(KFP_RUNTIME_ENV)
    os.environ[KFP_RUNTIME_ENV] = "true"
    try:
        import kfp  # noqa: F401
    finally:
        if previous is None:
            del os.environ[KFP_RUNTIME_ENV]
        else:
            os.environ[KFP_RUNTIME_ENV] = previous


def run_step_process(full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
    """kfp's ``run_local_subprocess``, with a byte that is not UTF-8 replaced instead of raising, and no colour."""
    env = {**os.environ, **env_vars} if env_vars else None
    with subprocess.Popen(
        full_command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, ""):
            print(ANSI_CODES.sub("", line), end="")
        print("\n")  # as kfp: a blank line after each step's output
        return process.wait()


@contextlib.contextmanager
def step_output_decoded_leniently() -> Iterator[None]:
    """While in this block, KFP's local runner starts steps with ``run_step_process``."""
    from kfp.local import subprocess_task_handler

    original = subprocess_task_handler.run_local_subprocess
    subprocess_task_handler.run_local_subprocess = run_step_process
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original


@contextlib.contextmanager
def log_without_colour() -> Iterator[None]:
    """While in this block, KFP's local runner writes its task names and statuses without ANSI colour codes."""
    from kfp.local import logging_utils

    names = [n for n in vars(logging_utils.Color) if n.isupper()]
    saved = {n: getattr(logging_utils.Color, n) for n in names}
    for name in names:
        setattr(logging_utils.Color, name, "")
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(logging_utils.Color, name, value)


def run_step_container(client, image: str, command: list[str], volumes: dict, **container_run_args) -> int:
    """kfp's ``run_docker_container``: the exit code read before the container is removed, output decoded leniently."""
    container = client.containers.run(image=image, command=command, detach=True, stdout=True, stderr=True,
                                      volumes=volumes, **container_run_args)
    try:
        for chunk in container.logs(stream=True, follow=True):
            print(ANSI_CODES.sub("", chunk.decode("utf-8", errors="replace")), end="")
        return int(container.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


@contextlib.contextmanager
def container_exit_codes_kept() -> Iterator[None]:
    """While in this block, KFP's DockerRunner starts steps with ``run_step_container``."""
    from kfp.local import docker_task_handler

    original = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = run_step_container
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = original


@contextlib.contextmanager
def no_docker_runner_warning() -> Iterator[None]:
    """While in this block, KFP's "consider using the DockerRunner" warning about the step image is not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*non-Python base image.*DockerRunner", category=RuntimeWarning)
        yield
