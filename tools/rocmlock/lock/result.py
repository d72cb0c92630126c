"""What ``rocmlock lock`` and ``export`` did or would do: the changes and the files, as data (no rattler here, so
the no-op path (:mod:`rocmlock.lock.noop`) returns one without loading the solver)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmlock.util import fs as fsutil

if TYPE_CHECKING:  # the module itself is loaded when a diff is shown, not by the no-op lock (issue 40)
    from rocmlock.lockdiff.diff import LockDiff

# An environment and a platform of it, by name.
SolveKey = tuple[str, str]


@dataclass(frozen=True)
class Change:
    """One package change of one environment on one platform (``+`` added, ``-`` removed, ``~`` changed)."""

    environment: str
    platform: str
    kind: str
    name: str
    old: str | None = None
    new: str | None = None

    def line(self) -> str:
        if self.kind == "~":
            return f"~ {self.name} {self.old} -> {self.new}"
        return f"{self.kind} {self.name} {self.new if self.kind == '+' else self.old}"


@dataclass(frozen=True)
class LockResult:
    """What a lock/export did or (with ``check``) would do."""

    manifest: Path
    files: Mapping[Path, str] = field(hash=False)  # path -> text (the no-op's: read when asked for)
    stale: tuple[Path, ...]
    changes: tuple[Change, ...]
    solved: tuple[SolveKey, ...]
    written: bool
    reasons: dict[SolveKey, str] = field(default_factory=dict, hash=False)
    # Environment x platform pairs of the manifest that the lock does not hold (a run limited by -e/-p
    # on a workspace never locked in full): pixi's --locked refuses such a lock as a whole.
    not_locked: tuple[SolveKey, ...] = ()
    warnings: tuple[str, ...] = ()
    # Exports (also in ``stale``) of environments or platforms that are gone: removed in the same commit.
    removed: tuple[Path, ...] = ()
    # ``--discard-lock``: how many locked packages of the previous pixi.lock were dropped (None: not discarded).
    discarded: int | None = None
    # What makes pixi's diff of pixi.lock (:attr:`diff`), called when it is first asked for: a plain `rocmlock lock`
    # prints none (issue 40). None: no change.
    diff_of: Callable[[], LockDiff] | None = field(default=None, hash=False, compare=False, repr=False)

    @cached_property
    def diff(self) -> LockDiff:
        """pixi's diff of pixi.lock, from the lock before this run to the one it wrote (or would write): empty when
        the lock does not change (rocmlock.lockdiff.diff)."""
        return self.diff_of() if self.diff_of is not None else {}

    @property
    def up_to_date(self) -> bool:
        return not self.stale

    def change_lines(self) -> list[str]:
        """The changes for people: an ``env [platform]`` line, then one indented line per change."""
        grouped: dict[tuple[str, str], list[Change]] = defaultdict(list)
        for c in self.changes:
            grouped[(c.environment, c.platform)].append(c)
        lines = []
        for (env, plat), changes in sorted(grouped.items()):
            lines += [f"{env} [{plat}]", *(f"  {c.line()}" for c in changes)]
        return lines

    def markdown(self) -> str:
        """The lock's changes as the markdown table pixi-diff-to-markdown makes of :meth:`to_json`."""
        from rocmlock.lockdiff.diff import diff_markdown

        return diff_markdown(self.diff)

    def to_json(self, diff: bool = True) -> dict[str, Any]:
        """The result as plain data (``--json``): pixi's diff (``version``, ``environment``: what ``pixi update
        --json`` prints, so pixi-diff-to-markdown reads it; left empty without ``diff``), then rocmlock's own keys
        (changes, stale files)."""
        envs: dict[str, dict[str, list[dict[str, str | None]]]] = defaultdict(lambda: defaultdict(list))
        for c in self.changes:
            envs[c.environment][c.platform].append({"kind": c.kind, "name": c.name, "old": c.old, "new": c.new})
        root = self.manifest.parent
        pixi: dict[str, Any] = {"version": 1, "environment": {}}  # diff_json of no change, without loading it
        if diff and self.diff:
            from rocmlock.lockdiff.diff import diff_json

            pixi = diff_json(self.diff)
        return {
            **pixi,
            "manifest": str(self.manifest),
            "up_to_date": self.up_to_date,
            "written": self.written,
            "stale": [fsutil.relative_path(p, root) for p in self.stale],
            "no_longer_generated": [fsutil.relative_path(p, root) for p in self.removed],
            "solved": [{"environment": e, "platform": p, "reason": self.reasons.get((e, p))}
                       for e, p in self.solved],
            "changes": {e: dict(p) for e, p in envs.items()},
            "not_locked": [{"environment": e, "platform": p} for e, p in self.not_locked],
            "warnings": list(self.warnings),
            "discarded_pins": self.discarded,
        }
