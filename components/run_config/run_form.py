"""The run form, declared once: the typed knobs people change from the Kubeflow UI, as one table.

Everything else is derived from ``KNOBS``: the ``@dsl.pipeline`` signature and its descriptions
(``pipeline_parameters``), the one text the pipeline hands to prepare_run (``form_text``), the settings a
run's knobs apply over the config (``knob_settings``, applied by ``resolve.py``) and the table of
docs/run-form.md (``markdown_table``, checked by tests/components/run_config/test_run_form.py).

Adding a knob: one ``Knob`` row here, its row in docs/run-form.md (the test prints the row it expects),
and a test of what it sets. Its default in a compiled pipeline is the setting's value in the config the
pipeline was compiled with; a run applies it only when it differs from that default, so a knob left
alone keeps whatever ``config_json`` says.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError

# The setting of a knob that applies to every blessing rule: ``<metric>`` stands for each rule's metric.
EVERY_METRIC = "<metric>"


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One typed field of the run form and the config setting it changes."""

    name: str  # the pipeline parameter (a Python identifier: what the Kubeflow UI shows)
    setting: str  # the config setting it sets, ``section.field`` (``<metric>``: every blessing rule)
    type: type  # int or float
    description: str  # the UI's text under the field
    low: float  # the allowed range, as the config checks it (``low_open``: low itself is refused)
    high: float
    low_open: bool = False
    high_open: bool = False
    # The knob value that means the setting's null (0 days: every partition), and what null means.
    none_value: float | None = None
    none_means: str = ""

    def bounds_text(self) -> str:
        low = "(" if self.low_open else "["
        high = ")" if self.high_open else "]"
        text = f"{low}{_number(self.low)}, {_number(self.high)}{high}"
        return text if self.none_value is None else f"{text}, or {_number(self.none_value)} for {self.none_means}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{int(value):,}" if float(value).is_integer() else repr(value)


KNOBS: tuple[Knob, ...] = (
    Knob(name="training_steps", setting="train.max_steps", type=int, low=1, high=10**9,
         description="Optimizer steps of training; must exceed train.warmup_steps."),
    Knob(name="workers", setting="train.workers", type=int, low=1, high=1024,
         description="Training processes, one per GPU or node: the job's Master plus Workers."),
    Knob(name="learning_rate", setting="train.lr", type=float, low=0, high=10, low_open=True, high_open=True,
         description="Peak AdamW learning rate after warmup."),
    Knob(name="batch_size", setting="train.batch_size", type=int, low=1, high=1_048_576,
         description="Examples per worker per step; the global batch is batch_size x workers."),
    Knob(name="blessing_allowed_change", setting=f"evaluate.thresholds.{EVERY_METRIC}.change_abs", type=float,
         low=-math.inf, high=math.inf,
         description="Allowed change against the champion on every blessing rule, in the metric's units, better "
                     "direction positive: 0 blocks any evidence of a regression, -0.01 allows 0.01 of regression."),
    Knob(name="training_window_days", setting="data.window_days", type=int, low=1, high=36_500, none_value=0,
         none_means="every partition",
         description="Train on the newest N days of partitions; 0 trains on every partition. Validation, val "
                     "and test always cover all of them."),
)
KNOB_NAMES = tuple(knob.name for knob in KNOBS)


def form_defaults(config: Config) -> dict[str, Any]:
    """Each knob's default: its setting's value in ``config`` (the compiled one). The allowed change is the
    rules' common ``change_abs``, 0 when they differ (then it changes nothing until a run sets it)."""
    values = config.to_dict()
    out: dict[str, Any] = {}
    for knob in KNOBS:
        section, *rest = knob.setting.split(".")
        if EVERY_METRIC in rest:
            changes = {rule.get(rest[-1]) for rule in values[section][rest[0]].values()}
            common = changes.pop() if len(changes) == 1 else None
            out[knob.name] = knob.type(common) if common is not None else knob.type(0)
            continue
        value = values[section]
        for part in rest:
            value = value[part]
        out[knob.name] = knob.type(knob.none_value if value is None else value)
    return out


def form_text(values: Mapping[str, Any]) -> str:
    """The knobs as the one text prepare_run takes: ``name=value`` lines in the table's order. In the
    pipeline ``values`` are its parameters, and KFP fills them into the text when the run starts."""
    return "\n".join(f"{knob.name}={{}}".format(values[knob.name]) for knob in KNOBS)


def parse_form_text(text: str) -> dict[str, Any]:
    """The knob values of ``form_text``'s text, typed; KFP hands integers over as ``64.0``: a whole number
    is accepted, ``40.5`` steps is refused, naming the knob and the setting."""
    given: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            name, _, value = line.partition("=")
            given[name.strip()] = value.strip()
    unknown = sorted(set(given) - set(KNOB_NAMES))
    if unknown:
        raise ConfigError(f"invalid run form: unknown knob(s) {', '.join(unknown)}; the knobs: {', '.join(KNOB_NAMES)}")
    return {knob.name: typed_value(knob, given[knob.name]) for knob in KNOBS if knob.name in given}


def typed_value(knob: Knob, value: Any) -> int | float:
    """``value`` (a number, or its text) as the knob's type; a ConfigError naming the knob otherwise."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass  # not a number: refused below, quoted as given
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"invalid run parameter {knob.name}={value!r} (sets {knob.setting}): must be a number")
    if knob.type is int:
        if float(value) != int(value):
            raise ConfigError(f"invalid run parameter {knob.name}={value!r} (sets {knob.setting}): "
                              "must be a whole number")
        return int(value)
    return float(value)


def knob_settings(form: Mapping[str, Any], defaults: Mapping[str, Any], config_values: Mapping[str, Any]) -> list[str]:
    """The ``section.field=value`` settings of every knob in ``form`` whose value differs from its default,
    over a config whose values are ``config_values`` (a blessing-rule knob sets each of its rules)."""
    settings = []
    for knob in KNOBS:
        if knob.name not in form or form[knob.name] == defaults.get(knob.name):
            continue
        value = form[knob.name]
        _check_bounds(knob, value)
        text = "null" if knob.none_value is not None and value == knob.none_value else repr(value)
        if EVERY_METRIC in knob.setting:
            head, _, tail = knob.setting.partition(EVERY_METRIC)
            section, field = head.strip(".").split(".")
            settings += [f"{head}{metric}{tail}={text}" for metric in config_values[section][field]]
        else:
            settings.append(f"{knob.setting}={text}")
    return settings


def _check_bounds(knob: Knob, value: float) -> None:
    if knob.none_value is not None and value == knob.none_value:
        return
    inside = ((knob.low < value if knob.low_open else knob.low <= value)
              and (value < knob.high if knob.high_open else value <= knob.high))
    if not inside:
        raise ConfigError(f"invalid run parameter {knob.name}={value!r} (sets {knob.setting}): must be in "
                          f"{knob.bounds_text()}")


def pipeline_parameters(defaults: Mapping[str, Any]) -> list[inspect.Parameter]:
    """The knobs as the pipeline function's typed parameters, with ``defaults`` (``form_defaults``)."""
    return [inspect.Parameter(knob.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[knob.name],
                              annotation=knob.type) for knob in KNOBS]


def docstring_args() -> list[str]:
    """The knobs' lines of the pipeline docstring's ``Args:`` (KFP shows them under each field)."""
    return [f"{knob.name}: {knob.description} Sets {knob.setting}; allowed {knob.bounds_text()}. The default is this "
            "pipeline version's config; a value left at its default keeps what config_json says." for knob in KNOBS]


def markdown_table() -> str:
    """The run form's table of docs/run-form.md."""
    rows = ["| parameter | type | sets | allowed | what it does |", "|---|---|---|---|---|"]
    rows += [f"| `{knob.name}` | {knob.type.__name__} | `{knob.setting}` | {knob.bounds_text()} | {knob.description} |"
             for knob in KNOBS]
    return "\n".join(rows)
