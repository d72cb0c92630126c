"""The JSON of a base image (``index.json``, image index, manifest, config) checked field by field before use.

Every field rocmlock reads, and every field the OCI image spec types (descriptor.md, image-index.md, manifest.md,
config.md), must have its type: a base whose ``Labels`` is a list or whose ``diff_ids`` is a number is refused in
one line naming the blob and the key, never a traceback deep in the build. Docker writes ``null`` for an absent
optional field (``"Entrypoint": null``), which is accepted; unknown keys are passed through unread. JSON nested
deeper than any image's is refused before Python's recursion limit is near. A number JSON tools cannot read back
(``NaN``, ``Infinity``, which Python's ``json`` takes, or ``1e400``, which it reads as infinity) is refused: copied
into the image's config or a layout's ``index.json`` it would come out as ``Infinity``, which skopeo, podman and
umoci refuse ("invalid character 'I'"), and a layout written to with ``-o`` would become unreadable. So is an
integer past 64 bits, which Python would copy digit for digit and Go's readers refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rocmlock.errors import InputError
from rocmlock.util.text import escape

DAMAGED = "the base image is damaged or not an OCI image: copy it again (skopeo copy ... oci:DIR:TAG)"
# An image's JSON is at most five levels deep (config.config.Labels, manifests[].platform.os.features); 64 leaves
# room for extensions and stays far below the interpreter's recursion limit in json.dumps of a copied config.
MAX_DEPTH = 64
_MAX_SIZE = (1 << 63) - 1

# A field's type: one of these names, a nested spec (an object), or ("list", type).
_STR, _INT, _BOOL, _STRS, _MAP, _OBJ = "a string", "an integer", "a boolean", "a list of strings", \
    "an object of strings", "an object"
Spec = Mapping[str, tuple[Any, bool]]  # key -> (type, required)

PLATFORM: Spec = {"architecture": (_STR, True), "os": (_STR, True), "os.version": (_STR, False),
                  "os.features": (_STRS, False), "variant": (_STR, False)}
DESCRIPTOR: Spec = {"mediaType": (_STR, True), "digest": (_STR, True), "size": (_INT, True),
                    "urls": (_STRS, False), "annotations": (_MAP, False), "data": (_STR, False),
                    "artifactType": (_STR, False), "platform": (PLATFORM, False)}
INDEX: Spec = {"schemaVersion": (_INT, True), "mediaType": (_STR, False), "artifactType": (_STR, False),
               "manifests": (("list", DESCRIPTOR), True), "annotations": (_MAP, False)}
MANIFEST: Spec = {"schemaVersion": (_INT, True), "mediaType": (_STR, False), "artifactType": (_STR, False),
                  "config": (DESCRIPTOR, True), "layers": (("list", DESCRIPTOR), True),
                  "subject": (DESCRIPTOR, False), "annotations": (_MAP, False)}
_RUN: Spec = {"User": (_STR, False), "ExposedPorts": (_OBJ, False), "Env": (_STRS, False),
              "Entrypoint": (_STRS, False), "Cmd": (_STRS, False), "Volumes": (_OBJ, False),
              "WorkingDir": (_STR, False), "Labels": (_MAP, False), "StopSignal": (_STR, False),
              "ArgsEscaped": (_BOOL, False), "Healthcheck": (_OBJ, False), "Shell": (_STRS, False),
              "OnBuild": (_STRS, False)}
_HISTORY: Spec = {"created": (_STR, False), "author": (_STR, False), "created_by": (_STR, False),
                  "comment": (_STR, False), "empty_layer": (_BOOL, False)}
CONFIG: Spec = {"created": (_STR, False), "author": (_STR, False), "architecture": (_STR, True),
                "os": (_STR, True), "os.version": (_STR, False), "os.features": (_STRS, False),
                "variant": (_STR, False), "config": (_RUN, False),
                "rootfs": ({"type": (_STR, True), "diff_ids": (_STRS, True)}, True),
                "history": (("list", _HISTORY), False)}


class _NotANumber(ValueError):
    """A JSON number no JSON reader takes back (NaN, Infinity, or finite text beyond a double)."""


def _constant(name: str) -> float:
    raise _NotANumber(name)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotANumber(text)
    return number


def _integer(text: str) -> int:
    # Go's image tools read an integer into int64 (sizes, Healthcheck's durations) or, where untyped, float64 (one
    # past 1.8e308 fails there); uint64 is the widest any of them declares. Python would copy 401 digits unchanged.
    if len(text.lstrip("-")) > 20:
        raise _NotANumber(text)
    number = int(text)
    if not -(1 << 63) <= number < (1 << 64):
        raise _NotANumber(text)
    return number


def load(data: bytes, what: str, spec: Spec | None = None) -> dict[str, Any]:
    """``data`` parsed as a JSON object (and checked against ``spec``); ``what`` names it in errors."""
    try:
        value = json.loads(data, parse_constant=_constant, parse_float=_finite, parse_int=_integer)
    except _NotANumber as exc:
        raise InputError(f"{what}: the number {escape(str(exc)[:40])} is beyond what JSON readers take back "
                         "(NaN, Infinity, past 1.8e308, or an integer past 64 bits)", hint=DAMAGED) from None
    except RecursionError:
        raise InputError(f"{what}: JSON nested too deeply", hint=DAMAGED) from None
    except ValueError:  # includes UnicodeDecodeError
        raise InputError(f"{what}: not JSON", hint=DAMAGED) from None
    if _depth(value) > MAX_DEPTH:
        raise InputError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels", hint=DAMAGED)
    if not isinstance(value, dict):
        raise InputError(f"{what}: {_kind(value)}, not a JSON object", hint=DAMAGED)
    if spec is not None:
        check(value, spec, what)
    return value


def check(value: dict[str, Any], spec: Spec, what: str, path: str = "") -> None:
    """Every key of ``spec`` in ``value`` has its type (required ones present and not null)."""
    for key, (kind, required) in spec.items():
        name = f"{path}.{key}" if path else key
        if key not in value or value[key] is None:
            if required:
                raise InputError(f"{what}: no '{name}'", hint=DAMAGED)
            continue
        _check_value(value[key], kind, what, name)


def _check_value(value: Any, kind: Any, what: str, name: str) -> None:
    if isinstance(kind, Mapping):
        if not isinstance(value, dict):
            raise _wrong(what, name, value, _OBJ)
        check(value, kind, what, name)
    elif isinstance(kind, tuple):
        if not isinstance(value, list):
            raise _wrong(what, name, value, "a list")
        for i, item in enumerate(value):
            _check_value(item, kind[1], what, f"{name}[{i}]")
    elif not _is(value, kind):
        raise _wrong(what, name, value, kind)


def _is(value: Any, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SIZE
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == _MAP:
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return isinstance(value, dict)


def _wrong(what: str, name: str, value: Any, kind: str) -> InputError:
    return InputError(f"{what}: '{name}' is {_kind(value)}, not {kind}", hint=DAMAGED)


def _kind(value: Any) -> str:
    """``value`` described in a few words (its start, escaped, for a string or a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {escape(str(value)[:40])}"
    if isinstance(value, str):
        return f"the string '{escape(value[:60])}'"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict) and not all(isinstance(v, str) for v in value.values()):
        return "an object holding a non-string"
    return "an object"


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iterative: a deep value never recurses here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                break
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest
