"""``rocmlock build``: the plan's variants built with py-rattler-build, in dependency order, resumable.

The output directory is itself a channel (``<output>/<subdir>/``, indexed by rattler-build after each
package) and comes first in every later build's channel list, so a stage sees the packages of the
stages before it. A variant is skipped when its package file is already in the output directory or the
plan marked it present in the target channel, so a second run after a failure or an interruption
builds only what is missing. Each variant writes ``<output>/logs/<id>.log``.

After each variant built for a GPU target, its package's device code is checked against its build string
(:func:`check_device_code`): a fat build, a build for the wrong GPU or one with no device code fails the
variant before anything can publish it.

Doctor gating: only variants that compile for a GPU (a ``gpu_target`` key and a platform subdir) need
the ROCm toolchain; when doctor fails, those are blocked and the metapackages / noarch packages still
build.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from rocmlock.build.plan import Plan, Variant, channel_read_url
from rocmlock.channel import channel_dir
from rocmlock.channel.repodata import PACKAGE_SUFFIXES
from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.devicecode import package_identity
from rocmlock.gpu.offload import sorted_names
from rocmlock.gpu.targets import GpuTarget, get_target
from rocmlock.host import magma
from rocmlock.util.credentials import redact_text
from rocmlock.util.text import escape, format_table
from rocmlock.workspace.model import Workspace
from rocmlock.workspace.pixi_compat import is_local_channel

if TYPE_CHECKING:
    from rocmlock.host.doctor_report import DoctorReport

Status = Literal["built", "skipped", "failed", "blocked"]
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class Outcome:
    """What happened to one variant."""

    id: str
    stage: str
    status: Status
    reason: str = ""
    seconds: float = 0.0
    log: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "stage": self.stage, "status": self.status, "reason": self.reason,
                "seconds": round(self.seconds, 2), "log": self.log}


@dataclass(frozen=True)
class BuildReport:
    output: Path
    outcomes: tuple[Outcome, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(o.status in ("built", "skipped") for o in self.outcomes)

    def count(self, status: Status) -> int:
        return sum(o.status == status for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "output": str(self.output), "seconds": round(self.seconds, 2),
                "counts": {s: self.count(s) for s in STATUSES},
                "variants": [o.to_dict() for o in self.outcomes]}


class BuildFailed(OperationError):
    """One variant's build failed; ``str`` is the build's last error line."""


class Builder(Protocol):
    def __call__(self, plan: Plan, variant: Variant, output: Path, channels: list[str],
                 log: Callable[[str], None]) -> None: ...


class Events(Protocol):
    """Progress hooks (the CLI draws them with rich); every method is optional in spirit."""

    def start(self, variant: Variant, index: int, total: int) -> None: ...

    def finish(self, outcome: Outcome) -> None: ...


class _NoEvents:
    def start(self, variant: Variant, index: int, total: int) -> None:
        pass

    def finish(self, outcome: Outcome) -> None:
        pass


@dataclass(frozen=True)
class BuildOptions:
    output: Path
    channels: tuple[str, ...] = ()
    stage: str | None = None
    keep_going: bool = False
    # gfx targets the toolchain cannot build for, with the doctor's reason (from a failed doctor run).
    blocked_targets: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- rattler-build


class _LogCallback:
    """py-rattler-build progress callback that appends every log line to the variant's log."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.last_error = ""

    def on_log(self, event: Any) -> None:
        message = str(event.message).rstrip()
        if event.level == "error" and message.strip():
            self.last_error = message.strip().splitlines()[0]
        self.log(f"[{event.level}] {message}")

    def on_build_step(self, event: Any) -> None:
        self.log(f"== {event.step_name}: {event.message}")

    def on_download_start(self, event: Any) -> None:
        self.log(f"download {redact_text(str(event.url))}")

    def on_download_progress(self, event: Any) -> None:
        pass

    def on_download_complete(self, event: Any) -> None:
        pass


def rattler_build_variant(plan: Plan, variant: Variant, output: Path, channels: list[str],
                          log: Callable[[str], None]) -> None:
    """Render ``variant``'s recipe for exactly its variant values and build it with py-rattler-build."""
    from rocmlock.build.recipes import render_exact

    rendered = render_exact(plan.recipe_path(variant), dict(variant.variant), variant.subdir, variant.build_string)
    if rendered is None:
        raise BuildFailed(f"{variant.recipe} no longer renders build {variant.build_string}",
                          hint="re-run `rocmlock plan`: the recipe or variants.yaml changed")
    callback = _LogCallback(log)
    try:
        rendered.run_build(output_dir=str(output), channels=channels, progress_callback=callback)
    except Exception as exc:  # noqa: BLE001 - py-rattler-build's error types; the log has the details
        # rattler-build's own words: a URL of the recipe's sources may hold a password (the summary table and
        # --json print this reason; the log and progress lines were redacted, this was not).
        raise BuildFailed(redact_text(callback.last_error or (str(exc).splitlines() or [""])[0])) from None


# ----------------------------------------------------------------------------- the loop


def package_file(output: Path, variant: Variant) -> Path | None:
    """The variant's package in ``output`` when it was built already."""
    stem = output / variant.subdir / f"{variant.stage}-{variant.version}-{variant.build_string}"
    return next((Path(f"{stem}{s}") for s in PACKAGE_SUFFIXES if Path(f"{stem}{s}").is_file()), None)


def needs_toolchain(variant: Variant) -> bool:
    """A variant compiles GPU code when it has a GPU target and is not noarch."""
    return variant.subdir != "noarch" and dict(variant.variant).get("gpu_target") is not None


def toolchain_targets(plan: Plan, output: Path, stage: str | None = None) -> tuple[GpuTarget, ...]:
    """The GPU targets of the variants this build would compile (the ones doctor must check)."""
    gfx = {dict(v.variant)["gpu_target"] for v in _selected(plan, stage)
           if v.to_build and needs_toolchain(v) and package_file(output, v) is None}
    return tuple(get_target(g) for g in sorted(gfx))


def pending(plan: Plan, output: Path | None, stage: str | None = None) -> tuple[Variant, ...]:
    """The variants a build would run: to build, of ``stage`` (all when ``None``), not yet in ``output``."""
    return tuple(v for v in _selected(plan, stage)
                 if v.to_build and (output is None or package_file(output, v) is None))


def select_variant(plan: Plan, variant_id: str) -> Plan:
    """The plan of ``variant_id`` alone (what one job of ``build --slurm`` builds); its dependencies must be built
    already, in the output directory or the target channel."""
    chosen = tuple(v for v in plan.variants if v.id == variant_id)
    if not chosen:
        raise InputError(f"--variant {variant_id}: no such variant in the plan",
                         hint="`rocmlock plan` lists the variants (package-version-build)")
    return replace(plan, variants=chosen)


def _selected(plan: Plan, stage: str | None) -> tuple[Variant, ...]:
    if stage is None:
        return plan.variants
    chosen = tuple(v for v in plan.variants if v.stage == stage)
    if not chosen:
        stages = ", ".join(sorted({v.stage for v in plan.variants}))
        raise InputError(f"--stage {stage}: no such stage in the plan", hint=f"stages: {stages}")
    return chosen


def _pre_decided(variant: Variant, output: Path, failed: dict[str, str], opts: BuildOptions) -> Outcome | None:
    """The outcome of a variant that needs no build (or cannot have one), else ``None``."""
    if variant.skip_reason is not None:
        return Outcome(variant.id, variant.stage, "skipped", f"recipe skips it: {variant.skip_reason}")
    if variant.present:
        return Outcome(variant.id, variant.stage, "skipped", "present in the target channel")
    if package_file(output, variant) is not None:
        return Outcome(variant.id, variant.stage, "skipped", "already built in the output directory")
    # The host's toolchain first: a variant doctor rules out here stays blocked whatever its
    # dependencies (triton, say, which needs no ROCm to build) did.
    gfx = dict(variant.variant).get("gpu_target")
    if needs_toolchain(variant) and gfx in opts.blocked_targets:
        return Outcome(variant.id, variant.stage, "blocked", f"doctor: {opts.blocked_targets[gfx]}")
    broken = [d for d in variant.depends_on if d in failed]
    if broken:
        return Outcome(variant.id, variant.stage, "blocked", f"needs {broken[0]}, which {failed[broken[0]]}")
    return None


def _run_one(plan: Plan, variant: Variant, opts: BuildOptions, builder: Builder) -> Outcome:
    logs = opts.output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{variant.id}.log"
    channels = [opts.output.resolve().as_uri(), *opts.channels]
    started = time.monotonic()
    with log_path.open("w") as fh:
        def log(line: str) -> None:
            fh.write(redact_text(line) + "\n")
            fh.flush()

        log(f"rocmlock build {variant.id} ({variant.recipe}, {dict(variant.variant)})")
        log(f"channels: {', '.join(redact_text(c) for c in channels)}")
        try:
            builder(plan, variant, opts.output, channels, log)
            check_device_code(opts.output, variant, log)
        except OperationError as exc:
            log(f"FAILED: {exc}")
            return Outcome(variant.id, variant.stage, "failed", redact_text(str(exc)), time.monotonic() - started,
                           str(log_path))
    return Outcome(variant.id, variant.stage, "built", "", time.monotonic() - started, str(log_path))


REJECTED = "rejected"


def check_device_code(output: Path, variant: Variant, log: Callable[[str], None]) -> None:
    """A variant built for one GPU must hold device code for that GPU and no other (its build string is its
    identity): otherwise its package moves to ``<output>/rejected/`` (out of the channel, so neither a later build
    nor ``publish`` takes it) and the variant fails, naming the files."""
    gfx = dict(variant.variant).get("gpu_target")
    package = package_file(output, variant)
    if gfx is None or not needs_toolchain(variant) or package is None:
        return
    found, problems = package_identity(package, gfx)
    if not found and not problems and _compiles(variant):
        problems = ["no device code at all (no HIP library, no code object)"]
    for code in found:
        log(f"device code: {code.path}: {', '.join(sorted_names(code.targets)) or code.error}")
    if not problems:
        return
    rejected = output / REJECTED / package.name
    rejected.parent.mkdir(exist_ok=True)
    package.replace(rejected)
    channel_dir.index(output)
    more = f" (+{len(problems) - 1} more in the log)" if len(problems) > 1 else ""
    for problem in problems:
        log(f"device code: {problem}")
    raise BuildFailed(f"{variant.id}: its package contradicts its build string {variant.build_string} "
                      f"({gfx}): {problems[0]}{more}; moved to {rejected}",
                      hint=f"build it for {gfx} only (PYTORCH_ROCM_ARCH / GPU_ARCHS / --offload-arch={gfx})")


# rattler-build puts paths into the bash scripts it runs in double quotes, unescaped: the preamble of
# conda_build.sh is `source "<work dir>/build_env.sh"` (prefix-dev/rattler-build,
# crates/rattler_build_script/src/native_runner/bash.rs, BashNativeRunner::preamble), and build_env.sh sets
# `export PREFIX="..."`, BUILD_PREFIX, CONDA_PREFIX the same way (rattler_shell's `Bash::set_env_var`, conda/rattler
# crates/rattler_shell/src/shell/mod.rs: `export {env_var}="{value}"`). In double quotes bash still runs `$(...)`
# and backquotes and expands `$NAME` and `\`; a `"` ends the string. All of these lie in the output directory
# (default: <workspace>/output), so with py-rattler-build 0.73.0 an output path `out$(cmd)` runs cmd on every build
# (tests/test_build.py shows it). RECIPE_DIR 0.73.0 single-quotes, but the issue saw it double-quoted: the recipe
# directories are held to the same rule.
SHELL_ACTIVE = ("$", "`", '"', "\\")


def check_build_paths(plan: Plan, output: Path, variants: Iterable[Variant]) -> None:
    """Refuse (exit 2, before anything is built or submitted) an output or recipe directory whose path the build
    script would run as shell code (:data:`SHELL_ACTIVE`)."""
    places = [("--output", output), ("--output", output.resolve())]
    places += [(f"recipe {v.recipe}", plan.recipe_path(v).parent) for v in variants]
    for what, path in places:
        bad = next((c for c in str(path) if c in SHELL_ACTIVE), None)
        if bad is not None:
            raise InputError(f"{what}: the path {escape(str(path))} holds {bad!r}, which rattler-build's build "
                             "script would run as shell code (it writes the path in double quotes)",
                             hint="move the workspace, recipes and --output to a path without $ ` \" or \\")


def build_plan(plan: Plan, opts: BuildOptions, builder: Builder = rattler_build_variant,
               events: Events | None = None) -> BuildReport:
    """Build the plan's variants in order; stop at the first failure unless ``keep_going``."""
    events = events or _NoEvents()
    started = time.monotonic()
    variants = _selected(plan, opts.stage)
    check_build_paths(plan, opts.output, variants)
    opts.output.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    outcomes: list[Outcome] = []
    stopped = False
    for index, variant in enumerate(variants, 1):
        outcome = _pre_decided(variant, opts.output, failed, opts)
        if outcome is None and stopped:
            outcome = Outcome(variant.id, variant.stage, "blocked", "not started: an earlier variant failed "
                              "(--keep-going builds the independent ones)")
        if outcome is None:
            events.start(variant, index, len(variants))
            outcome = _run_one(plan, variant, opts, builder)
            stopped = stopped or (outcome.status == "failed" and not opts.keep_going)
        if outcome.status in ("failed", "blocked"):
            failed[variant.id] = "failed" if outcome.status == "failed" else "was blocked"
        outcomes.append(outcome)
        events.finish(outcome)
    return BuildReport(opts.output, tuple(outcomes), time.monotonic() - started)


def render_summary(report: BuildReport) -> str:
    """The summary table: one row per variant (status, seconds, reason), then the counts."""
    rows = [("variant", "status", "seconds", "reason / log")]
    for o in report.outcomes:
        detail = o.reason + (f" (log: {o.log})" if o.status == "failed" and o.log else "")
        rows.append((o.id, o.status, f"{o.seconds:.1f}", detail))
    lines = format_table(rows)
    counts = ", ".join(f"{report.count(s)} {s}" for s in STATUSES)
    lines.append(f"{len(report.outcomes)} variants: {counts} in {report.seconds:.1f}s")
    return "\n".join(lines)


def build_channels(ws: Workspace, channel: str | None = None) -> tuple[str, ...]:
    """The channels a build resolves against: ``channel`` (the target channel) first, then the workspace's.

    Names and URLs stay as written (``channel`` in a ``publish --to`` form is the channel it reads); a local
    channel directory becomes a ``file://`` URI, and one that does not exist (yet) is left out.
    """
    out = [channel_read_url(channel)] if channel else []
    for name, _ in ws.channels:
        if not is_local_channel(name):
            out.append(name)
        elif (path := ws.root / Path(name).expanduser()).is_dir():
            out.append(path.resolve().as_uri())
    return tuple(out)


# Doctor checks that concern the whole toolchain (a failure blocks every GPU target).
_TOOLCHAIN_CHECKS = ("hip-path", "rocm-version", "hip-platform", "compiler", "disk")


def blocked_by_doctor(checks: list[tuple[str, str, str]], targets: tuple[GpuTarget, ...]) -> dict[str, str]:
    """``{gfx: reason}`` from doctor's ``(name, status, message)``: what a failed doctor stops."""
    general = [f"{name}: {msg}" for name, status, msg in checks if status == "fail" and name in _TOOLCHAIN_CHECKS]
    blocked: dict[str, str] = {}
    for target in targets:
        own = [msg for name, status, msg in checks if status == "fail" and name == f"offload-arch:{target.gfx}"]
        reasons = own + general
        if reasons:
            blocked[target.gfx] = reasons[0] + (f" (+{len(reasons) - 1} more, see `rocmlock doctor --build`)"
                                                if reasons[1:] else "")
    return blocked


def check_magma_home(plan: Plan, output: Path, stage: str | None, env: Mapping[str, str]) -> list[str]:
    """Refuse, before anything builds, a ``ROCMLOCK_MAGMA_HOME`` the pytorch build would refuse or read in another
    directory (relative, missing, no MAGMA there: :func:`rocmlock.host.magma.given` raises); only when a pytorch variant
    is to be built. Returns warnings (an empty value: pytorch builds without MAGMA)."""
    if not any(v.stage == "pytorch" for v in pending(plan, output, stage)):
        return []
    if magma.is_empty(env):
        return [magma.EMPTY]
    magma.given(env)
    return []


def _compiles(variant: Variant) -> bool:
    """False for a flash-attn variant on the Triton backend: it builds no extension, so needs no ROCm component."""
    gfx = dict(variant.variant).get("gpu_target")
    return not variant.id.startswith("flash-attn-") or (gfx is not None and get_target(gfx).flash_attn_ck)


def doctor_gate(ws: Workspace, plan: Plan, output: Path, stage: str | None = None,
                environments: list[str] | None = None) -> tuple[DoctorReport | None, dict[str, str]]:
    """Run doctor's build checks for the GPU targets this build would compile; returns the report (None
    when nothing needs the toolchain) and ``{gfx: reason}`` of the targets a failure blocks."""
    from rocmlock.host.doctor import run_doctor, workspace_rocm_versions

    targets = toolchain_targets(plan, output, stage)
    if not targets:
        return None, {}
    # The host-ROCm components of the packages to build are reported too (their build.sh stops on a missing one).
    packages = tuple(sorted({v.id.rsplit("-", 2)[0] for v in _selected(plan, stage) if v.to_build and _compiles(v)}))
    report = run_doctor(targets, build=True, rocm_wanted=workspace_rocm_versions(ws, environments), workdir=output,
                        packages=packages)
    return report, blocked_by_doctor([(c.name, c.status, c.message) for c in report.checks], targets)
