"""``rocmlock verify``: run the standalone probe (tools/verify_env.py) with an environment's own python.

The probe never imports rocmlock, so this module hands it what the workspace knows: the GPU target,
the ROCm version and the target's bf16 peak, as ``--expect-arch``, ``--expect-rocm`` and ``--peak-tflops``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.targets import get_target
from rocmlock.workspace.manifest import load_workspace

# The repository's copy, next to this package; environments with rocm-env-check carry another.
REPO_PROBE = Path(__file__).resolve().parents[2] / "verify_env.py"
PREFIX_PROBE = Path("share/rocm-env-check/verify_env.py")


@dataclass(frozen=True)
class ProbeTarget:
    """Which python runs the probe, on which environment prefix, and what it should expect."""

    label: str
    prefix: Path
    expect_arch: str | None
    expect_rocm: str | None
    peak_tflops: float | None

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"


def rocm_from_spec(spec: str) -> str | None:
    """``"7.2.*"`` or ``">=7.2,<7.3"`` -> ``"7.2"``; ``"*"`` -> None."""
    match = re.search(r"\d+(?:\.\d+)*", spec)
    return match.group(0) if match else None


def _peak(gfx: str | None) -> float | None:
    if not gfx:
        return None
    peak = get_target(gfx).peak_bf16_tflops
    return peak if peak > 0 else None


def target_for_environment(manifest: Path, name: str, installed: bool = True) -> ProbeTarget:
    """The pixi environment ``name`` of the workspace at ``manifest`` (installed under .pixi/envs; ``installed``
    False: only its expectations, for the environment in an image)."""
    workspace = load_workspace(manifest)
    env = workspace.environment(name)
    rocm = env.dependency("rocm-version")
    gfx = env.gpu_target.gfx if env.gpu_target else None
    target = ProbeTarget(
        label=f"environment '{name}'",
        prefix=workspace.root / ".pixi" / "envs" / name,
        expect_arch=gfx,
        expect_rocm=rocm_from_spec(rocm.version) if rocm else None,
        peak_tflops=_peak(gfx),
    )
    if installed and not target.python.exists():
        raise OperationError(
            f"{target.label} is not installed: no python at {target.python}",
            hint=f"install it with `pixi install -e {name} --manifest-path {workspace.path}`, or with rocmlock: "
                 f"`rocmlock install -e {name} --prefix DIR --manifest-path {workspace.path}`, then "
                 "`rocmlock verify --prefix DIR`",
        )
    return target


def _installed(prefix: Path, name: str) -> dict[str, object] | None:
    for path in sorted((prefix / "conda-meta").glob(f"{name}-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        # A damaged record (valid JSON, not an object) is skipped like unreadable JSON, not a traceback.
        if isinstance(record, dict) and record.get("name") == name:
            return record
    return None


def target_for_prefix(prefix: Path) -> ProbeTarget:
    """A conda environment at ``prefix``; expectations come from its amdgpu-target and rocm-version packages."""
    prefix = prefix.resolve()
    if not prefix.is_dir():  # a path given wrongly is bad input (exit 2), as for install, unpack and audit
        raise InputError(f"--prefix {prefix}: {'not a directory' if prefix.exists() else 'no such directory'}",
                         hint="pass the prefix of an installed environment (conda env list, or .pixi/envs/<name>)")
    if not (prefix / "bin" / "python").exists():
        raise OperationError(
            f"{prefix}: no python at {prefix / 'bin' / 'python'}",
            hint="pass the prefix of an installed environment (conda env list, or .pixi/envs/<name>)",
        )
    arch = _installed(prefix, "amdgpu-target")
    rocm = _installed(prefix, "rocm-version")
    gfx = str(arch["build"]).split("_")[0] if arch and arch.get("build") else None
    if gfx:
        get_target(gfx, f"{prefix}: installed amdgpu-target")
    return ProbeTarget(
        label=f"prefix {prefix}",
        prefix=prefix,
        expect_arch=gfx,
        expect_rocm=rocm_from_spec(str(rocm.get("version", ""))) if rocm else None,
        peak_tflops=_peak(gfx),
    )


def resolve_target(manifest: Path, environment: str | None, prefix: Path | None,
                   active_prefix: str | None = None) -> ProbeTarget:
    """``-e ENV`` or ``--prefix DIR`` (exactly one); neither means the active environment (CONDA_PREFIX)."""
    if environment and prefix:
        raise InputError("pass either -e/--environment or --prefix, not both",
                         hint="-e ENV reads the environment from pixi.lock; --prefix DIR checks one already installed")
    if environment:
        return target_for_environment(manifest, environment)
    if prefix:
        return target_for_prefix(prefix)
    if active_prefix:
        return target_for_prefix(Path(active_prefix))
    raise InputError("no environment to verify", hint="pass -e ENV (a pixi environment) or --prefix DIR")


def probe_script(target: ProbeTarget, prefer_prefix: bool = False) -> Path:
    """The probe file: the repository's copy, else the one rocm-env-check installed into the prefix (that one first
    with ``prefer_prefix``: on other nodes the environment is there, this checkout may not be)."""
    candidates = (REPO_PROBE, target.prefix / PREFIX_PROBE)
    for candidate in reversed(candidates) if prefer_prefix else candidates:
        if candidate.is_file():
            return candidate
    raise OperationError(f"probe not found at {REPO_PROBE} or {target.prefix / PREFIX_PROBE}",
                         hint="install the rocm-env-check package into the environment")


def probe_command(target: ProbeTarget, *, json_out: bool = False, bench: bool = False, train: bool = False,
                  extra: Sequence[str] = (), prefer_prefix: bool = False,
                  image: Sequence[str] = ()) -> list[str]:
    """The argv that runs the probe with the environment's python and the workspace's expectations; ``image``:
    the argv that runs an image's check (``apptainer exec SIF /opt/rocmlock/check``, which adds ``--prefix``)."""
    if image:
        cmd = list(image)
    else:
        cmd = [str(target.python), str(probe_script(target, prefer_prefix)), "--prefix", str(target.prefix)]
    if target.expect_arch:
        cmd += ["--expect-arch", target.expect_arch]
    if target.expect_rocm:
        cmd += ["--expect-rocm", target.expect_rocm]
    if target.peak_tflops:
        cmd += ["--peak-tflops", f"{target.peak_tflops:g}"]
    cmd += [flag for flag, on in (("--json", json_out), ("--bench", bench), ("--train", train)) if on]
    return cmd + list(extra)


Runner = Callable[[list[str]], int]


def run_probe(cmd: list[str], runner: Runner | None = None) -> int:
    """Run the probe, its stdout and stderr passed through; returns its exit code."""
    if runner is not None:
        return runner(cmd)
    try:
        return subprocess.run(cmd, check=False).returncode
    except OSError as exc:
        raise OperationError(f"cannot run {cmd[0]}: {exc.strerror}",
                             hint="reinstall the environment (its python is broken)") from None
