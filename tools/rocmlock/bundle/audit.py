"""``rocmlock audit``: which files of an environment hold GPU code, for which targets, and which cannot run on its GPU.

Three sources, none installed or extracted: a conda prefix (``--prefix``; the target defaults to its
``amdgpu-target`` package in ``conda-meta/``), a bundle of ``rocmlock pack`` (the tar, or the directory it was
extracted to; the target defaults to the bundle's), or one package file (the target defaults to its build
string's). The reading is :mod:`rocmlock.gpu.devicecode`; this module picks the target, walks the source and
renders the report. ``rocmlock unpack`` runs :func:`check_bundle_for_node` as part of its node check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import re
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rocmlock.bundle.layout import CHANNEL_DIR, ROCMLOCK_METADATA, BundleMetadata, parse_metadata
from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.devicecode import (
    DeviceCode,
    build_string_of,
    build_string_target,
    cannot_run,
    scan_package,
    scan_tree,
    with_kpack,
)
from rocmlock.gpu.offload import MACH, OffloadError, TargetId, parse_target_id, shown, sorted_names
from rocmlock.gpu.targets import all_targets
from rocmlock.util.fs import open_regular, read_regular
from rocmlock.util.tables import did_you_mean
from rocmlock.util.text import escape, format_table

_AMDGPU_TARGET = re.compile(r"amdgpu-target-[^-]+-(gfx[0-9]+[0-9a-f]{2})\.json")
PACKAGE_SUFFIXES = (".conda", ".tar.bz2")
_TARGET_HINT = "pass --target gfxNNN (e.g. gfx942, or gfx942:xnack- where the GPU's xnack mode is known)"


@dataclass(frozen=True)
class AuditReport:
    """The device code found in ``source`` and the verdict against ``target``."""

    source: str
    target: TargetId | None  # None: a package with no device code and no GPU target (noarch, CPU-only)
    target_from: str
    files: tuple[DeviceCode, ...]

    @property
    def failing(self) -> tuple[DeviceCode, ...]:
        return () if self.target is None else tuple(cannot_run(self.files, self.target))

    @property
    def ok(self) -> bool:
        return not self.failing

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": None if self.target is None else str(self.target),
                "target_from": self.target_from,
                "ok": self.ok, "files": [f.to_dict() for f in self.files],
                "cannot_run": [f.path for f in self.failing]}

    def render(self) -> str:
        """The report for people: one row per file with device code, then the verdict."""
        if self.target is None:
            return (f"device code in {self.source}: none (no HIP library or code object); a package without GPU "
                    "code (noarch or CPU-only) runs with any GPU, so there is no target to check")
        lines = [f"device code in {self.source}, checked against {self.target} ({self.target_from})"]
        if self.files:
            failing = {f.path for f in self.failing}
            rows = [("", "file", "holds")]
            rows += [("FAIL" if f.path in failing else "ok", f.path, _holds(f)) for f in self.files]
            lines += format_table(rows)
        verdict = (f"{len(self.files)} file(s) with device code, all can run on {self.target}" if self.ok else
                   f"{len(self.failing)} of {len(self.files)} file(s) with device code cannot run on {self.target}: "
                   + ", ".join(f.path for f in self.failing))
        lines.append(verdict if self.files else "no device code found (no HIP library or code object)")
        return "\n".join(lines)


def _holds(code: DeviceCode) -> str:
    if code.error:
        return code.error if code.kind == "kpack" else f"unreadable: {code.error}"
    where = code.via or {"fatbin": f"{code.bundles} bundle(s)", "aks2": "AOTriton archive",
                         "offload-bundle": f"code object file of {code.bundles} bundle(s)"}.get(code.kind, "code object")
    return f"{', '.join(sorted_names(code.targets))} ({where})"


def gpu_target(text: str, where: str = "--target") -> TargetId:
    """A GPU's target ID from the command line; InputError for a name that is none."""
    try:
        target = parse_target_id(text)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}{did_you_mean(text.split(':', 1)[0].lower(), all_targets())}",
                         hint=_TARGET_HINT) from None
    if target.generic or target.processor == "amdgcnspirv":
        raise InputError(f"{where}: '{text}' is a compilation target, not a GPU", hint=_TARGET_HINT)
    # A well-formed name LLVM has no processor for (gfx9999) would be audited and every file reported as unable
    # to run there: an unknown GPU is the user's typo, said as such. Known: LLVM's processors (MACH) and ours.
    known = {*MACH.values(), *all_targets()}
    if target.processor not in known:
        ours = ", ".join(all_targets())
        raise InputError(f"{where}: unknown GPU target '{target.processor}'{did_you_mean(target.processor, known)}",
                         hint=f"rocmlock's targets: {ours}")
    # A GPU without XNACK has no xnack mode: LLVM calls the setting "Unsupported" there (llvm-project 2291bd1,
    # D85882) and clang refuses such a target ID (clang/lib/Basic/TargetID.cpp, the features a processor allows), so
    # no code is built for gfx1100:xnack-. rocmlock's table says which of its GPUs have it (checked against AMD's).
    row = all_targets().get(target.processor)
    if row is not None and row.xnack == "unsupported" and target.xnack != "any":
        plain = str(TargetId(target.processor, target.sramecc))
        raise InputError(f"{where}: '{text}': {target.processor} has no XNACK, so no xnack mode to name",
                         hint=f"pass {plain} (rocmlock's GPU table: xnack unsupported on {target.processor})")
    return target


# ----------------------------------------------------------------------------- a prefix


def prefix_target(prefix: Path) -> str | None:
    """The gfx target of the ``amdgpu-target`` package installed in ``prefix`` (its build string)."""
    meta = prefix / "conda-meta"
    found = sorted(m.group(1) for p in meta.glob("amdgpu-target-*.json") if (m := _AMDGPU_TARGET.fullmatch(p.name)))
    if len(found) > 1:
        raise InputError(f"{meta}: {len(found)} amdgpu-target packages ({', '.join(found)}); an environment has one",
                         hint=_TARGET_HINT)
    return found[0] if found else None


def audit_prefix(prefix: Path, target: str | None = None) -> AuditReport:
    """Every file with device code in the conda prefix ``prefix``, against ``target`` or the prefix's own."""
    if not prefix.is_dir():
        raise InputError(f"--prefix {prefix}: {'not a directory' if prefix.exists() else 'no such directory'}",
                         hint="pass --prefix the environment's directory")
    if target is None:
        found = prefix_target(prefix)
        if found is None:
            raise InputError(f"{prefix}: no amdgpu-target package in conda-meta/ to take the GPU target from",
                             hint=_TARGET_HINT)
        gpu, origin = gpu_target(found, "amdgpu-target"), "the prefix's amdgpu-target package"
    else:
        gpu, origin = gpu_target(target), "--target"
    return AuditReport(str(prefix), gpu, origin, tuple(scan_tree(prefix)))


# ----------------------------------------------------------------------------- a bundle, a package


def audit_path(path: Path, target: str | None = None) -> AuditReport:
    """The packages of a bundle (tar or extracted directory), or one package file, against ``target`` or theirs."""
    _regular_or_dir(path)
    if path.is_file() and path.name.endswith(PACKAGE_SUFFIXES):
        return _audit_package(path, target)
    if path.is_dir() and not (path / ROCMLOCK_METADATA).is_file():
        raise InputError(f"{path}: not a bundle of `rocmlock pack` (no {ROCMLOCK_METADATA})",
                         hint="for an installed environment use `rocmlock audit --prefix DIR`")
    if not path.exists():
        raise InputError(f"{path}: no such file", hint="check the path")
    with _opened_bundle(path) as (meta, open_package):
        if target is not None:
            gpu, origin = gpu_target(target), "--target"
        elif meta.gpu_target is None:
            raise InputError(f"{path}: environment '{meta.environment}' has no GPU target", hint=_TARGET_HINT)
        else:
            gpu, origin = gpu_target(meta.gpu_target, ROCMLOCK_METADATA), "the bundle's GPU target"
        files = tuple(_bundle_files(meta, open_package, path))
    return AuditReport(str(path), gpu, origin, files)


def _regular_or_dir(path: Path) -> None:
    """Refuse a FIFO (reading it would wait for a writer) or a device (``/dev/zero`` never ends), links to them
    included, before anything opens ``path``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{escape(str(path))}: no such file", hint="check the path") from None
    except OSError as exc:
        raise InputError(f"{escape(str(path))}: cannot read: {exc.strerror}",
                         hint="check its permissions") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{escape(str(path))}: not a regular file or directory",
                         hint="pass a bundle (its tar or the directory it was extracted to) or a package file")


def _audit_package(path: Path, target: str | None) -> AuditReport:
    build = build_string_of(path.name)
    from_build = build_string_target(build)
    gpu = gpu_target(target) if target is not None else None  # a bad --target before the package is read
    try:
        files = tuple(scan_package(path, path.name))
    except OffloadError as exc:
        raise InputError(f"{path.parent}/{exc}", hint="download or build the package again") from None
    except OSError as exc:
        raise _node_error(path, exc) from None
    if gpu is not None:
        return AuditReport(str(path), gpu, "--target", files)
    if from_build is not None:
        return AuditReport(str(path), gpu_target(from_build), "the build string", files)
    if not files:  # a noarch or CPU-only package: nothing that could fail on a GPU, whatever the target
        return AuditReport(str(path), None, "no GPU code", files)
    raise InputError(f"{path}: its build string '{shown(build)}' names no GPU target", hint=_TARGET_HINT)


def _node_error(path: Path, exc: OSError) -> OperationError:
    """A read that failed in this machine's disk or file system (EIO, EACCES, ...): not the package's fault."""
    return OperationError(f"cannot read {path}: {exc.strerror or exc} (an error of this machine's disk or file "
                          "system, not of the package)", hint="check the disk and the file's permissions, then run "
                          "again")


Opener = Callable[[str], IO[bytes]]


@contextlib.contextmanager
def _opened_bundle(path: Path) -> Iterator[tuple[BundleMetadata, Opener]]:
    """The bundle's metadata and a way to open each of its package files, for a tar or a directory."""
    if path.is_dir():
        meta_file = path / ROCMLOCK_METADATA
        raw = None if meta_file.is_symlink() or not meta_file.is_file() else \
            read_regular(meta_file, _METADATA_LIMIT, "a bundle's metadata is a file")
        yield _metadata(raw, path), lambda member: open_regular(path / member, "a bundle's package is a file",
                                                                hint="pack the environment again")
        return
    if path.name.endswith(".whl"):
        raise InputError(f"{path}: a wheel; rocmlock audit reads conda packages (.conda, .tar.bz2), bundles of "
                         "`rocmlock pack` (tar or directory) and installed environments (--prefix DIR)",
                         hint="install the wheel into an environment, then `rocmlock audit --prefix DIR`")
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by the `with tar` below
    except (tarfile.TarError, OSError) as exc:
        raise InputError(f"{path}: not a conda package (.conda, .tar.bz2) or a bundle of `rocmlock pack` ({exc})",
                         hint="pass a package, a bundle (tar or directory), or --prefix DIR for an environment") \
            from None
    with tar:
        def open_member(member: str) -> IO[bytes]:
            source = _member(tar, member)
            if source is None:
                raise InputError(f"{path}: {member} is missing", hint="pack the environment again")
            return source

        yield _tar_metadata(tar, path), open_member


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes] | None:
    try:
        return tar.extractfile(name)
    except (KeyError, tarfile.TarError):
        return None


def _tar_metadata(tar: tarfile.TarFile, path: Path) -> BundleMetadata:
    """rocmlock-pack.json read from the tar and validated (bundle.parse_metadata) before any name in it is used."""
    source = _member(tar, ROCMLOCK_METADATA)
    if source is None:
        return _metadata(None, path)
    with source:
        return _metadata(source.read(_METADATA_LIMIT), path)


_METADATA_LIMIT = 1 << 24


def _metadata(raw: bytes | None, path: Path) -> BundleMetadata:
    if raw is None:
        raise InputError(f"{path}: no {ROCMLOCK_METADATA}: not a bundle of `rocmlock pack`",
                         hint="a plain pixi-pack bundle installs with `pixi-unpack`")
    return parse_metadata(raw, f"{path}: {ROCMLOCK_METADATA}")


def _bundle_files(meta: BundleMetadata, open_package: Opener, shown_as: Path) -> list[DeviceCode]:
    """The device code of every package the bundle's metadata lists (names validated by bundle.parse_metadata); a
    kpacked library's archives are looked up in every package (installed, they share one prefix)."""
    return with_kpack(_package_files(meta, open_package, shown_as), lambda path: path.split("/", 1)[1])


def _package_files(meta: BundleMetadata, open_package: Opener, shown_as: Path) -> Iterator[DeviceCode]:
    for package in sorted(meta.packages, key=lambda p: (p.subdir, p.filename)):
        member = f"{CHANNEL_DIR}/{package.subdir}/{package.filename}"
        try:
            with open_package(member) as source:
                found = scan_package(source, package.filename)
        except OffloadError as exc:
            raise InputError(f"{shown_as}: {exc}", hint="pack the environment again") from None
        except OSError as exc:  # scan_package lets through only the errors of a disk or file system
            raise _node_error(shown_as / member, exc) from None
        for code in found:
            yield dataclasses.replace(code, path=f"{package.filename}/{code.path}")


# ----------------------------------------------------------------------------- unpack's node check


def check_bundle_for_node(where: Path, meta: BundleMetadata, node_gpus: tuple[str, ...], force: bool) -> str:
    """A line for unpack's log: the extracted bundle ``where`` audited against the node's GPUs of the bundle's
    target; raises OperationError naming the files that cannot run there (unless ``force``)."""
    gpus = sorted({g for g in node_gpus if g == meta.gpu_target})
    if not gpus:
        return "device code check: no GPU of the bundle's target on this node; nothing to check"
    if importlib.util.find_spec("zstandard") is None:
        # The bundle's installer (--with-installer) brings rocmlock and py-rattler only; zstandard's wheels are
        # per Python version. `rocmlock audit BUNDLE` where rocmlock is installed does the same check.
        return ("device code check skipped: the zstandard module is not installed (`pip install zstandard`, "
                "or run `rocmlock audit BUNDLE` where rocmlock is installed)")
    with _opened_bundle(where) as (_meta, open_package):
        files = tuple(_bundle_files(meta, open_package, where))
    report = AuditReport(str(where), gpu_target(gpus[0]), "this node's GPU", files)
    if report.ok:
        return f"device code check: {len(files)} file(s) with GPU code, all run on this node's {gpus[0]}"
    names = ", ".join(f.path for f in report.failing)
    if force:
        return f"device code check ignored (--force): cannot run on {gpus[0]}: {names}"
    raise OperationError(f"the bundle holds GPU code that cannot run on this node's {gpus[0]}: {names}",
                         hint="rebuild those packages for this target (`rocmlock audit BUNDLE` lists what they "
                              "hold); --force installs anyway")

