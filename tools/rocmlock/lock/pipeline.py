"""The lock engine: pixi.toml in; pixi.lock and envs/<env>/ exports out, as one atomic set.

``lock_workspace`` keeps every locked environment x platform that still satisfies the manifest
(pixi's rules, see :mod:`rocmlock.lock.satisfy`) and solves the rest, passing the previous lock's
records to the solver so nothing moves unless it must. ``export_workspace`` renders the exports
of an existing pixi.lock without solving. Both return a :class:`LockResult`; with ``check=True``
nothing is written and ``LockResult.stale`` lists what would change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from rattler import RepoDataRecord

from rocmlock.errors import InputError, OperationError
from rocmlock.lock import stamp
from rocmlock.lock.exports import render_exports
from rocmlock.lock.gpuarch import lock_contradictions, refusal
from rocmlock.lock.lockfile import (
    LockedEnvironment,
    LockedPlatform,
    LockedWorkspace,
    align_platforms,
    count_pins,
    empty_platforms,
    lock_platform,
    read_lockfile,
    record_views,
    redact_record,
    render_lockfile,
    view,
)
from rocmlock.lock.noop import ENVS_DIR, LOCK_NAME, existing_manifest, leftovers, unchanged
from rocmlock.lock.outputs import commit, exclusive
from rocmlock.lock.result import Change, LockResult, SolveKey
from rocmlock.lock.satisfy import Unsat, environment_unsat, platform_unsat, records_unsat
from rocmlock.lock.solve import (
    SolveJob,
    make_job,
    merge_jobs,
    solve_jobs,
    subset_for,
)
from rocmlock.lock.stamp import default_cache_dir
from rocmlock.lockdiff.diff import Explicit, LockDiff, PackageType, diff_locks, lock_packages
from rocmlock.util.credentials import redact_url
from rocmlock.util.fs import open_regular
from rocmlock.workspace.manifest import load_workspace
from rocmlock.workspace.model import Environment, Workspace
from rocmlock.workspace.pixi_compat import channel_base_url, is_local_channel


def diff_records(env: str, platform: str, old: Sequence[RepoDataRecord] | None,
                 new: Sequence[RepoDataRecord] | None) -> list[Change]:
    """The changes from ``old`` to ``new`` records, sorted by package name."""
    before = {v.name: f"{v.version} {v.build}" for v in map(view, old or [])}
    after = {v.name: f"{v.version} {v.build}" for v in map(view, new or [])}
    out: list[Change] = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a is None:
            out.append(Change(env, platform, "+", name, None, b))
        elif b is None:
            out.append(Change(env, platform, "-", name, a, None))
        elif a != b:
            out.append(Change(env, platform, "~", name, a, b))
    return out


def _select(ws: Workspace, environments: Sequence[str] | None, platforms: Sequence[str] | None
            ) -> tuple[list[Environment], set[str], set[str]]:
    envs = ws.environments()  # resolves (and so validates) every environment
    names = set(environments or [e.name for e in envs])
    for name in sorted(names - {e.name for e in envs}):
        ws.environment(name)  # an unknown name: the InputError listing the known ones
    known = {p.name for p in ws.platforms}
    plats = set(platforms or known)
    unknown = sorted(plats - known)
    if unknown:
        raise InputError(f"{ws.path}: unknown platform '{unknown[0]}'",
                         hint=f"known platforms: {', '.join(sorted(known))}")
    if environments and platforms and not any(p.name in plats for e in envs if e.name in names for p in e.platforms):
        # Nothing selected: "up to date" would say the pair was checked (lock -e mi250 -p linux-64-gfx942).
        chosen = sorted(names)
        theirs = sorted({p.name for e in envs if e.name in names for p in e.platforms})
        raise InputError(f"{ws.path}: environment '{chosen[0]}' has no platform {', '.join(sorted(plats))}"
                         if len(chosen) == 1 else
                         f"{ws.path}: environments {', '.join(chosen)} have none of the platforms "
                         f"{', '.join(sorted(plats))}",
                         hint=f"their platforms: {', '.join(theirs) or 'none'}")
    return envs, names, plats


def _plan(ws: Workspace, envs: list[Environment], names: set[str], plats: set[str],
          old: LockedWorkspace | None, update: Sequence[str] | None
          ) -> tuple[dict[SolveKey, list[RepoDataRecord]], list[SolveJob], dict[SolveKey, str]]:
    """Split env x platform into kept (still satisfied) records and solve jobs."""
    kept: dict[SolveKey, list[RepoDataRecord]] = {}
    solve: dict[SolveKey, bool] = {}  # key -> from scratch
    reasons: dict[SolveKey, str] = {}
    movable = set(update or [])
    for env in envs:
        unsat = environment_unsat(ws, env, old) if old else Unsat("no lock yet")
        for plat in env.platforms:
            key = (env.name, plat.name)
            previous = old.records(env.name, plat.name) if old else None
            selected = env.name in names and plat.name in plats
            reason = unsat.reason if unsat else (platform_unsat(env, plat, old) if old else None)
            if previous is not None and reason is None and (update is None or not selected):
                kept[key] = previous
                continue
            if not selected:  # outside -e/-p: left as locked, or left out when never locked
                if previous is not None:
                    kept[key] = previous
                continue
            reasons[key] = reason or ("--update" if not movable else f"--update {' '.join(sorted(movable))}")
            # pixi keeps the old records as preferences unless it distrusts them (Unsat.from_scratch).
            solve[key] = (unsat is not None and unsat.from_scratch) or (update is not None and not movable)
    _whole_solve_groups(envs, kept, solve, reasons)
    by_name = {e.name: e for e in envs}
    jobs = [make_job(ws, by_name[env], by_name[env].platform(plat), [] if scratch else [
        r for r in (old.records(env, plat) if old else None) or [] if r.name.normalized not in movable])
        for (env, plat), scratch in solve.items()]
    return kept, jobs, reasons


def _whole_solve_groups(envs: list[Environment], kept: dict[SolveKey, list[RepoDataRecord]],
                        solve: dict[SolveKey, bool], reasons: dict[SolveKey, str]) -> None:
    """A solve group is solved as one on each platform: when one of its environments is solved again, or its
    environments' locked records disagree on a package, every one is (pixi v0.77.0 lock_file/outdated.rs,
    map_outdated_targets_to_solve_groups and find_inconsistent_solve_groups). Moves keys from ``kept`` to ``solve``."""
    groups: dict[tuple[str, str], list[SolveKey]] = defaultdict(list)
    for env in envs:
        for plat in env.platforms if env.solve_group else ():
            groups[(str(env.solve_group), plat.name)].append((env.name, plat.name))
    for (group, _), keys in sorted(groups.items()):
        why = next((f"solve group '{group}' is solved again for environment '{k[0]}'" for k in keys if k in solve), None)
        pins: dict[str, set[str]] = defaultdict(set)
        for key in keys:
            for r in kept.get(key, []):
                pins[r.name.normalized].add(f"{r.version} {r.build} {r.url}")
        split = sorted(n for n, found in pins.items() if len(found) > 1)
        why = why or (f"solve group '{group}' locks {split[0]} differently in its environments" if split else None)
        for key in keys:
            if why is not None and key in kept and key not in solve:
                kept.pop(key)
                solve[key], reasons[key] = False, why


def _solve(ws: Workspace, envs: list[Environment], jobs: list[SolveJob],
           cache_dir: Path) -> dict[SolveKey, list[RepoDataRecord]]:
    """Solve ``jobs``; environments of one solve-group share one solve per platform (pixi's rule)."""
    group_of = {e.name: e.solve_group for e in envs}
    grouped: dict[SolveKey, list[SolveJob]] = defaultdict(list)
    for job in jobs:
        group = group_of[job.key[0]]
        grouped[(f"solve-group {group}", job.key[1]) if group else job.key].append(job)
    merged = [merge_jobs(key, js) if len(js) > 1 else js[0] for key, js in grouped.items()]
    solved = solve_jobs(merged, cache_dir)
    out: dict[SolveKey, list[RepoDataRecord]] = {}
    shared: dict[str, RepoDataRecord] = {}  # url -> the one record every solve that locks it gets (read once)
    for key, js in grouped.items():
        for job in js:
            recs = solved[key if len(js) > 1 else job.key]
            recs = subset_for(recs, job.specs) if len(js) > 1 else recs
            # the one redaction: build_lockfile writes them as given
            out[job.key] = [_shared(shared, r) for r in recs]
    return out


def _shared(shared: dict[str, RepoDataRecord], record: RepoDataRecord) -> RepoDataRecord:
    found = shared.get(url := record.url)
    if found is None:
        found = shared[url] = redact_record(record)
    return found


def _check_solved(envs: list[Environment], solved: dict[SolveKey, list[RepoDataRecord]]) -> None:
    """Every fresh solve must pass pixi's own check, or pixi would refuse the lock we write."""
    by_name = {e.name: e for e in envs}
    matched: dict[tuple[str, int], bool] = {}  # the solves share their records (_solve): each match asked once
    for (env_name, plat_name), records in sorted(solved.items()):
        env = by_name[env_name]
        reason = records_unsat(env, env.platform(plat_name), records, matched)
        if reason is not None:
            raise OperationError(
                f"the solve of environment '{env_name}' on platform '{plat_name}' is one pixi would reject: {reason}",
                hint="a package that depends on __amdgpu/__amdgpu_arch needs a platform that declares them "
                     "(a rich platform such as { name = \"linux-64-gfx942\", platform = \"linux-64\", "
                     "__amdgpu = \"0\", __amdgpu_arch = \"9.4.2\" }), or depend on the amdgpu-target mutex instead")


def _lock_channel(ws: Workspace, channel: str) -> str:
    # Paths stay relative to the manifest (pixi resolves both sides against the workspace root),
    # so the lock does not embed the checkout's location; the rest become base URLs like pixi writes.
    return channel if is_local_channel(channel) else redact_url(ws.channel_url(channel))


def _assemble(ws: Workspace, envs: list[Environment],
              records: dict[SolveKey, list[RepoDataRecord]]) -> LockedWorkspace:
    platforms: dict[str, LockedPlatform] = {}
    locked_envs: dict[str, LockedEnvironment] = {}
    for env in envs:
        if not env.platforms:  # no platform at all: pixi still lists the environment, with its channels
            locked_envs[env.name] = LockedEnvironment(tuple(_lock_channel(ws, c) for c in env.channels), {})
            continue
        if not any((env.name, p.name) in records for p in env.platforms):
            continue
        for plat in env.platforms:
            platforms.setdefault(plat.name, lock_platform(plat))
        locked_envs[env.name] = LockedEnvironment(
            tuple(_lock_channel(ws, c) for c in env.channels),
            {p.name: records[(env.name, p.name)] for p in env.platforms if (env.name, p.name) in records},
        )
    return LockedWorkspace(platforms, locked_envs)


def render_outputs(ws: Workspace, locked: LockedWorkspace, envs: Iterable[Environment]) -> dict[Path, str]:
    """pixi.lock plus every environment's exports, as path -> text."""
    files = {ws.root / LOCK_NAME: render_lockfile(locked)}
    for env in envs:
        lenv = locked.environments.get(env.name)
        if lenv is None:
            continue
        plats = [locked.platforms[p.name] for p in env.platforms if p.name in locked.platforms]
        if any(lenv.pypi.values()):  # the exports write the environment's PyPI indexes: none with a query
            env.pypi_indexes.refuse_query(env.name)
        # conda reads a relative channel path against the current directory, so exports name it absolutely.
        channels = [channel_base_url(c, ws.root) if is_local_channel(c) else c for c in lenv.channels]
        files.update(render_exports(ws.root / ENVS_DIR, env.name, channels, plats, lenv.records,
                                    lenv.pypi, env.pypi_indexes, lenv.sources,
                                    env.gpu_target.gfx if env.gpu_target else None))
    return files


def _stale(files: dict[Path, str]) -> tuple[Path, ...]:
    def differs(path: Path, text: str) -> bool:
        # Bytes, not text: an old file that is not UTF-8 (a lock `--discard-lock` replaces) just differs; read
        # no further than the new text, and never from a FIFO or device (that would hang).
        data = text.encode()
        try:
            with open_regular(path, "") as fh:
                return fh.read(len(data) + 1) != data
        except (OSError, InputError):
            return True

    return tuple(sorted(p for p, t in files.items() if differs(p, t)))


def _finish(ws: Workspace, files: dict[Path, str], changes: list[Change], solved: Sequence[SolveKey],
            reasons: dict[SolveKey, str], check: bool, warnings: Sequence[str] = (),
            scope: Iterable[str] | None = None) -> LockResult:
    changed, removed = _stale(files), leftovers(ws.root, files, scope)
    stale = tuple(sorted(changed + removed))
    if stale and not check:
        commit(ws.root, {p: files[p] for p in changed}, removed)
    return LockResult(ws.path, files, stale, tuple(changes), tuple(solved), bool(stale) and not check, reasons,
                      warnings=tuple(warnings), removed=removed)


def explicit_marks(envs: Sequence[Environment]) -> Explicit:
    """pixi's ``explicit``: a conda package the environment's manifest dependencies name on that platform (rocmlock
    models no PyPI dependencies of its own to mark)."""
    named = {(e.name, p.name): {d.name.lower() for d in e.dependencies_for(p)} for e in envs for p in e.platforms}

    def explicit(env: str, platform: str, kind: PackageType, name: str) -> bool:
        return kind == "conda" and name in named.get((env, platform), ())

    return explicit


def pixi_diff(envs: Sequence[Environment], before: str | None, after: str, lock_path: Path,
              locked: LockedWorkspace | None = None) -> LockDiff:
    """pixi's diff from the lock text ``before`` (None: no readable lock) to ``after``, the text rendered from
    ``locked``: its entries are built from ``locked``'s records where :mod:`rocmlock.lock.lockentry` can (issue
    40), else read from ``after``."""
    from rocmlock.lock.lockentry import memory_lock_packages

    old = lock_packages(before, str(lock_path)) if before is not None else None
    new = memory_lock_packages(locked) if locked is not None else None
    return diff_locks(old, lock_packages(after, str(lock_path)) if new is None else new, explicit_marks(envs))


_DIFF_HINT = ("rocmlock diff compares two pixi.lock files: pass two locks, e.g. `git show HEAD:pixi.lock > old.lock`, "
              "then `rocmlock diff old.lock pixi.lock`")


def diff_lock_files(old: Path, new: Path, explicit: Explicit | None = None) -> LockDiff:
    """pixi's diff from the pixi.lock ``old`` to ``new`` (``rocmlock diff``). Each is read by rattler first
    (:func:`rocmlock.lock.lockfile.read_lockfile`: a lock it cannot read is an input error naming the file);
    without ``explicit`` (no manifest) no package is explicit."""
    texts = []
    for path in (old, new):
        # The readers' own hints mend the workspace's pixi.lock ("restore it, or --discard-lock", "remove it and run
        # rocmlock lock"): here the file is one of diff's two arguments, and the workspace's lock is not at stake.
        if read_lockfile(path, remedy=_DIFF_HINT) is None:
            raise InputError(f"{path}: no such file", hint="pass the old and the new pixi.lock")
        texts.append(path.read_text(encoding="utf-8"))
    return diff_locks(lock_packages(texts[0], str(old)), lock_packages(texts[1], str(new)), explicit)


def diff_workspace_locks(old: Path, new: Path, manifest_path: str | Path | None = None) -> LockDiff:
    """``rocmlock diff``: pixi's diff between two lock files, ``explicit`` marked from ``manifest_path``'s
    pixi.toml when one is given."""
    for path in (old, new):
        if path.name.endswith(".toml"):  # `rocmlock diff pixi.toml pixi.lock`: read as a lock, "invalid YAML"
            raise InputError(f"{path}: a manifest (.toml) where a lock file was expected; rocmlock diff compares "
                             "two pixi.lock files",
                             hint="e.g. `git show HEAD:pixi.lock > old.lock`, then `rocmlock diff old.lock pixi.lock`")
    if manifest_path is None:
        return diff_lock_files(old, new)
    return diff_lock_files(old, new, explicit_marks(load_workspace(existing_manifest(manifest_path)).environments()))


def _check_update_names(ws: Workspace, old: LockedWorkspace | None, update: Sequence[str] | None) -> None:
    if not update or old is None:
        return
    locked = {r.name.normalized for env in old.environments.values() for recs in env.records.values() for r in recs}
    unknown = sorted(set(update) - locked)
    if unknown:
        raise InputError(f"{ws.root / LOCK_NAME}: --update names '{unknown[0]}', which no environment has locked",
                         hint="check the package name (`rocmlock lock --json` lists what is locked)")


def _read_lock(ws: Workspace) -> LockedWorkspace | None:
    locked = read_lockfile(ws.root / LOCK_NAME)
    return None if locked is None else empty_platforms(align_platforms(locked, ws.platforms), ws.environments())


def lock_workspace(manifest_path: str | Path, environments: Sequence[str] | None = None,
                   platforms: Sequence[str] | None = None, update: Sequence[str] | None = None,
                   check: bool = False, cache_dir: Path | None = None,
                   on_wait: Callable[[str], None] | None = None, discard_lock: bool = False) -> LockResult:
    """Lock the workspace of ``manifest_path`` (pixi.toml or its directory).

    ``environments``/``platforms`` limit what is re-solved (the rest stays as locked);
    ``update=None`` keeps locked packages, ``update=[]`` lets every package move and
    ``update=["pytorch"]`` only those named. ``discard_lock`` ignores the previous pixi.lock, readable or not,
    and re-solves every environment from the manifest (``LockResult.discarded`` counts the pins dropped).
    ``check=True`` writes nothing. The whole run holds the workspace's writer lock
    (:mod:`rocmlock.lock.outputs`; ``on_wait`` hears why it waits, if it does).
    """
    manifest = existing_manifest(manifest_path)
    if discard_lock and (environments or platforms or update is not None):
        raise InputError(f"{manifest}: --discard-lock re-solves every environment and platform",
                         hint="drop -e/-p/--update, or drop --discard-lock to keep the other pins")
    with exclusive(manifest.parent, write=not check, on_wait=on_wait), record_views():
        return _lock_held(manifest, environments, platforms, update, check, cache_dir, discard_lock)


def _previous(ws: Workspace, discard: bool
              ) -> tuple[LockedWorkspace | None, LockedWorkspace | None, int | None, str | None]:
    """The previous lock to keep pins from, the one to report changes against, the pins ``discard`` drops, and
    the text of the one reported against (None: none)."""
    path = ws.root / LOCK_NAME
    if not discard:
        old = _read_lock(ws)
        return old, old, None, None if old is None else path.read_text()
    if not path.exists():
        return None, None, 0, None
    try:  # a readable lock still tells what moved; an unreadable one is replaced whole
        before = _read_lock(ws)
    except InputError:
        before = None
    return None, before, count_pins(path), None if before is None else path.read_text()


def _lock_held(manifest: Path, environments: Sequence[str] | None, platforms: Sequence[str] | None,
               update: Sequence[str] | None, check: bool, cache_dir: Path | None, discard: bool) -> LockResult:
    cache = cache_dir or default_cache_dir(manifest.parent)
    ws = load_workspace(manifest)
    if ws.lock_refusals:
        raise ws.lock_refusals[0].error(ws.path)
    envs, names, plats = _select(ws, environments, platforms)
    # The stamp is only ever recorded by a run over every environment and platform (below), so an
    # unchanged one means the whole lock is complete and satisfied, whatever this run selects.
    if update is None and not discard and (same := unchanged(manifest, cache)) is not None:
        return replace(same, warnings=ws.manifest_warnings())  # pixi warns at every load of the manifest
    old, before, discarded, before_text = _previous(ws, discard)
    if check and old is not None and (error := refusal(lock_contradictions(old), ws.root / LOCK_NAME, False)):
        raise error
    _check_update_names(ws, old, update)
    kept, jobs, reasons = _plan(ws, envs, names, plats, old, update)
    if discard:
        reasons = dict.fromkeys(reasons, "--discard-lock")
    solved = _solve(ws, envs, jobs, cache)
    _check_solved(envs, solved)
    locked = _assemble(ws, envs, {**kept, **solved})
    if error := refusal(lock_contradictions(locked), ws.root / LOCK_NAME, solved=True):
        raise error  # issue 40: never written
    changes = [c for env in envs for p in env.platforms if (key := (env.name, p.name)) in solved
               for c in diff_records(env.name, p.name, before.records(*key) if before else None, solved[key])]
    files = render_outputs(ws, locked, envs)
    result = _finish(ws, files, changes, [j.key for j in jobs], reasons, check, warnings := ws.manifest_warnings())
    everything = names == {e.name for e in envs} and plats == {p.name for p in ws.platforms}
    if everything and not check:
        stamp.record(cache, manifest, files, warnings, ws.source or None)
    missing = tuple((e.name, p.name) for e in envs for p in e.platforms if locked.records(e.name, p.name) is None)
    lock_path = ws.root / LOCK_NAME
    return replace(result, not_locked=missing, discarded=discarded,
                   diff_of=lambda: pixi_diff(envs, before_text, files[lock_path], lock_path, locked))


def _source_packages(lock_path: Path, locked: LockedWorkspace, envs: Sequence[Environment],
                     skip_source: bool) -> list[str]:
    """Refuse the source packages of ``envs`` in one line, or (``skip_source``) return one warning per platform."""
    warnings: list[str] = []
    for env in envs:
        found = locked.environments[env.name].sources
        if found and not skip_source:
            names = sorted({s.describe() for srcs in found.values() for s in srcs})
            raise InputError(f"{lock_path}: environment '{env.name}' has packages that no export can pin "
                             f"(built from source, without a hash, or a URL that may hold a secret): "
                             f"{', '.join(names)}",
                             hint="pass --skip-source to export the rest (the exports name what they leave out)")
        warnings += [f"environment '{env.name}' [{plat}]: left out source package(s) "
                     f"{', '.join(s.describe() for s in srcs)}" for plat, srcs in sorted(found.items())]
    return warnings


def export_workspace(manifest_path: str | Path, environments: Sequence[str] | None = None,
                     check: bool = False, on_wait: Callable[[str], None] | None = None,
                     skip_source: bool = False) -> LockResult:
    """Regenerate ``envs/`` from the existing pixi.lock, without solving (for teams that lock with pixi).

    PyPI packages are exported too; a source package (pixi-build, a git or path dependency) is refused
    unless ``skip_source``, which leaves it out with a warning.
    """
    manifest = existing_manifest(manifest_path)
    with exclusive(manifest.parent, write=not check, on_wait=on_wait), record_views():
        return _export_held(manifest, environments, check, skip_source)


def _export_held(manifest: Path, environments: Sequence[str] | None, check: bool, skip_source: bool) -> LockResult:
    ws = load_workspace(manifest)
    envs, names, _ = _select(ws, environments, None)
    locked = _read_lock(ws)
    if locked is None:
        raise InputError(f"{ws.root / LOCK_NAME}: no lock file", hint="run `rocmlock lock` (or `pixi lock`) first")
    missing = sorted(n for n in names if n not in locked.environments)
    if missing:
        raise InputError(f"{ws.root / LOCK_NAME}: environment '{missing[0]}' is not locked",
                         hint="run `rocmlock lock` (or `pixi lock`) first")
    selected = [e for e in envs if e.name in names]
    if error := refusal(lock_contradictions(locked, [(e.name, p.name) for e in selected for p in e.platforms]),
                        ws.root / LOCK_NAME, solved=False):
        raise error
    warnings = _source_packages(ws.root / LOCK_NAME, locked, selected, skip_source)
    files = render_outputs(ws, locked, selected)
    files.pop(ws.root / LOCK_NAME)
    return _finish(ws, files, [], [], {}, check, [*ws.manifest_warnings(), *warnings], scope=environments)
