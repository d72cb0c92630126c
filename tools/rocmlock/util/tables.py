"""rocmlock's data tables (``tools/rocmlock/data/*.toml``): reading one, naming a key, checking its key set.

A team edits these tables to add a GPU target, a ROCm component or an upstream. Each table's module validates its
rows with these helpers and :func:`rocmlock.errors.expect_type`, once, where the table is read, so a mistake is one
line naming the file, the key and what to write there (exit 2), never a traceback or a recipe's render error.
"""

from __future__ import annotations

import difflib
import json
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rocmlock.errors import InputError, expect_type
from rocmlock.util.toml import tomllib

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
Part = str | int
_Choice = TypeVar("_Choice", bound=str)


def read_toml(path: Path, shown: str | None = None) -> dict[str, Any]:
    """The table at ``path``; an InputError naming it (``shown``, else ``path``) when it is missing, unreadable or
    not TOML."""
    where = shown or path
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{where}: not found", hint=f"restore tools/rocmlock/data/{path.name} from git") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read: {exc}",
                         hint="check its permissions, or restore it from git") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML: {exc}", hint="fix the syntax, or restore it from git") from None


def key(*parts: Part) -> str:
    """A key as an error names it: dotted, a part that is no bare key quoted, a list position in brackets
    (``runtime."7.2"``, ``pairing[1].kind``)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = part if _BARE_KEY.fullmatch(part) else json.dumps(part)
        out = f"{out}.{text}" if out else text
    return out


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the nearest of ``choices`` when one is close, else ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_keys(table: Mapping[str, Any], path: Path, where: tuple[Part, ...], takes: Sequence[str],
               required: Sequence[str], what: str, hint: Callable[[str], str], suggest: bool = True) -> None:
    """``table`` (at ``where``) has no key outside ``takes`` and every key of ``required``.

    ``what`` names the table in the error (``a GPU target row``); ``hint(key)`` says what to write for a missing one.
    ``suggest``: name the nearest key of ``takes`` (a typo); off where the key is another kind's, not a typo.
    """
    for name in table:
        if name not in takes:
            nearest = did_you_mean(name, takes) if suggest else ""
            raise InputError(f"{path}: key '{key(*where, name)}' is not one {what} takes{nearest}",
                             hint=f"its keys: {', '.join(takes)}")
    for name in required:
        if name not in table:
            raise InputError(f"{path}: key '{key(*where, name)}' is missing", hint=hint(name))


def expect_match(value: Any, pattern: re.Pattern[str], path: Path, name: str, what: str) -> str:
    """``value`` when it is a string ``pattern`` matches whole; else an InputError naming the key and ``what``."""
    text: str = expect_type(value, str, path, name, what)
    if not pattern.fullmatch(text):
        raise InputError(f"{path}: key '{name}' must be {what}, got {text!r}", hint=f"make it {what}")
    return text


def expect_choice(value: Any, choices: Iterable[_Choice], path: Path, name: str) -> _Choice:
    """``value`` when it is one of ``choices`` (typed as they are: a ``Literal`` alias stays one); else an
    InputError listing them."""
    options = list(choices)
    what = f"one of {', '.join(json.dumps(c) for c in options)}"
    text = expect_type(value, str, path, name, what)
    for option in options:
        if option == text:
            return option
    raise InputError(f"{path}: key '{name}' must be {what}, got {text!r}", hint=f"make it {what}")


def expect_whole(value: Any, path: Path, name: str, minimum: int | None = None) -> int:
    """``value`` when it is an integer (not a bool) of at least ``minimum``; else an InputError."""
    what = "a whole number" + (f" from {minimum}" if minimum is not None else "")
    number: int = expect_type(value, int, path, name, what)
    if minimum is not None and number < minimum:
        raise InputError(f"{path}: key '{name}' must be {what}, got {number}", hint=f"make it {what}")
    return number


def check_placeholders(text: str, allowed: Sequence[str], path: Path, name: str) -> None:
    """Every ``{placeholder}`` of the template ``text`` is one of ``allowed`` (what its reader fills in), so
    ``str.format`` cannot fail on it later."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        raise InputError(f"{path}: key '{name}' is not a valid template: {exc}",
                         hint="write a placeholder as {version}, a literal brace as {{ or }}") from None
    for field in fields:
        if field not in allowed:
            raise InputError(f"{path}: key '{name}': {{{field}}} is no placeholder here{did_you_mean(field, allowed)}",
                             hint=f"its placeholders: {', '.join('{' + a + '}' for a in allowed)}")


def expect_unique(seen: dict[str, str], value: str, path: Path, name: str, what: str) -> None:
    """Record ``value`` for key ``name`` in ``seen``; an InputError when another key already has it."""
    if value in seen:
        raise InputError(f"{path}: key '{name}': {what} {value!r} is already {seen[value]}'s",
                         hint="each entry must be unique: remove the duplicate, or fix a copied row")
    seen[value] = name
