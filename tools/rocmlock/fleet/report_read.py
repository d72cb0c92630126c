"""Reading one probe report (``rocm-env-check --json``) for ``rocmlock report``: every field checked, nothing trusted.

A report comes from a node over a shared filesystem, a launcher's log directory or a copy: it may be truncated,
empty, not JSON, of another tool, or hostile (escape sequences in a host name, a 10 GB file, a FIFO, NaN). Each
such file becomes one :class:`Unreadable` with a one-line reason; the readable ones become :class:`NodeReport`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError
from rocmlock.util.fs import open_regular
from rocmlock.util.text import escape, printable_words

PROBE = "rocm-env-check"
# The newest report schema this rocmlock reads (tools/verify_env.py SCHEMA_VERSION).
SCHEMA = 1
# A probe report is tens of kilobytes (the train check's losses included); far more is not one.
MAX_BYTES = 8 * 1024 * 1024
STATUSES = ("ok", "warn", "fail", "skipped")
# Whole strings (fullmatch): `$` would accept a trailing newline, "gpu09\n", which splits the table's row.
HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})")
CHECK_ID = re.compile(r"[A-Za-z0-9_.:-]{1,80}")
GFX = re.compile(r"gfx[0-9a-f]{2,6}")
VERSION = re.compile(r"\d+(?:\.\d+){0,3}")
# Where a report names the node's GPUs, best first: KFD's list (every GPU), rocminfo's agents, torch's devices.
GPU_CHECKS = ("host.driver", "tools.rocminfo", "torch.arch")


@dataclass(frozen=True)
class Failure:
    """One failed required check of a node: its id, the evidence the probe saw and its fix (printable)."""

    check: str
    evidence: str
    fix: str


@dataclass(frozen=True)
class NodeReport:
    """What ``report`` needs of one node's probe report."""

    node: str
    source: str
    ok: bool
    failures: tuple[Failure, ...]
    warnings: int
    gpus: tuple[str, ...]
    expected_arch: str | None
    rocm: str | None
    gemm_tflops: float | None
    step_ms: float | None

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(f.check for f in self.failures)


@dataclass(frozen=True)
class Unreadable:
    """A report that could not be merged, with why (one line)."""

    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


class _Bad(Exception):
    """Why a report cannot be read; becomes an :class:`Unreadable`."""


_PATH_MAX = 4096


def read_report(path: Path) -> NodeReport | Unreadable:
    """The node report in ``path``, else why not."""
    # Escaped, whole up to PATH_MAX: cut at 200 (its head kept), two runs' reports of one host under a long
    # directory printed alike and could not be told apart; past that the tail, which tells them apart, is kept.
    shown = escape(str(path))
    source = shown if len(shown) <= _PATH_MAX else "..." + shown[-(_PATH_MAX - 3):]
    try:
        return _parse(_decode(_read_bytes(path)), path, source)
    except _Bad as exc:
        return Unreadable(source, str(exc))


def _read_bytes(path: Path) -> bytes:
    try:
        with open_regular(path, "") as fh:  # a FIFO or a device would block or never end
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BYTES:
                raise _Bad(f"{size} bytes: larger than any probe report ({MAX_BYTES // 2**20} MiB)")
            data = fh.read(MAX_BYTES + 1)
    except InputError:
        raise _Bad("not a regular file") from None
    except OSError as exc:
        raise _Bad(f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise _Bad(f"larger than any probe report ({MAX_BYTES // 2**20} MiB)")
    if not data.strip():
        raise _Bad("empty: the probe wrote no report (did it start on the node? see its .log beside it)")
    return data


def _reject_constant(name: str) -> float:
    raise _Bad(f"not JSON: {name} is no JSON number")


def _decode(data: bytes) -> Mapping[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 text (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        truncated = "truncated (the probe or its node stopped mid-write?)" if exc.pos >= len(text.rstrip()) \
            else "not JSON"
        raise _Bad(f"{truncated}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise _Bad("not a probe report: JSON nested too deeply") from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits() (4300), no probe's number
        raise _Bad("not a probe report: a number of thousands of digits") from None
    if not isinstance(value, dict) or value.get("probe") != PROBE:
        raise _Bad(f"not a probe report: no \"probe\": \"{PROBE}\" object (write one with `rocm-env-check --json`)")
    return value


def _get(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str, where: str = "") -> Any:
    value = data.get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _Bad(f"key '{where}{key}' must be {what}, got {type(value).__name__}")
    return value


def _parse(data: Mapping[str, Any], path: Path, source: str) -> NodeReport:
    schema = _get(data, "schema", int, "an integer")
    if schema > SCHEMA or schema < 1:
        shown = schema if abs(schema) < 10**9 else "of many digits"
        raise _Bad(f"schema {shown}: this rocmlock reads schema 1 to {SCHEMA} (upgrade rocmlock)")
    checks = _checks(data)
    failed = _get(data, "failed", list, "a list of check ids")
    if not all(isinstance(c, str) and CHECK_ID.fullmatch(c) for c in failed):
        raise _Bad("key 'failed' must be a list of check ids")
    by_id = {c["id"]: c for c in checks}
    failures = tuple(_failure(c, by_id) for c in failed)
    expected = data.get("expected")
    arch = expected.get("arch") if isinstance(expected, dict) else None
    return NodeReport(
        node=_node_name(data, path),
        source=source,
        ok=_get(data, "ok", bool, "true or false") and not failures,
        failures=failures,
        warnings=sum(c["status"] == "warn" for c in checks),
        gpus=_gpus(by_id),
        expected_arch=arch if isinstance(arch, str) and GFX.fullmatch(arch) else None,
        rocm=_rocm(data, by_id),
        gemm_tflops=_number(by_id, "bench.gemm", "tflops"),
        step_ms=_step_ms(by_id),
    )


def _checks(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = _get(data, "checks", list, "a list of checks")
    for i, c in enumerate(checks):
        where = f"checks[{i}]."
        if not isinstance(c, dict):
            raise _Bad(f"key 'checks[{i}]' must be an object, got {type(c).__name__}")
        if not CHECK_ID.fullmatch(_get(c, "id", str, "a check id", where)):
            raise _Bad(f"key '{where}id' must be a check id (letters, digits, . _ : -)")
        if _get(c, "status", str, "a status", where) not in STATUSES:
            raise _Bad(f"key '{where}status' must be one of {', '.join(STATUSES)}")
        if "data" in c and not isinstance(c["data"], dict):
            raise _Bad(f"key '{where}data' must be an object, got {type(c['data']).__name__}")
    return checks


def _failure(check_id: str, by_id: Mapping[str, Mapping[str, Any]]) -> Failure:
    check = by_id.get(check_id, {})
    evidence, fix = check.get("evidence"), check.get("fix")
    return Failure(check_id, printable_words(evidence) if isinstance(evidence, str) else "",
                   printable_words(fix) if isinstance(fix, str) else "")


def _node_name(data: Mapping[str, Any], path: Path) -> str:
    """The report's ``hostname``; a report without one (an older probe) is named by its file."""
    if "hostname" in data and data["hostname"] is not None:
        name = data["hostname"]
        if not isinstance(name, str) or not HOSTNAME.fullmatch(name):
            raise _Bad("key 'hostname' must be a host name (letters, digits, . _ -)")
        return name
    stem = path.name.removesuffix(".json")
    if not HOSTNAME.fullmatch(stem):
        raise _Bad("no 'hostname' key, and the file name is no host name to name the node by")
    return stem


def _data(by_id: Mapping[str, Mapping[str, Any]], check_id: str) -> Mapping[str, Any]:
    check = by_id.get(check_id)
    if check is None or check["status"] == "skipped":
        return {}
    data: Mapping[str, Any] = check.get("data", {})
    return data


def _gpus(by_id: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    for check_id in GPU_CHECKS:
        gfx = _data(by_id, check_id).get("gfx")
        if gfx is None:
            continue
        if not isinstance(gfx, list) or not all(isinstance(g, str) and GFX.fullmatch(g) for g in gfx):
            raise _Bad(f"key '{check_id}.data.gfx' must be a list of gfx targets")
        if gfx:
            return tuple(gfx)
    return ()


def _version(value: object, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not VERSION.fullmatch(value):
        raise _Bad(f"key '{key}' must be a version (7.2.4)")
    return value


def _rocm(data: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The host's ROCm: the report's ``rocm`` (probe 0.1.0 with ``hostname``), else what rocm.path found."""
    if data.get("rocm") is not None:
        return _version(data["rocm"], "rocm")
    value = _data(by_id, "rocm.path").get("version")
    return _version(value, "rocm.path.data.version") if value != "?" else None


# Far above any time or rate a probe measures (seconds, TFLOPS), and far enough below a float's end (1.8e308) that
# what the report derives from it (a step's milliseconds, the fleet's median of two) stays finite: JSON has no
# Infinity, and `report --json` must stay JSON.
_MAX_MEASURE = 1e15


def _finite(value: object, key: str, check: Callable[[float], bool] = lambda x: x >= 0) -> float:
    try:  # an integer too large for a float (10**400) overflows
        number = None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
    except OverflowError:
        number = None
    if number is None or not math.isfinite(number) or not check(number):
        raise _Bad(f"key '{key}' must be a non-negative number")
    if number >= _MAX_MEASURE:
        raise _Bad(f"key '{key}' is {number:.3g}, beyond any measurement (at most {_MAX_MEASURE:.0e})")
    return number


def _number(by_id: Mapping[str, Mapping[str, Any]], check_id: str, key: str) -> float | None:
    value = _data(by_id, check_id).get(key)
    return None if value is None else _finite(value, f"{check_id}.data.{key}")


def _step_ms(by_id: Mapping[str, Mapping[str, Any]]) -> float | None:
    """Milliseconds per optimizer step of the probe's LoRA smoke training (its wall time over its steps)."""
    data = _data(by_id, "train.lora")
    seconds, losses = data.get("seconds"), data.get("losses")
    if seconds is None or losses is None:
        return None
    if not isinstance(losses, list) or not losses:
        raise _Bad("key 'train.lora.data.losses' must be a non-empty list")
    return _finite(seconds, "train.lora.data.seconds") * 1000 / len(losses)
