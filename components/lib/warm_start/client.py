"""Start ``python ARGS`` through the warm-start server; exit as that process does.

    python -I -S client.py -m module args...      # instead of: python -m module args...

Standard library only, run without ``site`` so that it starts in milliseconds. It sends the server its
arguments, environment and working directory, and passes its stdin, stdout and stderr along (SCM_RIGHTS),
so the child writes where this process would have. SIGTERM, SIGINT and SIGHUP sent here go on to the
child (those this process started ignoring, the child ignores, as a cold python would); if this process is killed, the server sees the connection close and kills the child. With no server
(none set, it has gone, the arguments are not ``-m module ...`` or ``script ...``), it becomes the cold
process itself with ``exec``: warm start only ever saves time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "CTPIPE_WARM_SOCKET"  # ctpipe.components.lib.warm_start.SOCKET_ENV: this file runs without the package
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _cold(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *args])


def _warm_able(args: list[str]) -> bool:
    if not args:
        return False
    if args[0] == "-m":
        return len(args) > 1
    return not args[0].startswith("-")


def _exit_like(status: int) -> None:
    """Exit with the child's wait status: its exit code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in FORWARDED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        sys.exit(128 + sig)  # a signal that does not terminate (not one a child dies of)
    sys.exit(os.waitstatus_to_exitcode(status))


def main(args: list[str]) -> None:
    path = os.environ.get(SOCKET_ENV)
    if not path or not _warm_able(args):
        _cold(args)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        # A cold python inherits these as ignored (`ctpipe run &` from a script ignores SIGINT): so must the child.
        ignored = [int(sig) for sig in FORWARDED_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN]
        request = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd(), "ignored": ignored}).encode()
        socket.send_fds(conn, [struct.pack("!Q", len(request))], [0, 1, 2])
        conn.sendall(request)
    except OSError:
        conn.close()
        _cold(args)

    def forward(signum, _frame):
        try:
            conn.sendall(b"S" + struct.pack("!i", signum))
        except OSError:
            pass

    for sig in FORWARDED_SIGNALS:
        if sig not in ignored:
            signal.signal(sig, forward)
    reply = b""
    while len(reply) < 5:
        try:
            chunk = conn.recv(5 - len(reply))
        except InterruptedError:
            continue
        if not chunk:
            sys.stderr.write("ctpipe warm start: the server went away before the process ended\n")
            sys.exit(1)
        reply += chunk
    kind, value = reply[:1], struct.unpack("!i", reply[1:])[0]
    if kind == b"C":  # the server could not start it: run it cold
        conn.close()
        _cold(args)
    _exit_like(value)


if __name__ == "__main__":
    main(sys.argv[1:])
