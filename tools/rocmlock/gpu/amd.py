"""AMD's own GPU target table: PyPI's ``rocm-bootstrap`` (MIT, pure Python, by AMD), the target -> sub-family ->
family hierarchy that TheRock's ``rocm-sdk-device-*`` packages and kpack archives are named by, each target's ISA
and xnack support from LLVM's GCNProcessors.td / AMDGPU.td.

rocmlock keeps its own ``data/gpu_targets.toml`` (what the stack can build and run on each target), but the facts
both tables state must agree: :func:`check_row` holds every row to rocm-bootstrap's, so a row a team adds with a
wrong ISA, family or generic target is one line naming the key (``gpu.targets.read_targets`` calls it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import rocm_bootstrap

from rocmlock.errors import InputError
from rocmlock.util.tables import key

# LLVM generic targets that cover only part of the sub-family rocm-bootstrap hangs them on. rocm_bootstrap/targets.py
# (BUNDLE_GFX9_0): "gfx9-generic covers gfx900, 902, 904, 906, 909, 90c (NOT gfx908, gfx90a)" (LLVM's
# GCNProcessors.td: the MAI instructions of gfx908/gfx90a are not in the generic ISA).
_NOT_COVERED: dict[str, frozenset[str]] = {"gfx9-generic": frozenset({"gfx908", "gfx90a"})}


@dataclass(frozen=True)
class AmdTarget:
    """One target as rocm-bootstrap describes it."""

    gfx: str
    isa: str  # major.minor.stepping in decimal, as __amdgpu_arch writes it
    family: str  # its family bundle key: gfx9, gfx11
    sub_family: str  # its sub-family bundle key: gfx9_4, gfx115x
    generic: str  # the LLVM generic target that covers it, "" for none
    xnack: str  # rocm_bootstrap.XnackMode value: supported, unsupported, default_on


def version() -> str:
    """The installed rocm-bootstrap's version (its package metadata)."""
    from importlib.metadata import version as dist_version

    return dist_version("rocm-bootstrap")


@cache
def amd_target(gfx: str) -> AmdTarget | None:
    """``gfx`` as rocm-bootstrap knows it, or None when its table has no such target."""
    try:
        target = rocm_bootstrap.lookup_target(gfx)
        _, sub, fam = rocm_bootstrap.packaging_chain(target)
    except ValueError:
        return None
    generic = ""
    for bundle in (sub, fam):  # the most specific generic target that covers it
        name = bundle.llvm_generic
        if name:
            generic = "" if gfx in _NOT_COVERED.get(name, frozenset()) else str(name)
            break
    return AmdTarget(gfx=str(target.name), isa=f"{int(target.major)}.{int(target.minor)}.{int(target.stepping)}",
                     family=str(fam.key), sub_family=str(sub.key), generic=generic, xnack=str(target.xnack.value))


def check_row(path: Path, gfx: str, facts: dict[str, str]) -> None:
    """A row of gpu_targets.toml (``facts``: its isa, family, sub_family, generic, xnack) against rocm-bootstrap's
    table: an InputError naming the first key that differs, or the row when AMD's table lacks the target."""
    amd = amd_target(gfx)
    if amd is None:
        raise InputError(f"{path}: key '{key(gfx)}': {gfx} is not a target of AMD's GPU table (rocm-bootstrap "
                         f"{version()})", hint="check the name (LLVM's target, lower case); a target newer than "
                                               "the installed rocm-bootstrap needs a newer one")
    for name in ("isa", "family", "sub_family", "generic", "xnack"):
        want = getattr(amd, name)
        if facts[name] != want:
            raise InputError(f"{path}: key '{key(gfx, name)}' is {facts[name]!r}, but AMD's GPU table "
                             f"(rocm-bootstrap {version()}) says {want!r}", hint=f'write {name} = "{want}"')
