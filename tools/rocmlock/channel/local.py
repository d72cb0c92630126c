"""The package files a publish sends: a build output directory's (or a channel's) ``<subdir>/*.conda``, each
checked to be what the destination's index will list under its name, before anything is uploaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmlock.channel.repodata import PACKAGE_SUFFIXES
from rocmlock.errors import InputError
from rocmlock.util.fs import file_sha256
from rocmlock.util.text import escape


@dataclass(frozen=True)
class LocalPackage:
    path: Path
    subdir: str

    @property
    def name(self) -> str:
        return self.path.name.rsplit("-", 2)[0]

    @property
    def key(self) -> str:
        return f"{self.subdir}/{self.path.name}"

    def sha256(self) -> str:
        return file_sha256(self.path)


def local_packages(source: Path) -> list[LocalPackage]:
    """Package files under ``source/<subdir>/``, sorted (a build output directory or a channel)."""
    if not source.is_dir():
        what = "not a directory" if source.exists() else "no such directory"
        raise InputError(f"--from {source}: {what}", hint="run `rocmlock build` first or pass --from")
    found = [LocalPackage(p, sub.name) for sub in sorted(source.iterdir()) if sub.is_dir()
             for p in sorted(sub.iterdir()) if p.name.endswith(PACKAGE_SUFFIXES) and p.is_file()]
    if not found:
        raise InputError(f"--from {source}: no package files in {source}/<subdir>/",
                         hint="pass the output directory of rocmlock build (it holds linux-64/, noarch/)")
    for package in found:
        _check_package(package)
    return found


def _check_package(package: LocalPackage) -> None:
    """A package that the channel's index would list under its file name and subdir: the file name is the
    name-version-build of its ``info/index.json`` and the directory its subdir. Otherwise it was "uploaded" and
    then missing from repodata.json (rattler's index names what the archive says), invisible to every client."""
    from rattler import Platform
    from rattler.package import IndexJson

    shown = escape(str(package.path))
    if package.subdir not in {"noarch", *(str(p) for p in Platform.all())}:
        raise InputError(f"--from {shown}: in {escape(package.subdir)}/, which is no conda subdir",
                         hint="packages go in <subdir>/ as rattler-build writes them: noarch/, linux-64/, ...")
    try:
        index = IndexJson.from_package_archive(package.path)
    except Exception as exc:  # noqa: BLE001 - rattler's reader raises its own types
        raise InputError(f"--from {shown}: not a conda package rattler can read "
                         f"({escape(str(exc).splitlines()[0][:200]) if str(exc) else type(exc).__name__})",
                         hint="publish what rattler-build wrote, as it wrote it") from None
    stem = package.path.name.removesuffix(".conda").removesuffix(".tar.bz2")
    inside = f"{index.name.normalized}-{index.version}-{index.build}"
    if stem.lower() != inside.lower():
        raise InputError(f"--from {shown}: its file name says {escape(stem)}, its info/index.json {escape(inside)}",
                         hint="publish packages under the file names rattler-build gave them")
    if index.subdir and index.subdir != package.subdir:
        raise InputError(f"--from {shown}: in {escape(package.subdir)}/, but built for {escape(index.subdir)}",
                         hint=f"move it to {escape(index.subdir)}/")
