"""The one way rocmlock runs a subprocess: log ``> cmd``, capture output, raise a typed error.

Core modules take a ``runner`` argument defaulting to :func:`run_command`, so tests can inject a fake
one (or the real one against real tools such as Debian's ``hipcc``).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocmlock.errors import OperationError
from rocmlock.util.credentials import redact_text

log = logging.getLogger("rocmlock")


@dataclass(frozen=True)
class CommandResult:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_error_line(self) -> str:
        """The last non-empty line of stderr (else stdout): usually the compiler's verdict."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit code {self.returncode}"


class CommandError(OperationError):
    """A command could not be started, timed out, or exited non-zero (with ``check=True``)."""

    def __init__(self, message: str, result: CommandResult | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.result = result


class Runner(Protocol):
    def __call__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> CommandResult: ...


def format_argv(argv: Sequence[str]) -> str:
    """``argv`` as a shell line with secrets in URLs redacted (for logs and messages)."""
    return redact_text(shlex.join([str(a) for a in argv]))


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    check: bool = True,
    stdin: Path | None = None,
) -> CommandResult:
    """Run ``argv`` (no shell), log ``> cmd``, return its output; ``stdin`` is a file it reads as its input.

    Its output is decoded as UTF-8 with a byte that is not (a principal of an allowed_signers file in Latin-1, a
    node's stray byte in ``srun``'s output) replaced by U+FFFD: what a command prints is never a reason to stop
    with a traceback, and one bad line costs no other.

    A missing executable or a timeout always raises :class:`CommandError`; a non-zero exit raises
    only when ``check`` is true.
    """
    shown = format_argv(argv)
    log.debug("> %s", shown)
    try:
        with contextlib.ExitStack() as stack:
            given = stack.enter_context(stdin.open("rb")) if stdin is not None else None
            proc = subprocess.run(
                [str(a) for a in argv], env=dict(env) if env is not None else None, cwd=cwd, stdin=given,
                capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
            )
    except FileNotFoundError:
        raise CommandError(f"command not found: {argv[0]}", hint=f"install {Path(argv[0]).name} or fix PATH") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"command timed out after {timeout:.0f}s: {shown}") from None
    except OSError as exc:
        raise CommandError(f"cannot run {shown}: {exc.strerror}") from None
    result = CommandResult(tuple(str(a) for a in argv), proc.returncode, proc.stdout, proc.stderr)
    if check and not result.ok:
        raise CommandError(f"command failed ({result.returncode}): {shown}: {result.last_error_line()}", result)
    return result
