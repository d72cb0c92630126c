"""AMD's own GPU target table: PyPI's ``rocm-bootstrap`` (MIT, pure Python, by AMD), the target -> sub-family ->
family hierarchy that TheRock's ``rocm-sdk-device-*`` packages and kpack archives are named by, each target's ISA
and xnack support from LLVM's GCNProcessors.td / AMDGPU.td.

rocmlock keeps its own ``data/gpu_targets.toml`` (what the stack can build and run on each target), but the facts
both tables state must agree: :func:`check_row` holds every row to rocm-bootstrap's, so a row a team adds with a
wrong ISA, family or generic target is one line naming the key (``gpu.targets.read_targets`` calls it).

rocm-bootstrap is imported when the table is first checked, not with this module, and its answers are checked
before use: a missing or broken install, or a release that answers in another shape (``lookup_target`` raising
KeyError or returning None, ``xnack`` a plain string), is one :class:`BootstrapError` line naming the package and
the pin to install, never a traceback from ``plan``, ``unpack`` or ``audit`` (issue 41).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from rocmlock.errors import InputError, OperationError
from rocmlock.util.tables import key
from rocmlock.util.text import printable

# pyproject.toml's pin: the release whose answers this module reads.
PIN = "rocm-bootstrap==0.3.*"
FIX = f"install rocmlock's dependency again: pip install '{PIN}'"

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


class BootstrapError(OperationError):
    """rocm-bootstrap cannot be imported, or answers in a shape this module does not read; the text is one line."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"rocm-bootstrap (AMD's GPU table, which rocmlock checks its GPU targets against) "
                         f"{problem}", hint=FIX)


def _bootstrap() -> ModuleType:
    try:
        import rocm_bootstrap
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything from its own code
        raise BootstrapError(f"cannot be imported ({type(exc).__name__}: {printable(str(exc))})") from None
    return rocm_bootstrap


def version() -> str:
    """The installed rocm-bootstrap's version (its package metadata; "of unknown version" without one)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("rocm-bootstrap")
    except (PackageNotFoundError, ValueError):
        return "of unknown version"


@cache
def amd_target(gfx: str) -> AmdTarget | None:
    """``gfx`` as rocm-bootstrap knows it, or None when its table has no such target (its ValueError);
    BootstrapError when it cannot be imported or answers in another shape."""
    rb = _bootstrap()
    target = _ask(rb.lookup_target, gfx, "lookup_target")
    if target is _UNKNOWN:
        return None
    problem = _target_problem(target)
    if problem:
        raise _odd(gfx, problem)
    chain = _ask(rb.packaging_chain, target, "packaging_chain")
    bundles = "packaging_chain does not know the target lookup_target gave" if chain is _UNKNOWN else _bundles(chain)
    if isinstance(bundles, str):
        raise _odd(gfx, bundles)
    (sub, sub_generic), (fam, fam_generic) = bundles
    generic = ""
    for name in (sub_generic, fam_generic):  # the most specific generic target that covers it
        if name:
            generic = "" if gfx in _NOT_COVERED.get(name, frozenset()) else name
            break
    return AmdTarget(gfx=target.name, isa=f"{target.major}.{target.minor}.{target.stepping}", family=fam,
                     sub_family=sub, generic=generic, xnack=target.xnack.value)


_UNKNOWN = object()


def _ask(function: Any, arg: Any, name: str) -> Any:
    """rocm-bootstrap's answer, ``_UNKNOWN`` for its documented ValueError (an unknown target)."""
    try:
        return function(arg)
    except ValueError:
        return _UNKNOWN
    except Exception as exc:  # noqa: BLE001 - anything but its documented ValueError is a release this cannot read
        raise _odd(str(getattr(arg, "name", arg)), f"{name} raised {type(exc).__name__}: {printable(str(exc))}"
                   ) from None


def _odd(gfx: str, what: str) -> BootstrapError:
    return BootstrapError(f"answered oddly for {printable(gfx, 40)}: {what} (installed: {version()}; rocmlock reads "
                          f"{PIN})")


def _target_problem(target: Any) -> str:
    """What is wrong with ``lookup_target``'s answer ("" when nothing): the shape rocm-bootstrap 0.3 documents
    (rocm_bootstrap/targets.py: GfxTarget with name, major, minor, stepping and an XnackMode xnack)."""
    numbers = [getattr(target, n, None) for n in ("major", "minor", "stepping")]
    if not isinstance(getattr(target, "name", None), str) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return f"lookup_target gave {printable(repr(target), 80)}, not a target with a name and ISA numbers"
    if not isinstance(getattr(getattr(target, "xnack", None), "value", None), str):
        return f"lookup_target's xnack is {printable(repr(getattr(target, 'xnack', None)), 40)}, not an XnackMode"
    return ""


def _bundles(chain: Any) -> tuple[tuple[str, str], tuple[str, str]] | str:
    """``((sub-family key, its generic), (family key, its generic))`` of ``packaging_chain``'s answer (three
    TargetBundles with a key and an llvm_generic, str or None), or what is wrong with it."""
    if not isinstance(chain, tuple) or len(chain) != 3:
        return f"packaging_chain gave {printable(repr(chain), 80)}, not 3 bundles"
    out: list[tuple[str, str]] = []
    for bundle in chain[1:]:
        name, generic = getattr(bundle, "key", None), getattr(bundle, "llvm_generic", None)
        if not isinstance(name, str) or not isinstance(generic, str | None):
            return "packaging_chain gave bundles without a key or llvm_generic"
        out.append((name, generic or ""))
    return out[0], out[1]


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
