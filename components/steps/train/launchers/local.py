"""Run the workers as local processes with the torch.distributed env contract (what torchrun would set).

Plain processes do not watch each other: when one rank dies the others would block in a collective until
the process-group timeout. This launcher therefore kills the survivors as soon as any rank fails, puts
the first failing rank's error on top of the message, and enforces the job's deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.warm_start import warm_command
from ctpipe.components.steps.train.launchers.base import ERROR_FILE_ENV, WorkerLaunch, sigterm_raises

POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 3.0
TAIL_LINES = 40


def free_port() -> int:
    """An unused TCP port on the loopback interface for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Rank:
    """One worker process, its output pump and the tail of its output."""

    def __init__(self, rank: int, proc: subprocess.Popen, error_file: Path, echo: bool) -> None:
        self.rank, self.proc, self.error_file = rank, proc, error_file
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.exited_at: float | None = None
        self.pump = threading.Thread(target=self._pump, args=(echo,), daemon=True)
        self.pump.start()

    def _pump(self, echo: bool) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip("\n"))
            if echo:
                sys.stdout.write(f"[rank {self.rank}] {line}" if not line.startswith("[train]") else line)
                sys.stdout.flush()

    def error(self) -> str:
        """The rank's own error message, else the end of its output."""
        self.pump.join(timeout=2)
        if self.error_file.is_file():
            try:
                info = json.loads(self.error_file.read_text())
                return f"{info['type']}: {info['message']}"
            except (OSError, ValueError, KeyError):
                pass
        return "\n".join(self.tail) or f"exited with code {self.proc.returncode} and no output"


# What a rank says when ANOTHER rank died under it (gloo/NCCL): a consequence, not the cause.
PEER_LOSS_MARKERS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


def lost_a_peer(error: str) -> bool:
    """Whether a rank's error is a collective that lost its peer, i.e. a consequence of another rank's failure.

    Ranks that exit within one poll of each other tie on their exit time; the one that died first on its
    own is then the one to report, not the one whose collective broke because of it."""
    return any(marker in error for marker in PEER_LOSS_MARKERS)


class LocalLauncher:
    """Launcher for ``train.backend=local``: N processes on this machine, gloo on CPU (NCCL on GPUs)."""

    def __init__(self, *, echo: bool = True) -> None:
        self.echo = echo

    def run(self, launch: WorkerLaunch) -> None:
        port = free_port()
        deadline = time.monotonic() + launch.deadline_seconds
        # SIGTERM (a cancelled KFP task) unwinds through `finally`, so the ranks are stopped.
        on_sigterm = sigterm_raises(lambda signum: SystemExit(128 + signum))
        with tempfile.TemporaryDirectory(prefix=f"{launch.job_name}-") as tmp, on_sigterm:
            ranks: list[_Rank] = []
            try:
                ranks += [self._start(launch, r, port, Path(tmp)) for r in range(launch.world_size)]
                self._wait(launch, ranks, deadline)
            finally:
                _stop(ranks)

    def _start(self, launch: WorkerLaunch, rank: int, port: int, tmp: Path) -> _Rank:
        error_file = tmp / f"error-rank{rank}.json"
        env = {
            **os.environ,
            **launch.env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(launch.world_size),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(launch.world_size),
            ERROR_FILE_ENV: str(error_file),
            "PYTHONUNBUFFERED": "1",
        }
        # Through the warm-start server of a local run when there is one: a rank then starts with torch
        # already imported. Bytes that are not UTF-8 are replaced: the pump must never stop reading (the
        # rank would block on its full pipe until the deadline).
        proc = subprocess.Popen(
            warm_command(launch.command),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
        )
        return _Rank(rank, proc, error_file, self.echo)

    def _wait(self, launch: WorkerLaunch, ranks: list[_Rank], deadline: float) -> None:
        while True:
            now = time.monotonic()
            for r in ranks:
                if r.exited_at is None and r.proc.poll() is not None:
                    r.exited_at = now
            failed = sorted(
                (r for r in ranks if r.exited_at is not None and r.proc.returncode != 0),
                key=lambda r: (r.exited_at, lost_a_peer(r.error()), r.rank),
            )
            if failed:
                _stop(ranks)
                first = failed[0]
                others = ", ".join(f"rank {r.rank} (exit {r.proc.returncode})" for r in failed[1:])
                raise TrainingError(
                    f"training job '{launch.job_name}' failed: rank {first.rank} exited with code "
                    f"{first.proc.returncode}: {first.error()}"
                    + (
                        f"\n(also failed afterwards: {others}; the surviving ranks were stopped)"
                        if others
                        else "\n(the surviving ranks were stopped)"
                    )
                )
            if all(r.exited_at is not None for r in ranks):
                return
            if now > deadline:
                _stop(ranks)
                raise TrainingError(
                    f"training job '{launch.job_name}' ran past its deadline of {launch.deadline_seconds} s and was "
                    "stopped; raise train.deadline_seconds or lower train.max_steps"
                )
            time.sleep(POLL_SECONDS)


def _stop(ranks: list[_Rank]) -> None:
    """Terminate every rank still running, then kill those that do not stop within the grace period."""
    alive = [r for r in ranks if r.proc.poll() is None]
    for r in alive:
        r.proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + KILL_GRACE_SECONDS
    for r in alive:
        try:
            r.proc.wait(timeout=max(end - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()
    for r in ranks:
        r.pump.join(timeout=2)
