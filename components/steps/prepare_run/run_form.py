"""The run form: the typed pipeline parameters people change from the Kubeflow UI, applied over the config.

Each knob maps onto one config setting. Its default in the compiled pipeline is that setting's value in
the config the pipeline was compiled with (``defaults_of``), and it applies only when a run sets it to
something else (``apply_run_form``): a knob left alone keeps whatever ``config_json`` says, so editing
the JSON still works, and a knob changed in the form wins over the JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError


@dataclass(kw_only=True, frozen=True)
class RunForm:
    """The knobs of the run form (the pipeline's typed parameters of the same names)."""

    training_steps: int  # train.max_steps
    workers: int  # train.workers
    learning_rate: float  # train.lr
    batch_size: int  # train.batch_size (per worker)
    blessing_allowed_change: float  # change_abs of every rule in evaluate.thresholds
    training_window_days: int  # data.window_days; 0 means every partition (null)


SETTING_OF_KNOB = {
    "training_steps": "train.max_steps",
    "workers": "train.workers",
    "learning_rate": "train.lr",
    "batch_size": "train.batch_size",
    "blessing_allowed_change": "evaluate.thresholds.<metric>.change_abs",
    "training_window_days": "data.window_days",
}


def defaults_of(config: Config) -> RunForm:
    """The form's defaults: the config's own values (the allowed change: the rules' common change_abs, 0
    when they differ, which then changes nothing until a run sets another value)."""
    changes = {rule.change_abs for rule in config.evaluate.thresholds.values()}
    common = changes.pop() if len(changes) == 1 else None
    return RunForm(
        training_steps=config.train.max_steps,
        workers=config.train.workers,
        learning_rate=config.train.lr,
        batch_size=config.train.batch_size,
        blessing_allowed_change=float(common) if common is not None else 0.0,
        training_window_days=config.data.window_days or 0,
    )


def run_form_from_values(values: dict[str, Any]) -> RunForm:
    """A RunForm from the pipeline's parameter values; integers may arrive as floats (KFP's compiled defaults)."""
    kinds = {f.name: f.type for f in fields(RunForm)}
    typed: dict[str, Any] = {}
    for name, kind in kinds.items():
        value = values[name]
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int | float) or float(value) != int(value):
                raise ConfigError(f"invalid run parameter {name}={value!r} (sets {SETTING_OF_KNOB[name]}): "
                                  "must be a whole number")
            value = int(value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"invalid run parameter {name}={value!r} (sets {SETTING_OF_KNOB[name]}): must be a number")
        typed[name] = float(value) if kind == "float" else value
    return RunForm(**typed)


def apply_run_form(values: dict[str, Any], form: RunForm, defaults: RunForm) -> dict[str, Any]:
    """``values`` (a config as a dict) with every knob that differs from its default applied; ``values`` is
    left as it was. A window of 0 days means every partition; a negative one is refused."""
    if form.training_window_days < 0:
        raise ConfigError(f"invalid run parameter training_window_days={form.training_window_days}: must be a "
                          "number of days >= 1, or 0 to train on every partition")
    out = {section: dict(body) if isinstance(body, dict) else body for section, body in values.items()}
    changed = {name: value for name, value in asdict(form).items() if value != getattr(defaults, name)}
    train = out["train"]
    for knob, key in (("training_steps", "max_steps"), ("workers", "workers"), ("learning_rate", "lr"),
                      ("batch_size", "batch_size")):
        if knob in changed:
            train[key] = changed[knob]
    if "training_window_days" in changed:
        out["data"]["window_days"] = changed["training_window_days"] or None
    if "blessing_allowed_change" in changed:
        rules = out["evaluate"]["thresholds"]
        out["evaluate"]["thresholds"] = {
            metric: {**rule, "change_abs": changed["blessing_allowed_change"]} for metric, rule in rules.items()
        }
    return out
