"""The warm-start server's second importer: torch's side of the preload list, on the other core.

One process imports one module at a time, so the server's list was a chain of ~7.6 s of one core (quiet, 2026-11-29:
KFP, MLflow and its SQL store 2.8 s, GX 2.0 s, torch with ``torch._dynamo`` 2.5 s) while the steps waited on it with
the other core idle: the sanity step started ~1 s after validation ended, waiting for torch (docs/performance.md).
Once what every step needs is imported (``time_to_fork``: KFP's executor, the config, MLflow and its SQL store,
pandas, pyarrow; nothing pending but ``MAIN_ONLY`` and the branch's modules), the server forks a *branch*: a copy of
itself that imports ``branch_modules`` (from ``BRANCH_AT``, torch, on: every step that trains or scores a model)
while the server goes on with ``MAIN_ONLY`` (GX and validation). The server hands each request that needs one of the
branch's modules to the branch (the client's connection and its three descriptors, passed with SCM_RIGHTS over a
socket pair), and the branch forks it as the server would: clients see one server. Without a branch (it failed to
fork, or it is gone) the server forks such a request itself, which then imports what it lacks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from ctpipe.components.lib.warm_start import standby

BRANCH_AT = "torch"  # the preload list from this module on is the branch's
MAIN_ONLY = ("great_expectations", "ctpipe.components.steps.validate_data.validate")  # the server's, after the fork


def branch_modules(preload: tuple[str, ...]) -> frozenset[str]:
    """The modules of ``preload`` the branch imports: ``BRANCH_AT`` and every module after it (none when nothing
    comes before it: no common part to fork after)."""
    return frozenset(preload[preload.index(BRANCH_AT):]) if BRANCH_AT in preload[1:] else frozenset()


def time_to_fork(pending: list[str], branch: frozenset[str]) -> bool:
    """Whether the server should fork the branch now: what every step needs is imported (nothing pending but
    ``MAIN_ONLY`` and branch modules), and the branch has something left to import."""
    return bool(branch) and any(m in branch for m in pending) and all(m in branch or m in MAIN_ONLY for m in pending)


class Branch:
    """The server's end of the branch: its pid and the socket that hands requests over."""

    def __init__(self, pid: int, handover: socket.socket, modules: frozenset[str]) -> None:
        self.pid, self.handover, self.modules = pid, handover, modules
        self.pidfd = os.pidfd_open(pid)

    def ended(self) -> None:
        """The branch has ended (killed, or it failed): reap it and say so; the server forks its requests now."""
        _, status = os.waitpid(self.pid, 0)
        os.close(self.pidfd)
        self.handover.close()
        print(f"ctpipe warm start: the branch ended (wait status {status}); the server starts its requests",
              file=sys.stderr, flush=True)

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Wait for the branch to end (it stops its children when the server's stdin closes, as the server
        does); kill it if it lingers."""
        self.handover.close()
        deadline = time.monotonic() + grace_seconds
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.02)
        os.close(self.pidfd)

    def takes(self, needs: tuple[str, ...]) -> bool:
        return any(m in self.modules for m in needs)

    def hand_over(self, conn: socket.socket, fds: list[int], request: dict) -> bool:
        """Pass a request to the branch; False (the server keeps it) when the branch cannot take it."""
        try:
            socket.send_fds(self.handover, [json.dumps(request).encode()], [conn.fileno(), *fds])
        except OSError as err:
            print(f"ctpipe warm start: the branch did not take a request: {err}", file=sys.stderr, flush=True)
            return False
        return True


def fork_branch(server, modules: frozenset[str]) -> Branch | None:
    """Fork the branch of ``server`` (a ``server.Server`` inside ``serve``): in the branch, the server's state
    becomes the branch's (its pending list the ``modules`` still pending, its children, waiting requests and
    listener closed, requests read from the handover socket) and this returns None; in the server, the branch
    (the server's pending list without ``modules``), or None when no fork was possible."""
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
    except OSError as err:
        print(f"ctpipe warm start: no branch: {err}", file=sys.stderr, flush=True)
        return None
    if pid == 0:
        ours.close()
        _become_branch(server, theirs, modules)
        return None
    theirs.close()
    server.pending[:] = [m for m in server.pending if m not in modules]
    forked = Branch(pid, ours, modules)
    for waiting in [w for w in server.waiting if forked.takes(w.needs)]:  # came before the fork
        if forked.hand_over(waiting.conn, waiting.fds, waiting.request):
            server.waiting.remove(waiting)
            for fd in waiting.fds:
                os.close(fd)
            waiting.conn.close()
    return forked


def _become_branch(server, handover: socket.socket, modules: frozenset[str]) -> None:
    server.is_branch = True
    os.environ.pop(standby.STANDBY_ENV, None)  # the server starts the run's standby, once
    server.listener.close()
    for child in server.by_pidfd.values():  # the server's children and their clients stay the server's
        os.close(child.pidfd)
        child.conn.close()
    server.by_pidfd.clear()
    server.by_conn.clear()
    for waiting in server.waiting:  # those the branch takes come again through the handover socket
        for fd in waiting.fds:
            os.close(fd)
        waiting.conn.close()
    server.waiting.clear()
    server.pending[:] = [m for m in server.pending if m in modules]
    server.branch = None
    server.listener = handover
    server._accept = lambda: _accept_handed_over(server)


def _accept_handed_over(server) -> None:
    """In the branch: a request the server handed over, queued as the server queues one it accepted."""
    message, fds, _, _ = socket.recv_fds(server.listener, 1 << 22, 4)
    if not message and not fds:  # the server is gone: no more requests; stdin's end stops the branch
        server.listener.close()
        server.listener, server._never = socket.socketpair()  # a listener that never becomes readable
        return
    server.queue(socket.socket(fileno=fds[0]), fds[1:], json.loads(message))
