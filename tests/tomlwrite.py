"""Write a parsed TOML table back (one value changed): the data-table tests feed every key a wrong value this way."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (inline tables for tables): enough to write a table back with one change."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"


def write_toml(path: Path, data: dict[str, Any]) -> Path:
    """``data`` written to ``path`` as one ``key = value`` line per top-level key (JSON strings are TOML strings)."""
    path.write_text("".join(f"{json.dumps(key)} = {toml_value(value)}\n" for key, value in data.items()))
    return path


def changed(data: dict[str, Any], key: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``key`` (a path into it) set to ``value``, or deleted when value is ...."""
    out: dict[str, Any] = json.loads(json.dumps(data))
    parent: Any = out
    for part in key[:-1]:
        parent = parent[part]
    if value is ...:
        del parent[key[-1]]
    else:
        parent[key[-1]] = value
    return out
