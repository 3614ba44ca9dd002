"""Errors that a user can fix: the CLI prints them as one paragraph, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (data, config, command line) and how to fix it."""


class ConfigError(UserError, ValueError):
    """A configuration value is unknown or out of range; the message names the field."""


class DataValidationError(UserError):
    """The data failed validation; the message lists what is wrong and where."""


class SanityCheckError(UserError):
    """A training sanity check failed before any expensive training started."""


class TrainingError(RuntimeError):
    """Training failed (NaN/Inf, a rank died, the job failed); the message says where."""
