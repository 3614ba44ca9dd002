"""Errors that a user can fix: the CLI prints them as one paragraph, without a traceback."""

from __future__ import annotations

import errno


class UserError(Exception):
    """A problem with the user's input (data, config, command line) and how to fix it."""


class ConfigError(UserError, ValueError):
    """A configuration value is unknown or out of range; the message names the field."""


class DataValidationError(UserError):
    """The data failed validation; the message lists what is wrong and where."""


class SanityCheckError(UserError):
    """A training sanity check failed before any expensive training started."""


class DataChangedError(RuntimeError):
    """The data is no longer the version a run was started for (or changed while it ran): nothing is reused,
    cached or trained for it. Not the user's error (data moves on, as it may): a later run takes the new
    version, and the watcher settles the old one as superseded."""


class RegistryRecordError(RuntimeError):
    """A registry record ctpipe wrote is damaged or missing (a version's ``ctpipe/lineage.json`` that does not match
    its digest): the registry's problem, never the data's or the config's. Exit 1, ``user_error`` false: the
    watcher does not blame (and settle) a data version for it; the message names the version and the file."""


class TrainingError(RuntimeError):
    """Training failed (NaN/Inf, a rank died, the job failed); the message says where."""


# OS errors of the machine, not of the input: a retry on a machine with room (or a mended disk) succeeds,
# so they stay infrastructure failures (never UserError), which the watcher retries.
_MACHINE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded (no space left on device for this user)",
    errno.EIO: "input/output error (the disk or its mount failed)",
}


def machine_error_message(step: str, err: OSError) -> str | None:
    """The one-line report of a full or failing disk in ``step``: the step, the path, what happened, and
    that it is retried; None for any other OS error."""
    what = _MACHINE_ERRNOS.get(err.errno) if isinstance(err.errno, int) else None
    if what is None:
        return None
    where = f"'{err.filename}'" if err.filename else "a file (the OS did not say which)"
    return (
        f"step '{step}' could not write {where}: {what} [Errno {err.errno}]. This is the machine, not the input: "
        "free space (or mend the disk) and run again; the watcher retries it (an infrastructure failure)"
    )
