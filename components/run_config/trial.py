"""A tuning trial's configuration: its values as ``KUBEFLOW_TRAINER_OPT_<NAME>`` variables, and back.

Kubeflow Trainer's OptimizationJob (master, unreleased: ``proposals/2605-optimization-job-crd``) hands each
trial's hyperparameters to the training code as environment variables ``KUBEFLOW_TRAINER_OPT_<NAME>``, the
parameter's name upper-cased; Katib substitutes ``${trialParameters.<name>}`` into the same variables of its
trial template. So every trial, local process or TrainJob, gets its values one way, and the worker reads one
source: ``apply_trial_env`` maps each variable back to its ``tune.space`` key and resolves the trial's config
like any run override (``resolve_config(compiled=..., overrides=...)``), with the same validation.

    env = trial_env({"train.lr": 0.003})            # {"KUBEFLOW_TRAINER_OPT_TRAIN_LR": "0.003"}
    config = apply_trial_env(config, os.environ)    # the worker: train.lr = 0.003
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config.resolve import resolve_config

OPT_ENV_PREFIX = "KUBEFLOW_TRAINER_OPT_"


def parameter_name(key: str) -> str:
    """The trial parameter of a config key (Katib's and the OptimizationJob's name): ``train.lr`` -> ``train_lr``."""
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


def env_name(key: str) -> str:
    """The variable a trial's value of ``key`` arrives in: ``train.lr`` -> ``KUBEFLOW_TRAINER_OPT_TRAIN_LR``."""
    return OPT_ENV_PREFIX + parameter_name(key).upper()


def value_text(value: Any) -> str:
    """A value as a trial variable holds it, read back as ``--set`` reads text (``repr`` keeps a float exact)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_settings(values: Mapping[str, Any]) -> list[str]:
    """``key=value`` settings of a trial's values, in the order given."""
    return [f"{key}={value_text(value)}" for key, value in values.items()]


def trial_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``KUBEFLOW_TRAINER_OPT_*`` variables of a trial's values."""
    return {env_name(key): value_text(value) for key, value in values.items()}


def trial_config(config: Config, values: Mapping[str, Any]) -> Config:
    """``config`` with a trial's values, resolved and validated as run overrides are (a ``ConfigError`` names the
    setting that breaks a rule)."""
    if not values:
        return config
    return resolve_config(compiled=config.to_json(), overrides=trial_settings(values))


def trial_values_from_env(config: Config, environ: Mapping[str, str]) -> dict[str, str]:
    """``tune.space`` key -> the text of its ``KUBEFLOW_TRAINER_OPT_*`` variable in ``environ``.

    A variable that names no key of ``config.tune.space`` is refused: a value meant for this training that it
    cannot apply (a stale or mistyped variable) must not be dropped silently."""
    names = {env_name(key): key for key in config.tune.space}
    found: dict[str, str] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith(OPT_ENV_PREFIX):
            continue
        if name not in names:
            allowed = ", ".join(sorted(names)) or "none: tune.space is empty"
            raise ConfigError(f"trial variable {name}={text!r} names no key of tune.space; the variables this "
                              f"config takes: {allowed}")
        found[names[name]] = text
    return found


def apply_trial_env(config: Config, environ: Mapping[str, str]) -> Config:
    """``config`` with the trial values ``environ`` carries (none: ``config`` itself)."""
    values = trial_values_from_env(config, environ)
    if not values:
        return config
    settings = [f"{key}={text}" for key, text in values.items()]
    return resolve_config(compiled=config.to_json(), overrides=settings)


def check_chosen_passed_gate(config: Config) -> None:
    """``ConfigError`` unless the values a search chose for ``config`` (``tune.chosen``, written by the tune step)
    passed the sanity gate's checks: training never takes tuned values the gate did not judge.

    The sanity step gates the configured values; the tune step gates each trial's (``gate: passed``, or
    ``skipped`` when ``sanity.enabled`` is off). A config without ``tune.chosen`` was not tuned: nothing to check."""
    if not config.tune.chosen:
        return
    chosen = config.tune.chosen.get("chosen") or {}
    gate = chosen.get("gate")
    allowed = ("passed",) if config.sanity.enabled else ("passed", "skipped")
    if gate not in allowed:
        raise ConfigError(
            f"tune.chosen: the chosen trial {chosen.get('trial')!r} (values {chosen.get('values')}) has the sanity "
            f"gate's verdict {gate!r}, and training takes only tuned values whose verdict is one of {list(allowed)}; "
            "run the tune step again (it gates every trial) or drop tune.chosen to train the configured values")
