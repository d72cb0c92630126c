"""The bundle format of ``rocmlock pack`` / ``rocmlock unpack``: pixi-pack's layout plus rocmlock's metadata.

A bundle is an uncompressed tar that pixi-pack's ``pixi-unpack`` accepts as it is (checked against the
pixi-pack 0.7.10 source, QuantCo/pixi-pack ``src/lib.rs``, ``src/pack.rs``, ``src/unpack.rs``)::

    channel/<subdir>/<package>.conda     every package of the locked environment, nothing else
    channel/<subdir>/repodata.json       the lock's records, serialized by rattler (pixi-unpack installs
                                         every package these list; each directory of channel/ needs one)
    environment.yml                      ``./channel``, exact ``name=version=build`` pins (for conda; no
                                         ``nodefaults``, unlike pixi-pack's: see ``render_environment_yml``)
    pypi/<wheel>.whl                     the lock's PyPI wheels (:mod:`rocmlock.bundle.wheels`)
    pixi-pack.json                       ``{"version": "1", "pixi-pack-version": "0.7.10", "platform": <subdir>}``
    rocmlock-pack.json                   environment, GPU target, ROCm version, lock hash, every member's sha256
    rocmlock-pack.json.sig               (``--sign``) its OpenSSH signature (:mod:`rocmlock.bundle.signing`)
    installer/                           (``--with-installer``) wheels + install.sh; pixi-unpack ignores it

Nothing else: unpack refuses a member the metadata does not list (:mod:`rocmlock.bundle.admit`), and every
string of the metadata is checked (:func:`parse_metadata`) before a path is built from it.

Members are written like pixi-pack's tar-rs ``HeaderMode::Deterministic`` writes them: sorted depth-first by
name, owner 0:0 with no names, mode 0644/0755, the fixed mtime 1153704088 (tar-rs DETERMINISTIC_TIMESTAMP).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError
from rocmlock.gpu.targets import all_targets
from rocmlock.util.credentials import split_url
from rocmlock.util.text import escape
from rocmlock.workspace.platforms import KNOWN_SUBDIRS
from rocmlock.workspace.tables import ENVIRONMENT_NAME

CHANNEL_DIR = "channel"
PIXI_PACK_METADATA = "pixi-pack.json"
ROCMLOCK_METADATA = "rocmlock-pack.json"
# The OpenSSH signature of ROCMLOCK_METADATA's bytes (``pack --sign``; pixi-unpack ignores it).
SIGNATURE = f"{ROCMLOCK_METADATA}.sig"
PYPI_DIR = "pypi"
PACKAGE_EXTENSIONS = (".conda", ".tar.bz2")
ENVIRONMENT_FILE = "environment.yml"
INSTALLER_DIR = "installer"
# The environment's probe, relative to the prefix: the only program unpack runs (from rocm-env-check).
PROBE = "bin/rocm-env-check"
# What the metadata's strings may be: conda's package names, versions and build strings (rattler's
# PackageName / Version / BuildString characters, no '-' in the last two), pixi's platform names
# (rocmlock.workspace.platforms), ISA and ROCm versions, sha256 digests, wheel file names (PEP 427).
_PKG_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
_VERSION = re.compile(r"[A-Za-z0-9_.+!]+")
_BUILD = re.compile(r"[A-Za-z0-9_.+]+")
_PLATFORM = re.compile(r"[A-Za-z]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?")
_ISA = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
_ROCM = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+!]+-[A-Za-z0-9_.+!]+(-[A-Za-z0-9_.+!]+){2,3}\.whl")
REPODATA_KEYS = frozenset({"info", "packages", "packages.conda", "repodata_version"})
# pixi-pack's DEFAULT_PIXI_PACK_VERSION (src/lib.rs): the only format pixi-unpack accepts.
PIXI_PACK_FORMAT = "1"
PIXI_PACK_CHECKED = "0.7.10"
FORMAT = 2  # 2: every member's sha256 (``files``), checked strings
# tar-rs HeaderMode::Deterministic's mtime (not 0: some tools mishandle a zero timestamp).
FIXED_MTIME = 1153704088


@dataclass(frozen=True)
class BundledPackage:
    """One package file of the bundle's channel and the lock's identity of it."""

    subdir: str
    filename: str
    name: str
    version: str
    build: str
    sha256: str
    size: int
    # Where the lock has it (no credentials): the URL an unpacked prefix records for it, as `rocmlock install`'s
    # does, rather than the temporary directory it was installed from. None in bundles made before it was kept.
    url: str | None = None

    @property
    def member(self) -> str:
        """Its path inside the bundle."""
        return f"{CHANNEL_DIR}/{self.subdir}/{self.filename}"

    def to_json(self) -> dict[str, Any]:
        out = {"subdir": self.subdir, "file": self.filename, "name": self.name, "version": self.version,
               "build": self.build, "sha256": self.sha256, "size": self.size}
        return out if self.url is None else {**out, "url": self.url}


@dataclass(frozen=True)
class BundleMetadata:
    """What ``rocmlock-pack.json`` says: which environment, for which GPU and ROCm, made from which lock."""

    environment: str
    platform: str
    subdir: str
    gpu_target: str | None
    gpu_isa: str | None
    rocm_version: str | None
    lock_sha256: str
    rocmlock_version: str
    probe: str | None
    packages: tuple[BundledPackage, ...]
    # Every other file member (environment.yml, pixi-pack.json, repodata.json, installer/...) -> its sha256.
    files: dict[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "environment": self.environment, "platform": self.platform, "subdir": self.subdir,
            "gpu": None if self.gpu_target is None else {"target": self.gpu_target, "isa": self.gpu_isa},
            "rocm-version": self.rocm_version, "lock-sha256": self.lock_sha256,
            "rocmlock-version": self.rocmlock_version, "probe": self.probe,
            "packages": [p.to_json() for p in self.packages], "files": dict(sorted(self.files.items())),
        }

    def render(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def render_pixi_pack_json(subdir: str) -> str:
    """pixi-pack.json as pixi-unpack reads it (``PixiPackMetadata``, kebab-case keys).

    ``pixi-pack-version`` is the pixi-pack release whose format this is: pixi-unpack warns on every run when
    the field is not its own version (``validate_metadata_file`` in src/unpack.rs compares it with
    ``Some(CARGO_PKG_VERSION)``), so null made every pixi-unpack warn, and 0.7.10's does not.
    """
    data = {"version": PIXI_PACK_FORMAT, "pixi-pack-version": PIXI_PACK_CHECKED, "platform": subdir}
    return json.dumps(data, indent=2) + "\n"


# pixi-unpack never reads environment.yml (src/unpack.rs reads pixi-pack.json and channel/*/repodata.json;
# pixi-pack's README: it is "only for this use case", conda or micromamba on the node), so the file serves
# conda alone and differs from pixi-pack's in one line: no `- nodefaults`. conda 26.7's `env create` is
# `create` (conda/cli/install.py), which fetches `nodefaults` as a channel and fails, with network or without;
# before 26.7 the .condarc channels come in instead, unreachable on an air-gapped node, and `--offline` (in
# `env create` since 23.11 at least) skips every channel that is not file:// (conda/gateways/repodata/
# __init__.py). Checked by hand with conda 23.11.0, 24.11.3 and 26.7.1 (docs/air-gapped.md).
_YML_NOTES = (
    "# From this directory (the extracted bundle), with no network needed (conda 23.11-26.7):",
    "#   conda env create -p ./env -f environment.yml --offline",
    "# --offline keeps the channels of your .condarc out (unreachable here); only ./channel is read.",
    "# No `nodefaults` (pixi-pack writes one; pixi-unpack does not read this file): conda 26.7+ fetches it.",
)
_PIP_NOTE = ("# python without pip: conda adds pip to python's dependencies (add_pip_as_python_dependency); "
             "run it with CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false")


def render_environment_yml(environment: str, packages: tuple[BundledPackage, ...],
                           wheels: tuple[tuple[str, str], ...] = ()) -> str:
    """environment.yml for conda on the node: the bundle's channel (relative to the extracted bundle), exact pins;
    PyPI ``wheels`` (name, version) in a ``pip:`` section from ``./pypi`` only, as pixi-pack writes it."""
    names = {p.name for p in packages}
    pip_note = [_PIP_NOTE] if "python" in names and "pip" not in names and not wheels else []
    lines = [f"# {environment}, packed by rocmlock.", *_YML_NOTES, *pip_note,
             "channels:", f"  - ./{CHANNEL_DIR}", "dependencies:"]
    lines += [f"  - {p.name}={p.version}={p.build}" for p in sorted(packages, key=lambda p: p.name)]
    if wheels:
        lines += ["  - pip:", "    - --no-index", f"    - --find-links ./{PYPI_DIR}"]
        lines += [f"    - {name}=={version}" for name, version in sorted(wheels)]
    return "\n".join(lines) + "\n"


def _bad(label: str, key: str, what: str) -> InputError:
    return InputError(f"{label}: key '{key}' {what}",
                      hint="the bundle is damaged or was not made by `rocmlock pack`; pack it again")


def _field(data: dict[str, Any], key: str, kind: type, label: str, optional: bool = False,
           pattern: re.Pattern[str] | None = None) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _bad(label, key, f"must be a {kind.__name__}")
    if pattern is not None and not pattern.fullmatch(str(value)):
        raise _bad(label, key, f"'{escape(str(value))}' is not a valid value")
    return value


def package_file_problem(name: str, version: str, build: str, filename: str) -> str | None:
    """Why ``filename`` is not the plain ``<name>-<version>-<build>.conda|.tar.bz2`` of that package, else None.

    rattler percent-decodes a file name it turns into a URL (``%2e%2e%2f`` is ``../``), so a name with
    anything but the characters of conda's names, versions and builds would install another file than
    the one checked."""
    checks: tuple[tuple[str, str, re.Pattern[str]], ...] = (
        ("name", name, _PKG_NAME), ("version", version, _VERSION), ("build", build, _BUILD))
    for key, value, pattern in checks:
        if not pattern.fullmatch(value):
            return f"its {key} '{escape(value)}' is not a conda {key}"
    ext = next((e for e in PACKAGE_EXTENSIONS if filename.endswith(e)), None)
    stem = filename[: -len(ext)] if ext else ""
    tail = f"-{version}-{build}"
    if ext is None or ".." in filename or not stem.endswith(tail) or stem[: -len(tail)].lower() != name:
        return f"its file '{escape(filename)}' is not {name}{tail}.conda or .tar.bz2"
    return None


def _package(item: Any, label: str, subdirs: tuple[str, ...]) -> BundledPackage:
    if not isinstance(item, dict):
        raise _bad(label, "packages", "must list objects")
    values = {k: _field(item, k, str, label) for k in ("subdir", "file", "name", "version", "build")}
    if values["subdir"] not in subdirs:
        raise _bad(label, "packages", f"names a file outside the channel: {escape(values['subdir'])}/"
                                      f"{escape(values['file'])}")
    problem = package_file_problem(values["name"], values["version"], values["build"], values["file"])
    if problem:
        raise _bad(label, "packages", f"has a package whose {problem}")
    size = _field(item, "size", int, label)
    if size < 0:
        raise _bad(label, "packages", "has a negative size")
    url = _field(item, "url", str, label, optional=True)
    if url is not None and (problem := lock_url_problem(url, values["file"])):
        raise _bad(label, "packages", f"has a package whose url {problem}")
    return BundledPackage(values["subdir"], values["file"], values["name"], values["version"], values["build"],
                          _field(item, "sha256", str, label, pattern=_SHA256), size, url)


# A lock's package URL as a bundle may carry it: RFC 3986's characters less '?', '#', '@' and space (no query,
# fragment or user information: where credentials would be).
_URL = re.compile(r"(https?|file)://[A-Za-z0-9._~:/%+=,;!$&'()*\[\]-]{1,2040}")


def lock_url_problem(url: str, filename: str) -> str | None:
    """Why ``url`` is not a plain http(s)/file URL of ``filename`` without credentials, else None (it goes into
    the unpacked prefix's records)."""
    if not _URL.fullmatch(url):
        return f"'{escape(url[:200])}' is not a plain http(s) or file URL"
    if split_url(url).secrets:
        return "holds a credential"
    if not url.endswith("/" + filename):
        return f"'{escape(url[:200])}' is not the URL of {escape(filename)}"
    return None


def file_member_problem(member: str, subdirs: tuple[str, ...]) -> str | None:
    """Why ``member`` is not a file the format defines besides the packages and the metadata, else None."""
    parts = member.split("/")
    if member in (ENVIRONMENT_FILE, PIXI_PACK_METADATA, f"{INSTALLER_DIR}/install.sh"):
        return None
    if len(parts) == 3 and parts[0] == CHANNEL_DIR and parts[1] in subdirs and parts[2] == "repodata.json":
        return None
    wheel = len(parts) == 3 and parts[:2] == [INSTALLER_DIR, "wheels"] or len(parts) == 2 and parts[0] == PYPI_DIR
    if wheel and WHEEL_NAME.fullmatch(parts[-1]) and ".." not in parts[-1]:
        return None
    return f"'{escape(member)}' is not a member the bundle format defines"


def _files(data: dict[str, Any], label: str, subdirs: tuple[str, ...],
           packages: tuple[BundledPackage, ...]) -> dict[str, str]:
    files = _field(data, "files", dict, label)
    for member, digest in files.items():
        problem = file_member_problem(member, subdirs)
        if problem:
            raise _bad(label, "files", problem)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _bad(label, "files", f"has no sha256 for '{escape(member)}'")
    used = sorted({"noarch", *(p.subdir for p in packages)})  # pack writes these repodata.json files
    for needed in (ENVIRONMENT_FILE, PIXI_PACK_METADATA, *(f"{CHANNEL_DIR}/{s}/repodata.json" for s in used)):
        if needed not in files:
            raise _bad(label, "files", f"lacks {needed}")
    return dict(sorted(files.items()))


def parse_metadata(raw: bytes, label: str) -> BundleMetadata:
    """``rocmlock-pack.json``'s bytes as metadata, every string checked before any path is built from it:
    environment a pixi environment name, platform a pixi platform name, subdir a known one, the GPU a
    known target, package files plain file names, every other member one the format defines."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{label}: cannot read it: {exc}", hint="pack the environment again") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(label, "format", f"must be {FORMAT} (made by another rocmlock version?)")
    gpu = {f"gpu.{k}": v for k, v in (_field(data, "gpu", dict, label, optional=True) or {}).items()}
    if data.get("probe") not in (None, PROBE):  # unpack runs <prefix>/<probe>: never a path of the host
        raise _bad(label, "probe", f"must be null or {PROBE}")
    subdir = _field(data, "subdir", str, label)
    if subdir not in KNOWN_SUBDIRS:
        raise _bad(label, "subdir", f"'{escape(subdir)}' is not a conda subdir")
    gfx = _field(gpu, "gpu.target", str, label, optional=True)
    if gfx is not None and gfx not in all_targets():
        raise _bad(label, "gpu.target", f"'{escape(gfx)}' is not a GPU target rocmlock knows")
    subdirs = tuple(sorted({subdir, "noarch"}))
    packages = tuple(_package(item, label, subdirs) for item in _field(data, "packages", list, label))
    return BundleMetadata(
        environment=_field(data, "environment", str, label, pattern=ENVIRONMENT_NAME),
        platform=_field(data, "platform", str, label, pattern=_PLATFORM), subdir=subdir,
        gpu_target=gfx, gpu_isa=_field(gpu, "gpu.isa", str, label, True, _ISA),
        rocm_version=_field(data, "rocm-version", str, label, optional=True, pattern=_ROCM),
        lock_sha256=_field(data, "lock-sha256", str, label, pattern=_SHA256),
        rocmlock_version=_field(data, "rocmlock-version", str, label, pattern=_VERSION),
        probe=_field(data, "probe", str, label, optional=True), packages=packages,
        files=_files(data, label, subdirs, packages),
    )


def expected_members(meta: BundleMetadata) -> tuple[dict[str, str], set[str]]:
    """The bundle's file members with their sha256 (all but the metadata and its signature), and its directories."""
    files = {**meta.files, **{p.member: p.sha256 for p in meta.packages}}
    dirs = {"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)}
    return files, dirs


def index_mismatch(channel: Path, packages: tuple[BundledPackage, ...]) -> str | None:
    """The first difference between the channel's repodata and ``packages`` (name, version, build, sha256),
    or a field of a repodata.json that would make rattler take a package from elsewhere than this channel."""
    indexed: dict[tuple[str, str], tuple[str, ...]] = {}
    for repodata in sorted(channel.glob("*/repodata.json")):
        try:
            data = json.loads(repodata.read_text())
            redirect = _redirect(data, repodata.parent.name)
            if redirect:
                return f"{repodata.relative_to(channel.parent)}: {redirect}"
            for section in ("packages", "packages.conda"):
                for fn, rec in data.get(section, {}).items():
                    indexed[(repodata.parent.name, fn)] = (rec["name"], rec["version"], rec["build"],
                                                           rec.get("sha256"))
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            return f"{repodata.relative_to(channel.parent)}: cannot read it: {escape(str(exc))}"
    wanted = {(p.subdir, p.filename): (p.name, p.version, p.build, p.sha256) for p in packages}
    for key in sorted(wanted.keys() | indexed.keys()):
        if wanted.get(key) != indexed.get(key):
            return escape(f"{CHANNEL_DIR}/{key[0]}/{key[1]}: the channel's repodata.json says {indexed.get(key)}, "
                          f"the metadata {wanted.get(key)}")
    return None


def _redirect(data: Any, subdir: str) -> str | None:
    """What in a repodata.json would send rattler elsewhere: ``info.base_url`` (CEP-15, repodata_version 2),
    any other key than pack writes, a record naming its own URL, file or channel."""
    if not isinstance(data, dict) or set(data) - REPODATA_KEYS or data.get("info") != {"subdir": subdir}:
        return (f"has keys {escape(str(sorted(data) if isinstance(data, dict) else data))[:200]} or an info "
                f"other than {{'subdir': '{subdir}'}} (a base_url would install packages from outside the bundle)")
    if data.get("repodata_version", 1) != 1:
        return "repodata_version must be 1"
    for section in ("packages", "packages.conda"):
        for fn, rec in data.get(section, {}).items():
            if not isinstance(rec, dict) or rec.keys() & {"url", "fn", "channel", "base_url"}:
                return f"the record of '{escape(str(fn))}' names a url, file or channel of its own"
            if rec.get("subdir") != subdir:
                return f"the record of '{escape(str(fn))}' is for another subdir"
    return None


# ----------------------------------------------------------------------------- the tar


@dataclass(frozen=True)
class Member:
    """One tar member: a directory, inline ``data``, a file at ``path``, or (neither) ``size`` bytes filled later."""

    name: str
    size: int = 0
    data: bytes | None = None
    path: Path | None = None
    is_dir: bool = False
    executable: bool = False

    @property
    def deferred(self) -> bool:
        return not self.is_dir and self.data is None and self.path is None


def sort_members(members: list[Member]) -> list[Member]:
    """Depth-first, siblings by name: walkdir's ``sort_by_file_name`` order, as pixi-pack walks its directory."""
    return sorted(members, key=lambda m: tuple(part.encode() for part in m.name.split("/")))


def members_of_tree(root: Path, prefix: str) -> list[Member]:
    """Every directory and file below ``root`` as members named ``prefix/...`` (``prefix`` itself included)."""
    out = [Member(prefix, is_dir=True)]
    for path in sorted(root.rglob("*")):
        name = f"{prefix}/{path.relative_to(root).as_posix()}"
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            out.append(Member(name, is_dir=True))
        elif stat.S_ISREG(mode):
            out.append(Member(name, size=path.stat().st_size, path=path, executable=bool(mode & 0o111)))
        else:
            raise InputError(f"{path}: not a regular file or directory; a bundle holds only those",
                             hint="remove it from the bundle directory, or pack the bundle again")
    return out


def _tarinfo(member: Member) -> tarfile.TarInfo:
    info = tarfile.TarInfo(member.name)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if member.is_dir:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size = len(member.data) if member.data is not None else member.size
        info.mode = 0o755 if member.executable else 0o644
    return info


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _copy_data(src: Path, fd: int, size: int) -> None:
    """``size`` bytes of ``src`` to ``fd`` in the kernel (``copy_file_range``) where it can, else through Python."""
    with src.open("rb") as fh:
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(fh.fileno(), fd, size - done)
                if n == 0:
                    break
                done += n
        except (AttributeError, OSError):  # no such call, or not between these two files (a pipe, another FS)
            fh.seek(done)
            while done < size and (chunk := fh.read(min(1 << 20, size - done))):
                _write_all(fd, chunk)
                done += len(chunk)
    if done != size:
        raise OSError(f"{src}: changed size while it was archived")


def write_tar(members: list[Member], fd: int) -> dict[str, int]:
    """Write ``members`` (in the order given) to the file descriptor ``fd`` as a deterministic GNU tar.

    The bytes are the ones ``tarfile`` writes for the same members (headers from ``TarInfo.tobuf``, data
    padded to 512-byte blocks, two zero blocks, padding to a 10240-byte record). Deferred members get
    their header and a hole of their size: the caller writes their bytes at the returned offsets (so
    packages go straight from the network into the bundle, one pass and no second copy on disk).
    """
    offsets: dict[str, int] = {}
    for member in members:
        info = _tarinfo(member)
        _write_all(fd, info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
        if member.is_dir:
            continue
        if member.data is not None:
            _write_all(fd, member.data)
        elif member.path is not None:
            _copy_data(member.path, fd, info.size)
        else:
            offsets[member.name] = os.lseek(fd, info.size, os.SEEK_CUR) - info.size
        _write_all(fd, tarfile.NUL * (-info.size % tarfile.BLOCKSIZE))
    end = os.lseek(fd, 0, os.SEEK_CUR) + 2 * tarfile.BLOCKSIZE
    _write_all(fd, tarfile.NUL * (2 * tarfile.BLOCKSIZE + -end % tarfile.RECORDSIZE))
    return offsets
