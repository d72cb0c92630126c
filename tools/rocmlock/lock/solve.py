"""Solving: every environment (or solve group) x platform with ``rattler.solve``, concurrently.

The solve sees the virtual packages pixi solves with (the rattler-modelled ones a platform declares,
subdir defaults included) and, for a platform with a GPU (its own ``__amdgpu_arch``, or an environment's
GPU target), ``__amdgpu=0`` and ``__amdgpu_arch=<ISA>``, so a locking machine needs no GPU and a package
built for another target cannot enter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from rattler import (
    BuildString,
    Channel,
    ChannelPriority,
    Client,
    Gateway,
    GenericVirtualPackage,
    MatchSpec,
    PackageName,
    RepoDataRecord,
    SourceConfig,
    Subdir,
    Version,
    solve,
)
from rattler.exceptions import GatewayError, InvalidMatchSpecError, SolverError

from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.targets import GpuTarget, target_for_isa
from rocmlock.lock.result import SolveKey
from rocmlock.util.credentials import (
    client_for_urls,
    credentials_hint,
    one_line,
    redact_text,
    redact_url,
    refused_channel,
    split_url,
)
from rocmlock.util.fs import private_dir
from rocmlock.workspace.model import Environment, Workspace
from rocmlock.workspace.pixi_compat import VirtualPackage, pixi_virtual_packages
from rocmlock.workspace.platforms import Platform

GPU_PACKAGES = ("__amdgpu", "__amdgpu_arch")
_PRIORITY = {"strict": ChannelPriority.Strict, "flexible": ChannelPriority.Flexible,
             "disabled": ChannelPriority.Disabled}
# Key of one solve: (environment name, platform name).


@dataclass(frozen=True)
class SolveJob:
    """One solve: the specs of one environment (or solve group) on one platform."""

    key: SolveKey
    platform: Platform
    channels: tuple[str, ...]
    specs: tuple[str, ...]
    virtual_packages: tuple[VirtualPackage, ...]
    channel_priority: str
    target: GpuTarget | None
    locked: tuple[RepoDataRecord, ...] = ()
    # [constraints]: specs a package must match if the solve includes it (rattler's `constraints=`).
    constraints: tuple[str, ...] = ()

    def describe(self) -> str:
        env, plat = self.key
        target = f", GPU target {self.target.gfx} (__amdgpu_arch {self.target.isa})" if self.target else ""
        return f"environment '{env}' on platform '{plat}'{target}"


def gpu_target_for(env: Environment, platform: Platform) -> GpuTarget | None:
    """The GPU a solve of ``env`` on ``platform`` is for: the platform's own ``__amdgpu_arch`` (a rich platform such
    as ``linux-64-gfx942``), else the environment's target (an ``amdgpu-target`` feature) on a Linux platform."""
    if (isa := platform.virtual_package("__amdgpu_arch")) is not None:
        return target_for_isa(isa, f"platform '{platform.name}'")
    return env.gpu_target if platform.subdir.startswith("linux") else None


def virtual_packages_for(env: Environment, platform: Platform) -> tuple[VirtualPackage, ...]:
    """The solve's virtual packages: pixi's for the platform, and ``__amdgpu``/``__amdgpu_arch`` for its GPU.

    Each (environment, platform) is solved with that platform's own GPU (:func:`gpu_target_for`), whether it
    comes from the platform or from a feature: an environment over ``linux-64-gfx942`` and ``linux-64-gfx90a``
    gets each platform's builds. A package built for another target carries ``run_constraints:
    __amdgpu_arch ==<its ISA>`` and cannot enter.
    """
    vps = [v for v in pixi_virtual_packages(platform.declared_virtual_packages()) if v[0] not in GPU_PACKAGES]
    target = gpu_target_for(env, platform)
    if target is not None:
        vps.append(("__amdgpu", platform.virtual_package("__amdgpu") or "0", ""))
        vps.append(("__amdgpu_arch", platform.virtual_package("__amdgpu_arch") or target.isa, ""))
    return tuple(vps)


def make_job(ws: Workspace, env: Environment, platform: Platform,
             locked: Sequence[RepoDataRecord] = ()) -> SolveJob:
    """The solve of ``env`` on ``platform``; ``locked`` are the previous lock's records (kept when possible).

    An environment with no channels (pixi accepts ``channels = []``) is refused only when it has dependencies on
    ``platform``: with none there is nothing to solve, and its lock entry is empty, as pixi writes it."""
    specs = tuple(d.matchspec() for d in env.dependencies_for(platform))
    if specs and not env.channels:
        names = ", ".join(sorted({d.name for d in env.dependencies_for(platform)}))
        raise InputError(f"{ws.path}: environment '{env.name}' has dependencies on platform '{platform.name}' "
                         f"({names}) but no channels to solve them from",
                         hint="name the channels in [workspace] channels = [...] (or in a feature of the environment)")
    return SolveJob(
        key=(env.name, platform.name),
        platform=platform,
        channels=tuple(ws.channel_url(c) for c in env.channels),
        specs=specs,
        virtual_packages=virtual_packages_for(env, platform),
        channel_priority=env.channel_priority,
        target=gpu_target_for(env, platform),
        locked=tuple(locked),
        constraints=tuple(d.matchspec() for d in env.constraints_for(platform)),
    )


def merge_jobs(key: SolveKey, jobs: Sequence[SolveJob]) -> SolveJob:
    """One solve for a solve group on one platform: the union of its environments' specs."""
    first = jobs[0]
    channels: list[str] = []
    for job in jobs:
        channels.extend(c for c in job.channels if c not in channels)
    specs = sorted({s for job in jobs for s in job.specs})
    locked = {(r.name.normalized, r.url): r for job in jobs for r in job.locked}
    constraints = sorted({c for job in jobs for c in job.constraints})
    return SolveJob(key, first.platform, tuple(channels), tuple(specs), first.virtual_packages,
                    first.channel_priority, first.target, tuple(locked.values()), tuple(constraints))


def _vp(vp: VirtualPackage) -> GenericVirtualPackage:
    name, version, build = vp
    return GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0"))


async def _solve_one(job: SolveJob, gateway: Gateway) -> list[RepoDataRecord]:
    try:
        specs = [MatchSpec(s) for s in job.specs]
        constraints = [MatchSpec(c) for c in job.constraints]
    except InvalidMatchSpecError as exc:
        raise InputError(f"{job.describe()}: invalid dependency spec: {exc}",
                         hint="fix the version/build of that dependency in pixi.toml") from None
    try:
        records = await solve(
            [Channel(redact_url(c)) for c in job.channels], specs, gateway=gateway,
            platforms=[Subdir(job.platform.subdir), Subdir("noarch")], locked_packages=list(job.locked),
            virtual_packages=[_vp(v) for v in job.virtual_packages],
            channel_priority=_PRIORITY[job.channel_priority], constraints=constraints or None,
        )
    except SolverError as exc:
        raise Unsolvable(job, redact_text(str(exc), _secrets(job))) from None
    except GatewayError as exc:
        text = redact_text(str(exc), _secrets(job))
        if BARE_304 in text:
            raise NotRevalidated(f"{job.describe()}: {one_line(text)}",
                                 hint="the channel's server answers a revalidation with a 304 that names no "
                                      "Last-Modified/ETag; have it send them (nginx, S3 and quetz do)") from None
        if (channel := refused_channel(job.channels, text)) is not None:
            raise OperationError(f"channel {channel} refused the request of {job.describe()}: {one_line(text)}",
                                 hint=credentials_hint(channel)) from None
        channels = ", ".join(redact_url(c) for c in job.channels)
        raise OperationError(
            f"cannot read the channels of {job.describe()} ({channels}): {one_line(text)}",
            hint="check the channel URL/path in pixi.toml, the network, and RATTLER_AUTH_FILE credentials",
        ) from None
    return sorted(records, key=lambda r: r.name.normalized)


def _secrets(job: SolveJob) -> list[str]:
    return [s for c in job.channels for s in split_url(c).secrets]


# rattler (py-rattler 0.28, conda/rattler main: crates/rattler_repodata_gateway/src/gateway/sharded_subdir/tokio/index.rs, fetch_index) revalidates
# a stale cached shard index with If-Modified-Since, and takes the 304 as "not modified" only when it repeats the
# cached Last-Modified/ETag (http-cache-semantics' after_response); a bare 304 (Python's http.server, some proxies;
# RFC 9110 15.4.5 does not require Last-Modified) goes down the "modified" path, which fails on its status:
# "received unexpected status code (304 Not Modified) when fetching .../repodata_shards.msgpack.zst".
# conda/rattler#2719 was closed as the server's fault. When the cached index goes stale is timing, not a race:
# without Cache-Control it stays fresh for 10% of (Date - Last-Modified) (RFC 9111 4.2.2 heuristic freshness),
# so a warm re-solve passes right after the first and fails once that window is over (a loaded machine, a
# channel indexed moments before). Like uv (astral-sh/uv#2218), such a solve is run again with fresh requests.
BARE_304 = "(304 Not Modified)"


class NotRevalidated(OperationError):
    """A channel answered a revalidation with a 304 that rattler cannot match to its cache."""


class Unsolvable(OperationError):
    """One environment x platform has no solution; ``explanation`` is rattler's text (secrets removed)."""

    def __init__(self, job: SolveJob, explanation: str) -> None:
        super().__init__(f"cannot solve {job.describe()}")
        self.job = job
        self.explanation = explanation


def unsolvable(failures: Sequence[Unsolvable]) -> OperationError:
    """One error naming every environment x platform that failed, rattler's explanation of each below it, and
    what to do: see the plan of those environments, build and publish what their target lacks, or relax a pin."""
    failures = sorted(failures, key=lambda f: f.job.key)
    what = " and ".join(f.job.describe() for f in failures)
    details = tuple(line for f in failures
                    for line in (f"{f.job.describe()}:", *(f"  {ln}" for ln in f.explanation.splitlines() if ln.strip())))
    envs = " ".join(f"-e {env}" for env in dict.fromkeys(f.job.key[0] for f in failures))
    gpu = any(f.job.target is not None for f in failures)
    missing = "for that GPU target " if gpu else ""
    hint = (f"`rocmlock plan {envs} --channel <channel>` lists the package variants these need and which the "
            f"channel lacks; build the missing ones {missing}with `rocmlock build {envs}` and add them with "
            "`rocmlock publish --to <channel>`, or relax the version in pixi.toml that no package matches")
    return OperationError(f"cannot solve {what}", hint=hint, details=details)


Outcome = list[RepoDataRecord] | BaseException


def alike(jobs: Sequence[SolveJob]) -> list[list[int]]:
    """The jobs (indices) that differ in their virtual packages alone, fresh solves only (no locked records): an
    environment without a GPU feature over several rich GPU platforms (pixi's ``default``)."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, job in enumerate(jobs):
        key = (job.channels, job.specs, job.platform.subdir, job.channel_priority, job.constraints)
        groups.setdefault(key if not job.locked else (i,), []).append(i)
    return list(groups.values())


def differing_virtual(jobs: Sequence[SolveJob]) -> frozenset[str]:
    """The virtual package names whose version or build is not the same in every job (or that some lack)."""
    offered = [{name: (version, build) for name, version, build in job.virtual_packages} for job in jobs]
    return frozenset(n for n in {n for vps in offered for n in vps} if len({vps.get(n) for vps in offered}) > 1)


def mentions(texts: Iterable[str], names: frozenset[str]) -> bool:
    """Whether a text names one of ``names``, as a substring: inside a ``[when="..."]`` condition too, and
    ``__amdgpu_arch`` counts for ``__amdgpu`` (erring towards solving apart)."""
    return any(name in text for text in texts for name in names)


async def _reads_virtual(job: SolveJob, names: frozenset[str], gateway: Gateway) -> bool:
    """Whether a spec, a constraint or a record the solve of ``job`` may consider names one of ``names``. The solver
    considers what ``gateway.query(channels, [subdir, noarch], specs, recursive=True)`` returns (py-rattler's
    ``py_solve`` runs that query: conda/rattler py-rattler/src/solver.rs). Not rattler's ``wanted_virtual_packages``:
    it leaves out names used only in ``[when=...]`` conditions (tests/test_lock_shared_solves.py). A failure
    answers True: the jobs are then solved one by one and report it."""
    if not names or mentions((*job.specs, *job.constraints), names):
        return bool(names)
    try:
        found = await gateway.query([Channel(redact_url(c)) for c in job.channels],
                                    [Subdir(job.platform.subdir), Subdir("noarch")],
                                    [MatchSpec(s) for s in job.specs], recursive=True)
    except Exception:  # noqa: BLE001 - the solves meet it again and say what it is
        return True
    return any(mentions((*record.depends, *record.constrains), names) for records in found for record in records)


async def _solve_alike(jobs: Sequence[SolveJob], members: list[int], gateway: Gateway) -> dict[int, Outcome]:
    """The first of ``members`` solved; the rest take its records when nothing their solve may consider reads the
    virtual packages they differ in (issue 40: ``default`` over four rich GPU platforms was four solves), else, or
    when it fails (each failure names its own platform), each is solved."""
    def solve_rest() -> asyncio.Future[list[Outcome]]:
        return asyncio.gather(*(_solve_one(jobs[i], gateway) for i in rest), return_exceptions=True)

    first, rest = asyncio.ensure_future(_solve_one(jobs[members[0]], gateway)), members[1:]
    share = bool(rest) and not await _reads_virtual(jobs[members[0]],
                                                    differing_virtual([jobs[i] for i in members]), gateway)
    others = None if share else solve_rest()
    outcome: Outcome = (await asyncio.gather(first, return_exceptions=True))[0]
    if others is None and not isinstance(outcome, BaseException):
        return {members[0]: outcome, **{i: list(outcome) for i in rest}}
    return {members[0]: outcome, **dict(zip(rest, await (others or solve_rest())))}


async def _gather(jobs: Sequence[SolveJob], gateway: Gateway) -> list[Outcome]:
    # Each solve's failure is returned, not raised (_solve_alike): all finish, no task outlives the event loop.
    outcomes: dict[int, Outcome] = {}
    for group in await asyncio.gather(*(_solve_alike(jobs, members, gateway) for members in alike(jobs))):
        outcomes.update(group)
    return [outcomes[i] for i in range(len(jobs))]


# The gateways of the last solve_jobs call, freed when the next call starts (or never: the CLI leaves with os._exit,
# rocmlock.cli.main.run). A gateway holds the repodata it parsed: freeing it takes the main thread, with the GIL,
# about 40 ms for the 30k-record channel of benchmarks/bench_lock.py --big, on the lock's path between the solve and
# its outputs (benchmarks/README.md, 2026-12-08). One call's worth is kept: a process that locks many times holds
# no more.
_retired: list[Gateway] = []


def _gateway(cache: Path, client: Client, config: SourceConfig | None = None) -> Gateway:
    gateway = Gateway(cache_dir=cache, client=client) if config is None else \
        Gateway(cache_dir=cache, client=client, default_config=config)
    _retired.append(gateway)
    return gateway


async def _solve_all(jobs: Sequence[SolveJob], cache_dir: Path) -> list[list[RepoDataRecord]]:
    # One gateway for all jobs (each channel's repodata fetched once), seeing clean channel URLs only (its cache
    # stores no secret); the client adds the URLs' credentials in memory, and its AuthenticationMiddleware reads
    # RATTLER_AUTH_FILE (keyed by host, without port), the keyring and ~/.rattler/credentials.json.
    _, client = client_for_urls(dict.fromkeys(c for job in jobs for c in job.channels))
    cache = private_dir(cache_dir)
    results = await _gather(jobs, _gateway(cache, client))
    if any(isinstance(r, NotRevalidated) for r in results):  # see BARE_304: no conditional request this time
        results = await _gather(jobs, _gateway(cache, client, SourceConfig(cache_action="no-cache")))
    errors = [r for r in results if isinstance(r, BaseException)]
    failed = [e for e in errors if isinstance(e, Unsolvable)]
    if failed and len(failed) == len([e for e in errors if "coalesced request" not in str(e)]):
        raise unsolvable(failed)  # every environment that cannot be solved, not only the first
    if errors:
        # Solves that waited on another's fetch see only "a coalesced request failed": report the one that saw why.
        raise next((e for e in errors if "coalesced request" not in str(e)), errors[0])
    return [r for r in results if not isinstance(r, BaseException)]


def check_local_channels(channels: Iterable[str]) -> None:
    """A ``file://`` channel that is not a directory is reported by name before any solve starts."""
    for url in channels:
        if url.startswith("file://"):
            # urllib.request.url2pathname on POSIX (CPython 3.11 Lib/urllib/request.py) without loading http.client
            path = Path(unquote(urlsplit(url).path))
            if not path.exists():  # most often a channel of one's own not built yet (the checkout's ./channel)
                raise OperationError(f"channel {url} cannot be reached: {path} does not exist",
                                     hint="build and publish it first (`rocmlock build`, then `rocmlock publish --to "
                                          f"{path}`), or fix the channel path in pixi.toml (paths are relative to it)")
            if not path.is_dir():
                raise OperationError(f"channel {url} cannot be reached: {path} is not a directory",
                                     hint="fix the channel path in pixi.toml (paths are relative to it)")


def solve_jobs(jobs: Sequence[SolveJob], cache_dir: Path) -> dict[SolveKey, list[RepoDataRecord]]:
    """Run ``jobs`` concurrently; raises the first solve's error (they name environment and platform)."""
    if not jobs:
        return {}
    check_local_channels(dict.fromkeys(c for job in jobs for c in job.channels))
    _retired.clear()
    results = asyncio.run(_solve_all(jobs, cache_dir))
    return {job.key: recs for job, recs in zip(jobs, results)}


def subset_for(records: Iterable[RepoDataRecord], specs: Iterable[str]) -> list[RepoDataRecord]:
    """The records that ``specs`` pull in (transitively): one environment's share of a solve group."""
    by_name = {r.name.normalized: r for r in records}
    todo = [MatchSpec(s).name.normalized for s in specs]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo.extend(MatchSpec(d).name.normalized for d in by_name[name].depends)
    return [by_name[n] for n in sorted(seen)]
