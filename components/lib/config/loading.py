"""Read one layer of a config: a YAML/JSON file's sections, or ``--set section.field=value`` settings.

    values = apply_settings(values, ["train.max_steps=200", "evaluate.thresholds={}"])
    values = merge_mapping(values, read_config_file(Path("my.yaml")))

A mapping given in full (in a file, or as one ``--set`` value) replaces the mapping below it; unknown
sections and keys are refused before anything is merged, so none is silently dropped. Which layers a run
has, and in what order, is ``ctpipe.components.run_config.resolve``'s alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ctpipe.components.lib.config.sections import Config
from ctpipe.components.lib.errors import ConfigError


def merge_mapping(values: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` (a file's sections, checked for unknown keys) merged over ``values``; a mapping field it
    gives whole (``thresholds: {}``) replaces the one in ``values``."""
    _reject_unknown(mapping)
    return _replace_whole_maps(merge_values(values, mapping), mapping)


def apply_settings(values: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """``section.key=value`` settings over ``values``: a value merges into a mapping, except that
    ``section.mapping=...`` (e.g. ``evaluate.thresholds={}``) names a whole mapping and replaces it.
    Settings apply in order, so ``evaluate.thresholds={}`` then ``evaluate.thresholds.auc.value=0.7`` keeps
    the auc rule (the whole mapping first, then the key into it)."""
    for assignment in settings:
        one: dict[str, Any] = {}
        apply_override(one, assignment)
        _reject_unknown(one)
        values = merge_values(values, one)
        if len(assignment.partition("=")[0].strip().split(".")) == 2:
            values = _replace_whole_maps(values, one)
    return values


def read_config_file(p: Path) -> dict[str, Any]:
    """The sections of the YAML/JSON config file at ``p``, refused with its name when unreadable, not a mapping,
    or holding an unknown section or key, or one key twice."""
    if not p.is_file():
        raise ConfigError(f"config file '{p}' does not exist; pass an existing YAML or JSON file to --config")
    text = p.read_text()
    try:
        # JSON first: YAML 1.1 reads JSON's 1e-05 as text and refuses tab indentation.
        loaded = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError:
        loaded = None
    except _DuplicateKey as err:
        raise ConfigError(f"config file '{p}': {err}; give each key once") from None
    try:
        loaded = loaded if loaded is not None else (yaml.load(text, Loader=_UniqueKeyLoader) or {})
    except _DuplicateKey as err:
        raise ConfigError(f"config file '{p}': {err}; give each key once") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file '{p}' is not valid YAML/JSON: {err}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file '{p}' must hold a mapping of sections, got {type(loaded).__name__}")
    try:
        _reject_unknown(loaded)
    except ConfigError as err:
        raise ConfigError(f"config file '{p}': {err}") from None
    return loaded


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key {key!r} is given more than once")
        out[key] = value
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool | None):
                continue  # an unhashable key: SafeLoader reports it
            if key in seen:
                raise _DuplicateKey(f"key {key!r} is given more than once (again at line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads 1e-5 (no dot) as text; YAML 1.2 and JSON read it as a number, as a user means it.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def parse_set_value(text: str) -> Any:
    """Parse the value of ``--set key=value`` as YAML (numbers, booleans, lists, null), else keep text."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader) if text != "" else ""
    except _DuplicateKey as err:
        raise ConfigError(f"invalid --set value {text!r}: {err}; give each key once") from None
    except yaml.YAMLError:
        return text


def apply_override(values: dict[str, Any], assignment: str) -> None:
    """Apply one ``section.field[.key]=value`` assignment to a nested dict of config values."""
    if "=" not in assignment:
        raise ConfigError(f"invalid --set '{assignment}': expected KEY=VALUE, e.g. train.max_steps=200")
    key, _, raw = assignment.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(
            f"invalid --set key '{key}': expected SECTION.FIELD, e.g. train.max_steps; sections: "
            + ", ".join(f.name for f in dataclasses.fields(Config))
        )
    node = values
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"invalid --set key '{key}': '{part}' is a value, not a section")
        node = child
    value = parse_set_value(raw)
    # A text field keeps the text as typed: YAML would read a split salt "01" as 1, "no" as False and drop a
    # "#..." as a comment. Quoted text and null keep their YAML meaning; a list or mapping is refused.
    if isinstance(value, str | int | float) and _is_text(_hint_at(parts)) and not raw.strip().startswith(("'", '"')):
        value = raw.strip()
    node[parts[-1]] = value


def _hint_at(parts: list[str]) -> Any:
    """The type hint of the config field at ``parts`` (e.g. data.split_salt, kubernetes.node_selector.pool)."""
    hint: Any = Config
    for part in parts:
        if dataclasses.is_dataclass(hint):
            hint = typing.get_type_hints(hint).get(part)
        elif typing.get_origin(hint) is dict:
            hint = typing.get_args(hint)[1]
        else:
            return None
    return hint


def _is_text(hint: Any) -> bool:
    """A text field, or a list of texts (given as one comma-separated text on the command line)."""
    return hint is str or hint == list[str] or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                                                and set(typing.get_args(hint)) == {str, type(None)})


def merge_values(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = merge_values(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _map_fields() -> set[tuple[str, str]]:
    """(section, field) pairs whose type is a mapping, e.g. evaluate.thresholds."""
    out = set()
    for section in dataclasses.fields(Config):
        hint = typing.get_type_hints(Config)[section.name]
        for name, field_hint in typing.get_type_hints(hint).items():
            if typing.get_origin(field_hint) is dict:
                out.add((section.name, name))
    return out


def _replace_whole_maps(values: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    # A mapping given in full (in a file, or as one --set value) replaces the default mapping, so
    # `thresholds: {}` really means "no thresholds" instead of keeping the default ones.
    for section, name in _map_fields():
        if isinstance(given.get(section), dict) and name in given[section]:
            values[section][name] = given[section][name]
    return values


def _reject_unknown(values: dict[str, Any]) -> None:
    # Validate keys eagerly so an unknown key is reported even if merging would hide it.
    sections = {f.name: f for f in dataclasses.fields(Config)}
    for name, section in values.items():
        if name not in sections:
            raise ConfigError(f"unknown config section '{name}'; allowed: {', '.join(sections)}")
        if isinstance(section, dict):
            hint = typing.get_type_hints(Config)[name]
            allowed = {f.name for f in dataclasses.fields(hint)}
            for key in section:
                if key not in allowed:
                    raise ConfigError(
                        f"unknown config key '{name}.{key}'; allowed keys in {name}: {', '.join(sorted(allowed))}"
                    )
