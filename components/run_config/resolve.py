"""The one place a run's configuration is resolved: every layer, in one documented order, by one call.

    config = resolve_config(file="my.yaml", settings=["train.max_steps=200"])            # ctpipe run, tests
    config = resolve_config(file=path, settings=sets, target="cluster")                 # compile, deploy, submit
    config = resolve_config(file=path, settings=sets, data_uri=uri, demo=True)          # the local demo run
    config = resolve_config(compiled=compiled_json, config_json=run_json,
                            run_form=knobs, overrides=lines)                            # prepare_run
    resolved = resolve_layers(...same keywords...)   # the config and, per setting, the layer that set it

The layers, lowest first (docs/configuration.md; ``ctpipe config show`` prints them):

1. ``defaults``  ctpipe's own (the dataclasses of ``components/lib/config``)
2. ``task``      the task's ``config_defaults`` (the task that the layers above and below name)
3. ``cluster``   the cluster defaults (``target="cluster"``: compile, deploy, submit)
4. ``task key``  ``data.key`` = the task's key column, when the data has it and no other layer sets a key
5. ``demo``      the demo data's settings (a local run without ``--data``)
6. ``file``      the config file (``--config``)
7. ``--set``     settings, in order (a later one wins)

A run of a compiled pipeline starts from what 1-7 resolved when it was compiled:

8. ``compiled``  the pipeline version's config, or the run's own ``config_json`` when it gives one
9. ``run form``  each knob of the run form that differs from its default (``run_form.py``)
10. ``overrides`` the run's ``config_overrides``; one that names another task swaps the compiled task's
   defaults (where the compiled config still has them) for the new task's

A mapping given whole (in a file, ``evaluate.thresholds={}``) replaces the mapping below it. Only this module
applies layers (tests/test_import_graph.py); ``components/lib/config/loading.py`` parses one layer.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctpipe.components.lib.config import Config, TaskConfig
from ctpipe.components.lib.config.coerce import build_dataclass
from ctpipe.components.lib.config.loading import apply_settings, merge_mapping, read_config_file
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config.run_form import form_defaults, knob_settings

Target = Literal["local", "cluster"]

CLUSTER_BACKENDS = ("auto", "trainjob", "pytorchjob")
MLFLOW_CLIENT_SECRET = "ctpipe-mlflow-client"
MLFLOW_BASIC_AUTH = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
MLFLOW_TOKEN = "MLFLOW_TRACKING_TOKEN"
# A cluster pipeline trains in a Kubeflow job (a TrainJob where Trainer v2 is installed, else a PyTorchJob,
# found when the train step runs), and reaches the MLflow server of manifests/ with the credentials of the
# secret manifests/secrets creates: a laptop's defaults would train inside the 1-CPU step pod and meet 401.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "train": {"backend": "auto"},
    "kubernetes": {"env_from_secrets": {MLFLOW_CLIENT_SECRET: list(MLFLOW_BASIC_AUTH)}},
}
# The tabular demo's split key (``ctpipe demo-data``'s customer table).
DEMO_KEY_COLUMN = "customer_id"
# A ';' separates run overrides only where another SECTION.FIELD= follows, so a value keeps its own ';' (a URI).
_NEXT_SETTING = re.compile(r";(?=\s*[A-Za-z_]\w*\.[\w.]+\s*=)")


@dataclass
class ResolvedConfig:
    """A resolved config and, for every setting a layer gave, that layer's name (``--set``, ``file my.yaml``)."""

    config: Config
    origins: dict[str, str] = field(default_factory=dict)

    def origin_of(self, path: str) -> str:
        """The layer that set ``path`` (``train.max_steps``): the nearest given path at or above it."""
        parts = path.split(".")
        for end in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:end]))
            if found:
                return found
        return "defaults"


def resolve_config(**sources: Any) -> Config:
    """The run's config from every layer ``sources`` name (``resolve_layers``'s keywords)."""
    return resolve_layers(**sources).config


def load_config(file: str | Path | None = None, settings: Iterable[str] | None = None, **sources: Any) -> Config:
    """``resolve_config(file=file, settings=settings, ...)``: a config file and ``--set`` settings over the
    defaults and the named task's own."""
    return resolve_layers(file=file, settings=list(settings or []), **sources).config


def resolve_layers(
    *,
    file: str | Path | None = None,
    settings: Sequence[str] | None = (),
    target: Target = "local",
    check_target: bool = True,
    data_uri: str | None = None,
    demo: bool = False,
    compiled: str | None = None,
    config_json: str = "",
    run_form: Mapping[str, Any] | None = None,
    overrides: str | Sequence[str] = (),
) -> ResolvedConfig:
    """Apply the layers in the module's order and validate the result as a whole ``Config``.

    ``file``, ``settings``: ``--config`` and ``--set``. ``target="cluster"`` adds the cluster defaults and
    refuses a config that cannot run on a cluster (unless ``check_target`` is false: ``ctpipe render-job``).
    ``data_uri``: the data, whose columns decide the task key layer; ``demo``: it is the task's demo data.
    ``compiled`` (a compiled pipeline's config JSON) starts a run's resolution instead: ``config_json``
    (the run's own, if any), the ``run_form`` knob values and the run's ``overrides`` (lines, or ``;``-
    separated settings, or a list)."""
    if compiled is not None or config_json.strip() or run_form is not None or overrides:
        if file is not None or settings or data_uri is not None or demo or target != "local":
            raise ValueError("a run's layers (compiled, config_json, run_form, overrides) start from a compiled "
                             "config: give them without file, settings, data_uri, demo or target")
        return _resolve_run(compiled or "", config_json, run_form, overrides)
    user = [_file_layer(file)] if file is not None else []
    user.append(_Layer("--set", settings=tuple(settings or ())))
    cluster = [_Layer("cluster", values=copy.deepcopy(CLUSTER_DEFAULTS))] if target == "cluster" else []
    # The task is named by the layers above and below its own: resolve them once without it.
    named = _merged([*cluster, *user])
    task = _load_task(build_dataclass(TaskConfig, named.values["task"], "task"))
    task_layer = [_Layer(f"task {task.name}", settings=tuple(task.defaults))] if task is not None else []
    data_layers = []
    if data_uri is not None and task is not None:
        key = _task_key_setting(task, named.values, data_uri)
        data_layers += [_Layer("task key", settings=key)] if key else []
    if demo:
        data_layers.append(_Layer("demo", settings=demo_settings(task)))
    resolved = _merged([*task_layer, *cluster, *data_layers, *user])
    config = Config.from_dict(resolved.values)
    if target == "cluster" and check_target:
        check_cluster_config(config)
    return ResolvedConfig(config, resolved.origins)


def demo_settings(task: Any) -> tuple[str, ...]:
    """The settings that go with the task's demo data: its own ``demo_settings``, else the tabular demo's key."""
    if task is None or task.demo is None:
        return (f"data.key={DEMO_KEY_COLUMN}",)
    return tuple(task.demo.settings)


def split_overrides(overrides: str | Sequence[str]) -> list[str]:
    """A run's ``config_overrides`` as settings: one per line, or ``;``-separated where another
    ``section.field=`` follows (a ``;`` inside a value, e.g. a URI's, stays)."""
    lines = overrides.splitlines() if isinstance(overrides, str) else list(overrides)
    return [s.strip() for line in lines for s in _NEXT_SETTING.split(line) if s.strip()]


def check_cluster_config(config: Config) -> None:
    """Raise a ConfigError naming the field when ``config`` cannot run as a cluster pipeline."""
    backend = config.train.backend
    if backend not in CLUSTER_BACKENDS:
        raise ConfigError(
            f"invalid config value for 'train.backend' in a cluster pipeline: {backend!r}. The train step would "
            "train inside its own step pod (1 CPU, 2Gi: it only launches and follows jobs). Use 'auto' (the default "
            "when compiling: TrainJob where Kubeflow Trainer v2 is installed, else PyTorchJob), 'trainjob' or "
            "'pytorchjob', or leave train.backend unset; 'local' is for `ctpipe run`."
        )
    exposed = {key for keys in config.kubernetes.env_from_secrets.values() for key in keys}
    if not (set(MLFLOW_BASIC_AUTH) <= exposed or MLFLOW_TOKEN in exposed):
        given = dict(config.kubernetes.env_from_secrets) or "{}"
        raise ConfigError(
            f"invalid config value for 'kubernetes.env_from_secrets' in a cluster pipeline: {given} gives the steps "
            f"and the training pods no MLflow credentials (needs {' and '.join(MLFLOW_BASIC_AUTH)}, or "
            f"{MLFLOW_TOKEN}), so the MLflow server of manifests/ would answer 401. Use the secret "
            f"manifests/secrets creates: {{{MLFLOW_CLIENT_SECRET}: [{', '.join(MLFLOW_BASIC_AUTH)}]}} (the default "
            "when unset), or name your own secret with those keys."
        )


# -- layers ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """One layer: a mapping (as a file holds) and/or ``section.key=value`` settings (as ``--set`` gives)."""

    name: str
    values: dict[str, Any] | None = None
    settings: tuple[str, ...] = ()


@dataclass
class _Merged:
    values: dict[str, Any]
    origins: dict[str, str]


def _file_layer(path: str | Path) -> _Layer:
    return _Layer(f"file {path}", values=read_config_file(Path(path)))


def _merged(layers: Sequence[_Layer], base: dict[str, Any] | None = None, origins: dict[str, str] | None = None) -> _Merged:
    """``layers`` over ``base`` (ctpipe's defaults), recording the paths each layer gave."""
    values = base if base is not None else Config().to_dict()
    origins = dict(origins or {})
    for layer in layers:
        if layer.values is not None:
            values = merge_mapping(values, layer.values)
            for path in _leaf_paths(layer.values):
                _record(origins, path, layer.name)
        for setting in layer.settings:
            values = apply_settings(values, [setting])
            _record(origins, setting.partition("=")[0].strip(), layer.name)
    return _Merged(values, origins)


def _record(origins: dict[str, str], path: str, layer: str) -> None:
    # A path given again hides what was recorded under it (a whole mapping replaced, or set anew).
    for known in [p for p in origins if p.startswith(path + ".")]:
        del origins[known]
    origins[path] = layer


def _leaf_paths(values: Mapping[str, Any]) -> list[str]:
    """The ``section.field`` paths a file's mapping gives (a mapping field, e.g. ``evaluate.thresholds``, is
    given whole: it replaces the one below)."""
    return [f"{section}.{name}" for section, body in values.items() if isinstance(body, dict) for name in body]


def _load_task(task_config: TaskConfig) -> Any:
    """The task ``task_config`` names, or None when it cannot be loaded here (a user's package not installed
    where the pipeline is compiled: the steps load it and report it)."""
    from ctpipe.components.tasks.registry import TaskError, load_task, task_record

    try:
        return load_task(task_record(task_config))
    except TaskError:
        return None


def _task_key_setting(task: Any, values: Mapping[str, Any], data_uri: str) -> tuple[str, ...]:
    """``data.key=COLUMN`` when the task declares a key column that the data has and no layer sets a key:
    ``ctpipe run --data TEXT --task causal_lm`` splits by document, not by the profiled identifier."""
    column = task.codec.key_column
    if not column or values["data"].get("key") is not None:
        return ()
    from ctpipe.components.lib.data.files import data_columns

    return (f"data.key={column}",) if column in data_columns(data_uri) else ()


# -- a compiled pipeline's run ---------------------------------------------------------------------------


def _resolve_run(compiled: str, config_json: str, run_form: Mapping[str, Any] | None,
                 overrides: str | Sequence[str]) -> ResolvedConfig:
    # Not compiled (a component run alone): the defaults with the default task's own, as `ctpipe run` resolves them.
    compiled_config = Config.from_json(compiled) if compiled.strip() else resolve_config()
    own = config_json.strip()
    base = Config.from_json(config_json).to_dict() if own else compiled_config.to_dict()
    origins = {section: "config_json" if own else "compiled" for section in base}
    form = _Layer("run form", settings=tuple(knob_settings(run_form or {}, form_defaults(compiled_config), base)))
    settings = tuple(split_overrides(overrides))
    with_form = _merged([form], base, origins)
    resolved = _merged([_Layer("overrides", settings=settings)], with_form.values, with_form.origins)
    if resolved.values["task"] != with_form.values["task"]:
        moved = _with_task_defaults_of(with_form.values, resolved.values["task"])
        resolved = _merged([_Layer("overrides", settings=settings)], moved, with_form.origins)
    config = Config.from_dict(resolved.values)
    compiled_backend = base["train"]["backend"]
    if compiled_backend != "local" and config.train.backend == "local":
        raise ConfigError(
            f"invalid run override 'train.backend=local': this pipeline was compiled for a cluster "
            f"(train.backend={compiled_backend}), where a local backend would train inside the train step's own "
            "1-CPU pod. Allowed at run time: 'auto', 'trainjob' or 'pytorchjob'; run `ctpipe run` for local training."
        )
    if config.tune.trials > 0 and compiled_config.tune.trials == 0:
        raise ConfigError(
            f"invalid run override 'tune.trials={config.tune.trials}': this pipeline was compiled without a tune step "
            "(tune.trials=0), and the steps of a pipeline are fixed when it is compiled. Compile one with "
            "tune.trials > 0 (`ctpipe compile --set tune.trials=N`); a run of it may then set tune.trials=0 to skip "
            "the search."
        )
    return ResolvedConfig(config, resolved.origins)


_ABSENT = object()


def _task_defaults_of(values: dict[str, Any]) -> tuple[str, ...]:
    task = _load_task(build_dataclass(TaskConfig, values["task"], "task"))
    return tuple(task.defaults) if task is not None else ()


def _with_task_defaults_of(compiled: dict[str, Any], task_values: dict[str, Any]) -> dict[str, Any]:
    """``compiled`` (values that hold their task's ``config_defaults``) moved to the task of ``task_values``:
    every setting of the compiled task's defaults that still has that default goes back to ctpipe's own
    value, then the new task's ``config_defaults`` apply. Settings the user chose stay."""
    own = Config().to_dict()
    old_settings = _task_defaults_of(compiled)
    with_old = Config.from_dict(apply_settings(own, list(old_settings))).to_dict()  # normalised as compiled
    values = copy.deepcopy(compiled)
    for setting in old_settings:
        path = setting.partition("=")[0].strip().split(".")
        if _get(values, path) == _get(with_old, path):
            _put(values, path, _get(own, path))
    return apply_settings(values, list(_task_defaults_of({**values, "task": task_values})))


def _get(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _put(values: dict[str, Any], path: list[str], value: Any) -> None:
    node = values
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if value is _ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)
