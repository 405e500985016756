"""The JSON vocabulary of the ``nuna-jax`` command (docs/json.md) as a JSON Schema, and a validator.

``cli.schema.json`` (JSON Schema draft 2020-12) holds one schema per command under ``$defs``
(``#/$defs/estimate``, ``#/$defs/info``, ...) and the vocabulary every command's output obeys
(``#/$defs/vocabulary``: no retired key names, canonical policy names, counts as integers).
:func:`validate` checks an object against one of them with the subset of JSON Schema the file
uses (``type``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``,
``const``, ``$ref``, ``allOf``, ``anyOf``, ``not``, ``propertyNames``, ``minimum``, ``minItems``), so
that no schema package is needed; any full validator (``jsonschema``) accepts the same file.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = ["schema", "validate", "check", "SCHEMA_PATH"]

SCHEMA_PATH = Path(__file__).with_name("cli.schema.json")

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


@lru_cache(maxsize=1)
def schema() -> dict:
    """The schema file, parsed."""
    return json.loads(SCHEMA_PATH.read_text())


def _resolve(root: dict, ref: str) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def validate(obj, ref: str, root: dict | None = None) -> list[str]:
    """Errors (``"$.path: message"``) of ``obj`` against the schema at ``ref`` (e.g. ``"#/$defs/info"``);
    empty when it conforms."""
    root = schema() if root is None else root
    errors: list[str] = []
    _check(obj, _resolve(root, ref), root, "$", errors)
    return errors


def check(obj, command: str) -> None:
    """``AssertionError`` listing every error of ``obj`` against ``#/$defs/<command>``."""
    errs = validate(obj, f"#/$defs/{command}")
    if errs:
        raise AssertionError(f"{command}: {len(errs)} schema error(s):\n  " + "\n  ".join(errs[:40]))


def _check(v, s, root, path, errors) -> None:
    if s is True or s == {}:
        return
    if s is False:
        errors.append(f"{path}: not allowed")
        return
    if "$ref" in s:
        _check(v, _resolve(root, s["$ref"]), root, path, errors)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[t](v) for t in types):
            errors.append(f"{path}: {type(v).__name__} {json.dumps(v)[:60]} is not {' or '.join(types)}")
            return
    if "const" in s and v != s["const"]:
        errors.append(f"{path}: {v!r} is not {s['const']!r}")
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{path}: {v!r} is not one of {s['enum']}")
    if "minimum" in s and _TYPES["number"](v) and v < s["minimum"]:
        errors.append(f"{path}: {v} < minimum {s['minimum']}")
    for sub in s.get("allOf", ()):
        _check(v, sub, root, path, errors)
    if "anyOf" in s:
        if not any(not _errors(v, sub, root, path) for sub in s["anyOf"]):
            errors.append(f"{path}: matches none of anyOf: " + " | ".join(
                "; ".join(_errors(v, sub, root, path)[:2]) for sub in s["anyOf"]))
    if "not" in s and not _errors(v, s["not"], root, path):
        errors.append(f"{path}: {json.dumps(v)[:60]} matches a 'not' schema")
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", ()):
            if k not in v:
                errors.append(f"{path}: missing key {k!r}")
        for k, x in v.items():
            if "propertyNames" in s:
                for e in _errors(k, s["propertyNames"], root, f"{path}.{k}"):
                    errors.append(f"{path}: key {k!r} is not allowed ({e})")
            if k in props:
                _check(x, props[k], root, f"{path}.{k}", errors)
            elif "additionalProperties" in s:
                _check(x, s["additionalProperties"], root, f"{path}.{k}", errors)
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            errors.append(f"{path}: fewer than {s['minItems']} items")
        if "items" in s:
            for i, x in enumerate(v):
                _check(x, s["items"], root, f"{path}[{i}]", errors)


def _errors(v, s, root, path) -> list[str]:
    out: list[str] = []
    _check(v, s, root, path, out)
    return out
