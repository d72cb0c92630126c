"""Exceptions that render their own user-facing message.

Core code raises these; only the CLI turns them into a message and an exit code
(2 for bad input, 1 for an operation that failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, overload

_T = TypeVar("_T")
_U = TypeVar("_U")


class RocmlockError(Exception):
    """Base class: ``str(err)`` is the one-line message, ``hint`` the fix, ``details`` lines printed below it
    (a solver's explanation: each printed on a line of its own, never joined into the message)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def __str__(self) -> str:
        return self.message


class InputError(RocmlockError):
    """The user's input (manifest, flags, recipe) is wrong: exit code 2."""

    exit_code = 2


class OperationError(RocmlockError):
    """A well-formed request failed (solve, build, network): exit code 1."""

    exit_code = 1


@overload
def expect_type(value: object, kind: type[_T], path: Path, key: str, what: str) -> _T: ...
@overload
def expect_type(value: object, kind: tuple[type[_T], type[_U]], path: Path, key: str,
                what: str) -> _T | _U: ...


def expect_type(value: Any, kind: type | tuple[type, ...], path: Path, key: str, what: str) -> Any:
    """``value`` (typed as a ``kind``) when it is one; else an InputError naming the file, the key and what
    it must be.

    A TOML ``true`` is no number: bool passes only when ``kind`` names it (Python's bool is an int).
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InputError(f"{path}: key '{key}' must be {what}, got {type(value).__name__}",
                         hint=f"make it {what}")
    return value
