"""The doctor's checks of what the packages to build link from the host: ROCm's libraries
(rocm_components.toml), TheRock's packages where ROCm is TheRock's, and MAGMA for pytorch (``ROCMLOCK_MAGMA_HOME``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.host import magma, therock
from rocmlock.host import rocm as rocm_host
from rocmlock.host.doctor_report import Check, Status

__all__ = ["MAGMA_FIX", "check_magma", "check_rocm_components", "check_therock"]


def check_rocm_components(rocm: Path | None, packages: Iterable[str], required: bool = True) -> Check | None:
    """The host-ROCm libraries the packages to build compile against (rocm_components.toml); None if none apply.

    ``required``: the packages are known to be built (a fail when one lacks a component); otherwise a warning.
    """
    missing = rocm_host.missing_components(rocm or Path("/nonexistent"), packages)
    if not missing:
        return None
    lacking = {pkg: comps for pkg, comps in missing.items() if comps}
    if not lacking:
        found = ", ".join(c.name for c in rocm_host.component_table()[next(iter(missing))])
        return Check("rocm-components", "ok", f"{' and '.join(missing)}: {found} found under {rocm}/include"
                     if len(missing) == 1 else f"{', '.join(missing)}: every component found under {rocm}/include")
    comps = {c for cs in lacking.values() for c in cs}
    # Names only (issue 26: with each header and package name it was one 2,500-character line); the fix below
    # names the packages to install, rocm_components.toml the header each is found by.
    message = "; ".join(f"{pkg} needs {', '.join(c.name for c in cs)}" for pkg, cs in lacking.items())
    return Check("rocm-components", "fail" if required else "warn",
                 f"missing under {rocm}/include: {message}", _components_fix(rocm, comps))


def _components_fix(rocm: Path | None, comps: set[rocm_host.Component]) -> str:
    """How to install the missing components on the layout the ROCm at ``rocm`` has."""
    layout = therock.layout_of(rocm) if rocm is not None else "amd"
    if layout == "therock-python":
        # Every component of the table is a ROCm library: rocm-sdk-libraries has its shared library,
        # rocm-sdk-devel its headers (the dev components go to no other package: therock.py).
        missing = [p for p in therock.missing_packages(rocm) if p != therock.CORE] if rocm else []
        named = missing or [therock.DEVEL_PACKAGE]
        return (f"TheRock's {' and '.join(named)} ({', '.join(sorted(c.name for c in comps))}): "
                f"{therock.package_fix(named)}")
    if layout == "therock-tarball":
        return (f"this TheRock tree lacks {', '.join(sorted(c.name for c in comps))}: extract TheRock's full SDK "
                "tarball of this release (therock-dist-linux-<family>-<version>.tar.gz holds every library and "
                f"header), or install the Python packages: {therock.package_fix([therock.LIBRARIES, therock.DEVEL_PACKAGE])}")
    return (f"apt-get install {' '.join(sorted(c.debian for c in comps))} (Debian/Ubuntu), or AMD's "
            f"{' '.join(sorted(c.amd for c in comps))}")


def check_therock(rocm: Path | None, targets: tuple[str, ...], build: bool) -> Check | None:
    """TheRock's ROCm: on the Python packages, each package a build and a run on ``targets`` need
    (rocm-sdk-core, rocm-sdk-libraries, rocm-sdk-devel, rocm-sdk-device-<gfx>); on both layouts, the targets the
    tree was built for (``share/therock/dist_info.json``). None on another layout."""
    if rocm is None or not therock.is_therock(rocm):
        return None
    what = f"TheRock's ROCm ({therock.layout_of(rocm)}) at {rocm}"
    missing = therock.missing_packages(rocm, targets)
    built = therock.dist_targets(rocm)
    lacking = [t for t in targets if built is not None and t not in built]
    if missing or lacking:
        why = [f"{', '.join(missing)} not installed in {rocm.parent}"] if missing else []
        if lacking:
            why.append(f"built for {', '.join(built or ())}, not {', '.join(lacking)} (its libraries carry no "
                       "kernels for them)")
        # Headers and tools are what a build needs (a fail); device code is what a run on the GPU needs (a warning).
        needed = any(not p.startswith("rocm-sdk-device-") for p in missing)
        fix = therock.package_fix(missing) if missing else \
            f"use TheRock's packages or tarball built for {', '.join(lacking)}"
        return Check("therock", "fail" if build and needed else "warn", f"{what}: {'; '.join(why)}", fix)
    installed = [therock.CORE, therock.LIBRARIES, therock.DEVEL_PACKAGE, *(f"rocm-sdk-device-{t}" for t in targets)]
    said = f"; {', '.join(installed)} installed" if therock.is_python_tree(rocm) else ""
    return Check("therock", "ok", what + said + (f"; built for {', '.join(built)}" if built else ""))


MAGMA_FIX = ("apt-get install libmagma-rocm-dev where it is built for this ROCm (Debian sid's 2.9.0+ds-3 is ROCm 6's), "
             "else build MAGMA against this ROCm (PyTorch's .ci/docker/common/install_rocm_magma.sh); then export "
             f"{magma.KEY}=<its absolute prefix>")


def check_magma(env: Mapping[str, str], rocm: Path | None, packages: Iterable[str] | None,
                required: bool = True) -> Check | None:
    """MAGMA for the pytorch build (``ROCMLOCK_MAGMA_HOME``); None when pytorch is not among ``packages``.

    Without MAGMA pytorch still builds (some GPU linalg ops then raise), so the only failure is a
    ``ROCMLOCK_MAGMA_HOME`` the build would refuse, and only when pytorch is known to be built (``required``).
    """
    if packages is not None and "pytorch" not in packages:
        return None
    hip = magma.hip_runtime_of(rocm)
    given = env.get(magma.KEY, "")
    bad: Status = "fail" if required and given else "warn"
    if magma.is_empty(env):
        return Check("magma", "warn", magma.EMPTY,
                     f"unset {magma.KEY}, or set it to the absolute path of a MAGMA built for this ROCm")
    try:
        found = magma.given(env) or magma.discover(env, rocm)
    except InputError as exc:  # relative, missing, not a MAGMA: what rocmlock build and build.sh refuse
        # Check.fix is a string (doctor --json's "fix"): a refusal without its own hint still says what to do.
        fix = exc.hint or (f"set {magma.KEY} to the absolute prefix of a MAGMA built for this ROCm, or unset it "
                           "to build pytorch without MAGMA")
        return Check("magma", bad, str(exc), fix)
    if found is not None and found.unreadable:
        return Check("magma", bad, f"MAGMA at {found.prefix}: cannot read {found.library} as a shared library "
                     f"({found.unreadable})", f"reinstall that MAGMA, point {magma.KEY} at another, or unset it")
    if found is None:
        return Check("magma", "warn", f"no MAGMA for the ROCm at {rocm}: pytorch builds without it "
                     "(torch.linalg.eig and the other GPU ops PyTorch runs on MAGMA raise)", MAGMA_FIX)
    if found.hip_runtime != hip or hip is None:
        return Check("magma", bad, f"MAGMA at {found.prefix} links {found.hip_runtime or 'no HIP runtime'} but the ROCm "
                     f"at {rocm} is {hip or 'unknown'}: built for another ROCm, pytorch cannot use it", MAGMA_FIX)
    if not given:
        return Check("magma", "warn", f"MAGMA at {found.prefix} ({found.library.name}, links {hip}) is not used: "
                     f"pytorch builds with MAGMA only when {magma.KEY} names it",
                     f"export {magma.KEY}={found.prefix} (the pytorch package then carries libmagma: docs/recipes.md, MAGMA)")
    return Check("magma", "ok", f"MAGMA at {found.prefix} ({found.library}, links {hip}): pytorch builds with it "
                 "and carries libmagma")
