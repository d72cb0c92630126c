"""The block YAML of conda-lock.yml, written directly: the bytes PyYAML's ``safe_dump(data, sort_keys=False,
default_flow_style=False, width=1000)`` writes for the same data, at a fraction of its cost (issue 40: PyYAML's
pure-Python emitter took 58 % of a lock of four GPU environments).

Only the shapes conda-lock.yml has are written here: mappings with string keys, lists, strings, ints and bools.
A string is written plain, or single-quoted, by PyYAML's rules (``yaml.emitter.Emitter.analyze_scalar`` and
``choose_scalar_style``, PyYAML 6.0) for the strings those rules decide simply: printable ASCII of at most
:data:`FAST_LIMIT` characters. Anything else (a non-ASCII or control character, a long string PyYAML might fold
at its width, an empty or long key, another type) sends the whole document to ``yaml.safe_dump`` itself, so the
output is PyYAML's in every case (tests/test_yaml_write.py compares the two on generated strings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A scalar PyYAML may fold is one whose line passes its width (1000) at a space; with at most 4 columns of
# indentation and a key of at most KEY_LIMIT characters, a value of FAST_LIMIT never gets there.
FAST_LIMIT = 800
KEY_LIMIT = 100  # PyYAML writes a key of 128 characters or more as an explicit `? key`
_FIRST = frozenset("#,[]{}&*!|>'\"%@`")  # an indicator as the first character: never plain
_STR = "tag:yaml.org,2002:str"
_cache: dict[tuple[str, bool], str | None] = {}


class _Fallback(Exception):
    """A value the direct writer leaves to PyYAML."""


_resolve: Any = None  # PyYAML's resolver's ``resolve`` for a plain scalar, made on first use


def _resolves_to_str(text: str) -> bool:
    global _resolve
    if _resolve is None:  # here: unpack on a node (the installer bundle) imports the exports without PyYAML
        from functools import partial

        from yaml import ScalarNode
        from yaml.resolver import Resolver

        # One resolver for every string: without path resolvers (SafeDumper's have none) it keeps no state.
        _resolve = partial(Resolver().resolve, ScalarNode)
    return bool(_resolve(text, (True, False)) == _STR)


def _plain(text: str) -> bool:
    """Whether PyYAML writes the printable ASCII ``text`` (not empty, no surrounding space) plain in block style."""
    first = text[0]
    if first in _FIRST or (first in "?:-" and (len(text) == 1 or text[1] == " ")):
        return False
    if text.startswith(("---", "...")) or ": " in text or text.endswith(":") or " #" in text:
        return False
    return _resolves_to_str(text)  # else a quoted string: `'1.0'`, `'on'`, `'null'`, `''`


def _style(text: str, key: bool) -> str | None:
    if len(text) > (KEY_LIMIT if key else FAST_LIMIT) or not text.isascii() or not text.isprintable():
        return None
    if not text:
        return None if key else "''"
    if text[0] != " " and text[-1] != " " and _plain(text):
        return text
    return "'" + text.replace("'", "''") + "'"


def _scalar(text: str, key: bool = False) -> str:
    found = _cache.get((text, key), "")
    if found == "":
        found = _cache[(text, key)] = _style(text, key)
    if found is None:
        raise _Fallback
    return found


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _scalar(value)
    raise _Fallback


def _mapping(data: Mapping[str, Any], indent: str, out: list[str], first_prefix: str | None = None) -> None:
    for i, (key, value) in enumerate(data.items()):
        if not isinstance(key, str):
            raise _Fallback
        lead = first_prefix if i == 0 and first_prefix is not None else indent
        head = f"{lead}{_scalar(key, key=True)}:"
        kind = type(value)
        if kind is str:  # the common case first, without an ABC check
            out.append(f"{head} {_scalar(value)}")
        elif kind is dict or (kind is not list and isinstance(value, Mapping)):
            if not value:
                out.append(f"{head} {{}}")
                continue
            out.append(head)
            _mapping(value, indent + "  ", out)
        elif kind is list or isinstance(value, list):
            if not value:
                out.append(f"{head} []")
                continue
            out.append(head)
            _sequence(value, indent, out)  # PyYAML does not indent a list that is a mapping's value
        else:
            out.append(f"{head} {_value(value)}")


def _sequence(items: list[Any], indent: str, out: list[str]) -> None:
    for item in items:
        if type(item) is str:
            out.append(f"{indent}- {_scalar(item)}")
        elif isinstance(item, Mapping) and item:
            _mapping(item, indent + "  ", out, first_prefix=f"{indent}- ")
        elif isinstance(item, (Mapping, list)):
            raise _Fallback
        else:
            out.append(f"{indent}- {_value(item)}")


def render_item(item: Mapping[str, Any]) -> str | None:
    """The lines of the non-empty mapping ``item`` as an item of a top-level block sequence (``- key: value``
    ...), each ending in a newline; None when PyYAML would decide a string of it (:func:`render_yaml` then writes
    the whole document with it). A caller that writes one item many times keeps its text (conda-lock.yml's
    packages, once per lock: rocmlock.lock.condalock)."""
    out: list[str] = []
    try:
        _mapping(item, "  ", out, first_prefix="- ")
    except _Fallback:
        return None
    return "\n".join(out) + "\n"


def render_yaml(data: Mapping[str, Any]) -> str:
    """``data`` (a non-empty mapping) as ``yaml.safe_dump(data, sort_keys=False, default_flow_style=False,
    width=1000)`` writes it."""
    out: list[str] = []
    try:
        _mapping(data, "", out)
    except _Fallback:
        import yaml  # here: unpack on a node (the installer bundle) imports the exports without PyYAML

        return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000))
    return "\n".join(out) + "\n"
