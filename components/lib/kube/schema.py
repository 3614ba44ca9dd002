"""Strict validation of an object against a CRD's structural OpenAPI v3 schema.

A real API server with ``fieldValidation=Strict`` rejects unknown fields; the CRD schemas do not say
``additionalProperties: false``, so plain JSON-schema validation lets a misplaced field through (the
old KFP launcher's ``spec.ttlSecondsAfterFinished``). Here every schema that lists ``properties`` is
closed unless it carries ``x-kubernetes-preserve-unknown-fields: true``.
"""

from __future__ import annotations

import re
from typing import Any

INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

# ObjectMeta is not in CRD schemas (the API server validates it itself); the fields a client may set.
OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def _name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )


def validate_strict(obj: Any, schema: dict[str, Any], *, root_meta: bool = True) -> list[str]:
    """Every violation of ``schema`` by ``obj`` as ``path: problem``; empty when the object is valid."""
    errors: list[str] = []
    if root_meta and isinstance(schema.get("properties"), dict) and "metadata" in schema["properties"]:
        schema = {**schema, "properties": {**schema["properties"], "metadata": OBJECT_META_SCHEMA}}
    _check(obj, schema, "", errors)
    return errors


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    where = path or "<root>"
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{where}: null is not allowed")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (_type_ok(value, "integer") or isinstance(value, str)):
            errors.append(f"{where}: expected an integer or a string, got {_name(value)}")
            return
    elif "type" in schema and not _type_ok(value, schema["type"]):
        errors.append(f"{where}: expected {schema['type']}, got {_name(value)} {value!r:.60}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = INT_RANGES.get(schema.get("format", ""), (None, None))
        low = schema.get("minimum", low)
        high = schema.get("maximum", high)
        if (low is not None and value < low) or (high is not None and value > high):
            errors.append(f"{where}: {value} is out of range [{low}, {high}]")
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)
    elif isinstance(value, list):
        _check_array(value, schema, path, errors)


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str, errors: list[str]) -> None:
    where = path or "<root>"
    for key in schema.get("required", []):
        if key not in value:
            errors.append(f"{_join(path, key)}: required field is missing")
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        if properties is not None and key in properties:
            _check(item, properties[key], _join(path, key), errors)
        elif isinstance(extra, dict):
            _check(item, extra, _join(path, key), errors)
        elif extra is True or preserve:
            continue
        elif properties is not None:
            allowed = ", ".join(sorted(properties))
            errors.append(f"{_join(path, key)}: unknown field (strict validation); allowed in {where}: {allowed}")
        # A bare `type: object` without properties is a free-form map in structural schemas.


def _check_array(value: list[Any], schema: dict[str, Any], path: str, errors: list[str]) -> None:
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(item, items, _join(path, index), errors)
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: needs at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: allows at most {schema['maxItems']} items")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[tuple] = set()
        for index, item in enumerate(value):
            if isinstance(item, dict):
                ident = tuple(repr(item.get(k)) for k in keys)
                if ident in seen:
                    errors.append(f"{_join(path, index)}: duplicate entry for key {dict(zip(keys, ident, strict=True))}")
                seen.add(ident)
    elif list_type == "set":
        reprs = [repr(v) for v in value]
        if len(set(reprs)) != len(reprs):
            errors.append(f"{path}: duplicate items in a set")
