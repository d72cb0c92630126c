"""``--base debootstrap:SUITE[:PKG,...]``: a Debian base image made here, without a registry, reproducibly.

``debootstrap --variant=minbase`` (plus the packages named) installs Debian's ``SUITE`` from its package mirror
(``$ROCMLOCK_DEBIAN_MIRROR``, else deb.debian.org) into a scratch directory, and the tree becomes one layer of an
OCI layout cached under ``<cache>/bases/`` (``$ROCMLOCK_CACHE_DIR``, else ``$XDG_CACHE_HOME/rocmlock``, else
``~/.cache/rocmlock``): made once (debootstrap needs root), then reused by any user who can read it.

Reproducible: the same mirror state gives the same digest. What debootstrap leaves that depends on the day or the
machine is removed or fixed before the tree is written: logs, apt's lists and caches, ``*-old`` backups,
ldconfig's aux-cache, the host's ``resolv.conf``/``hostname`` (runtimes provide them), Python's byte code
(regenerated on use), the day of ``/etc/shadow``'s last password change. The layer keeps what a system needs
(owners, setuid and sticky bits, hard links), with entries sorted, no user names, and every time clamped to
the suite's ``Release`` date, which is also the image's ``created`` (the mirror's state, not the build's
clock). ``/dev`` stays empty (the runtime mounts it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.image import oci
from rocmlock.image.ociref import DEBOOTSTRAP
from rocmlock.util.credentials import one_line, redact_text, split_url
from rocmlock.util.pgzip import FORMAT as PGZIP_FORMAT
from rocmlock.util.pgzip import ParallelGzip

DEFAULT_MIRROR = "http://deb.debian.org/debian"
TAG = "base"
RECIPE = 1  # bump when the tree's clean-up or the layer's tar changes: the cached bases are made again
_SUITE = re.compile(r"[a-z][a-z0-9-]{1,30}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,63}")  # Debian policy 5.6.1, bounded
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Spec:
    suite: str
    include: tuple[str, ...]

    def __str__(self) -> str:
        return DEBOOTSTRAP + self.suite + (":" + ",".join(self.include) if self.include else "")


def parse(ref: str) -> Spec:
    """``debootstrap:SUITE[:PKG,PKG...]``; one line naming what is wrong otherwise."""
    suite, _, extra = ref.removeprefix(DEBOOTSTRAP).partition(":")
    if not _SUITE.fullmatch(suite):
        raise InputError(f"--base {ref[:80]!r}: {suite[:40]!r} is not a Debian suite name",
                         hint="debootstrap:SUITE[:PKG,...], e.g. debootstrap:bookworm or debootstrap:bookworm:python3")
    include = tuple(extra.split(",")) if extra else ()
    bad = next((p for p in include if not _PACKAGE.fullmatch(p)), None)
    if bad is not None:
        raise InputError(f"--base {ref[:80]!r}: {bad[:40]!r} is not a Debian package name",
                         hint="packages to add are comma-separated: debootstrap:bookworm:python3,ca-certificates")
    return Spec(suite, tuple(sorted(set(include))))


def cache_root() -> Path:
    if env := os.environ.get("ROCMLOCK_CACHE_DIR"):
        return Path(env)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "rocmlock"
    return Path.home() / ".cache" / "rocmlock"


def _mirror() -> tuple[str, str, list[str]]:
    """The mirror as given (debootstrap's), without its credentials (for files and messages), and its secrets."""
    given = os.environ.get("ROCMLOCK_DEBIAN_MIRROR") or DEFAULT_MIRROR
    auth = split_url(given)
    if not auth.url.startswith(("http://", "https://", "file:///")):
        raise InputError(f"ROCMLOCK_DEBIAN_MIRROR={redact_text(given, auth.secrets)[:80]}: not an http(s) or file:// "
                         "URL of a Debian mirror", hint="unset it (deb.debian.org), or give a mirror's URL")
    return given, auth.url, list(auth.secrets)


def debian_base(ref: str, arch: str, cache: Path | None = None) -> Path:
    """The OCI layout (tag ``base``) of ``ref`` for ``arch``, made now when it is not in the cache."""
    spec = parse(ref)
    given, clean, secrets = _mirror()
    # pgzip.FORMAT: a base cached with other gzip bytes would give another digest than one made now
    key = hashlib.sha256(f"{RECIPE}.{PGZIP_FORMAT}\n{spec}\n{arch}\n{clean}".encode()).hexdigest()[:16]
    root = (cache or cache_root()) / "bases"
    done = root / f"debootstrap-{spec.suite}-{arch}-{key}"
    if (done / "complete").is_file():
        return done / "layout"
    _can_make(arch, root, spec.suite)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{done.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done / "complete").is_file():  # another run made it while this one waited
            return done / "layout"
        work = root / f".{done.name}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            rootfs = work / "rootfs"
            _debootstrap(spec, arch, rootfs, given, secrets)
            epoch = release_epoch(rootfs)
            clean_tree(rootfs, spec.suite, clean, epoch)
            write_base_layout(rootfs, work / "layout", arch, epoch, str(spec))
            shutil.rmtree(rootfs)
            (work / "complete").write_text(f"{spec} {arch} {clean}\n")
            shutil.rmtree(done, ignore_errors=True)
            work.rename(done)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return done / "layout"


def _which() -> str | None:
    return shutil.which("debootstrap", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _can_make(arch: str, root: Path, suite: str) -> None:
    """Refuse in one line when this machine cannot make a base of ``suite`` for ``arch`` in the cache ``root``."""
    if _which() is None:
        raise OperationError("--base debootstrap:...: debootstrap is not installed",
                             hint="install it (apt-get install debootstrap); the base is then made once and cached")
    if os.geteuid() != 0:
        # The cached bases of this suite and architecture, none of which fits (other packages, another mirror, or
        # an older rocmlock's bytes): counted only here, where the refusal names them.
        others = sum(1 for d in root.glob(f"debootstrap-{suite}-{arch}-*") if (d / "complete").is_file())
        older = (f" (the {others} cached for this suite were made for other packages, another mirror or by "
                 "another rocmlock version, and would give another digest)") if others else ""
        raise OperationError("--base debootstrap:...: making the base needs root (debootstrap installs as root); "
                             f"it is not in the cache ({root}){older}",
                             hint="run it once as root (sudo --preserve-env=ROCMLOCK_CACHE_DIR,PATH); later "
                                  "builds reuse the cached base without root")
    host = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    if host.returncode == 0 and host.stdout.strip() != arch:
        raise InputError(f"--base debootstrap:...: the lock's platform is {arch}, this machine is "
                         f"{host.stdout.strip()}", hint="make the base on a machine of the platform's architecture")


def _debootstrap(spec: Spec, arch: str, rootfs: Path, mirror: str, secrets: list[str]) -> None:
    cmd = [_which() or "debootstrap", "--variant=minbase", f"--arch={arch}"]
    if spec.include:
        cmd.append("--include=" + ",".join(spec.include))
    proc = subprocess.run([*cmd, spec.suite, str(rootfs), mirror], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "E:" in ln), lines[-1] if lines else f"exit {proc.returncode}")
        raise OperationError(f"--base {spec}: debootstrap failed: {one_line(redact_text(last, secrets))[:300]}",
                             hint="check the suite and package names and that the mirror (ROCMLOCK_DEBIAN_MIRROR, "
                                  "else deb.debian.org) is reachable")


def release_epoch(rootfs: Path) -> int:
    """The ``Date:`` of the suite's ``Release`` that debootstrap fetched (it keeps it in apt's lists)."""
    lists = rootfs / "var/lib/apt/lists"
    for path in sorted(lists.glob("*Release")) if lists.is_dir() else ():
        with path.open("rb") as fh:
            head = fh.read(64 << 10).decode("utf-8", "replace")
        date = re.search(r"^Date: ?(.{1,80})$", head, re.MULTILINE)
        if date:
            try:
                return int(parsedate_to_datetime(date.group(1).strip()).timestamp())
            except (TypeError, ValueError):
                break
    raise OperationError(f"{lists}: debootstrap left no Release file with a Date",
                         hint="the mirror's Release file must have a Date: field (Debian's all do)")


def clean_tree(rootfs: Path, suite: str, mirror: str, epoch: int) -> None:
    """What depends on the day or the machine removed or fixed (see the module)."""
    for sub in ("var/log", "var/cache/apt", "var/lib/apt/lists", "dev"):
        for dirpath, _, files in os.walk(rootfs / sub):
            for name in files:
                Path(dirpath, name).unlink()
    for path in (*rootfs.glob("var/cache/debconf/*-old"), *rootfs.glob("var/lib/dpkg/*-old"),
                 rootfs / "var/cache/ldconfig/aux-cache", rootfs / "etc/resolv.conf", rootfs / "etc/hostname",
                 rootfs / "etc/machine-id", rootfs / "var/lib/dbus/machine-id"):
        if path.is_file() or path.is_symlink():
            path.unlink()
    for cache in sorted(rootfs.glob("usr/lib/python3*/**/__pycache__")):
        shutil.rmtree(cache)
    for dev in sorted((rootfs / "dev").iterdir()) if (rootfs / "dev").is_dir() else ():
        if dev.is_dir() and not dev.is_symlink():
            shutil.rmtree(dev)
        else:
            dev.unlink()
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/apt/sources.list").write_text(f"deb {mirror} {suite} main\n")
    days = str(epoch // 86400)
    for name in ("etc/shadow", "etc/shadow-"):
        path = rootfs / name
        if path.is_file():
            st = path.stat()
            rows = [r.split(":") for r in path.read_text().splitlines()]
            path.write_text("".join(":".join([*r[:2], days, *r[3:]] if len(r) > 2 and r[2] else r) + "\n"
                                    for r in rows))
            os.chmod(path, st.st_mode & 0o7777)


def write_system_layer(root: Path, out: Path, epoch: int) -> tuple[str, str, int]:
    """A gzip tar of the system tree ``root``: sorted, owners and modes kept (numeric ids, no names), hard links
    as links to their first path, times clamped to ``epoch``. (diff_id, digest, size) as :func:`oci.write_layer`."""
    seen: dict[tuple[int, int], str] = {}
    with out.open("wb") as raw:
        outer = oci.HashingWriter(raw)
        with ParallelGzip(outer) as gz, \
                tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                             bufsize=1 << 20) as tar:
            tar.copybufsize = 1 << 20
            paths = [Path(d, n) for d, dirs, files in os.walk(root) for n in (*dirs, *files)]
            for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
                st = path.lstat()
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.mtime, info.uid, info.gid = min(int(st.st_mtime), epoch), st.st_uid, st.st_gid
                info.uname = info.gname = ""
                info.mode = st.st_mode & 0o7777
                if path.is_symlink():
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tar.addfile(info)
                elif path.is_dir():
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif path.is_file() and st.st_nlink > 1 and (st.st_dev, st.st_ino) in seen:
                    info.type, info.linkname = tarfile.LNKTYPE, seen[(st.st_dev, st.st_ino)]
                    tar.addfile(info)
                elif path.is_file():
                    if st.st_nlink > 1:
                        seen[(st.st_dev, st.st_ino)] = info.name
                    info.size = st.st_size
                    with path.open("rb") as fh:
                        tar.addfile(info, fh)
                else:
                    raise OperationError(f"{path}: a special file (not a file, directory or link) in the base "
                                         "tree", hint="debootstrap left a device or socket outside /dev")
    return "sha256:" + gz.sha256.hexdigest(), "sha256:" + outer.sha.hexdigest(), outer.size


def write_base_layout(rootfs: Path, layout: Path, arch: str, epoch: int, what: str) -> str:
    """The one-layer OCI layout of ``rootfs`` at ``layout`` (tag ``base``); its manifest digest."""
    blobs = oci.start_layout(layout)
    diff_id, digest, size = write_system_layer(rootfs, blobs / "layer.tmp", epoch)
    (blobs / "layer.tmp").rename(blobs / "sha256" / digest.split(":")[1])
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {"architecture": arch, "os": "linux", "created": created,
              "config": {"Env": [_PATH], "Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created": created, "created_by": f"debootstrap --variant=minbase ({what})"}]}
    manifest = {"schemaVersion": 2, "mediaType": oci.MANIFEST, "config": oci.put_json(blobs, config, oci.CONFIG),
                "layers": [{"mediaType": oci.LAYER_GZIP, "digest": digest, "size": size}]}
    return oci.finish_layout(layout, manifest, TAG)
