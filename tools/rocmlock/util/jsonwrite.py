"""``json.dumps(data, indent=2)``'s text, written faster (issue 40: ``rocmlock lock --json`` prints pixi's diff of
every package, megabytes of JSON, and ``json`` leaves its C encoder for its pure-Python one whenever ``indent`` is
given).

Only plain data is written here: dicts with string keys, lists and tuples, strings, ints, booleans and None; strings
go through ``json``'s own (C) ``encode_basestring_ascii``, the function ``json.dumps`` uses with ``ensure_ascii``.
Anything else (a float, another key type, a subclass of int) sends the whole value to ``json.dumps`` itself, so the
text is ``json.dumps``'s in every case (tests/test_json_write.py compares the two).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii
from typing import Any


class _Fallback(Exception):
    """A value left to ``json.dumps``."""


def dumps_indented(data: Any, indent: int = 2) -> str:
    """``json.dumps(data, indent=indent)``. A dict that appears several times at one depth (a package entry every
    GPU environment shares) is encoded once."""
    try:
        return _encode(data, "\n", " " * indent, {})
    except _Fallback:
        return json.dumps(data, indent=indent)


def _encode(value: Any, newline: str, step: str, seen: dict[tuple[int, int], str]) -> str:
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return int.__repr__(value)
    inner = newline + step
    if kind is dict:
        if not value:
            return "{}"
        done = seen.get((id(value), len(newline)))  # the dict is alive (in ``data``) for the whole call
        if done is not None:
            return done
        parts = []
        for key, item in value.items():
            if type(key) is not str:
                raise _Fallback
            text = encode_basestring_ascii(item) if type(item) is str else _encode(item, inner, step, seen)
            parts.append(f"{encode_basestring_ascii(key)}: {text}")
        done = seen[(id(value), len(newline))] = f"{{{inner}{(',' + inner).join(parts)}{newline}}}"
        return done
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        items: Iterable[str]
        if all(type(item) is str for item in value):
            items = map(encode_basestring_ascii, value)
        else:
            items = (_encode(item, inner, step, seen) for item in value)
        return f"[{inner}{(',' + inner).join(items)}{newline}]"
    raise _Fallback
