"""OCI image layouts for ``rocmlock image``: read a base image, write a reproducible layer, write the layout.

The formats are the OCI image spec's (image-layout.md: ``oci-layout``, ``index.json``, ``blobs/sha256/``;
manifest.md, config.md, layer.md: whiteouts are ``.wh.<name>`` and ``.wh..wh..opq``). Everything read from a
base image is hostile: JSON is size-bounded and typed field by field (:mod:`rocmlock.image.ocischema`), blobs
are checked against their digests and sizes before use, layers are read bounded and checked against their
diff_ids (:mod:`rocmlock.image.ocilayer`), and only the few members the glibc check needs are kept from them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from rocmlock.errors import InputError, OperationError
from rocmlock.image import ocilayer, ocischema
from rocmlock.util.fs import read_regular, write_atomic
from rocmlock.util.pgzip import LEVEL, ParallelGzip
from rocmlock.util.text import escape

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
# The layer media types of image-spec media-types.md that a runtime unpacks (the non-distributable ones are
# deprecated and point outside the layout); umoci refuses others.
LAYER_TYPES = frozenset((LAYER_TAR, LAYER_GZIP, LAYER_ZSTD))
# Docker's media types of the same bytes (skopeo keeps them in an oci: copy of a docker v2s2 image).
_DOCKER = {"application/vnd.docker.image.rootfs.diff.tar.gzip": LAYER_GZIP,
           "application/vnd.docker.container.image.v1+json": CONFIG,
           "application/vnd.docker.distribution.manifest.v2+json": MANIFEST,
           "application/vnd.docker.distribution.manifest.list.v2+json": INDEX}
_JSON_LIMIT = 4 << 20
_LIBC_LIMIT = 64 << 20
_MAX_NAMES = 10_000
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class BaseImage:
    """A base image read from an OCI layout: its config and its layers' descriptors (blobs under ``blobs``)."""

    blobs: Path
    manifest_digest: str
    config: dict[str, Any]
    layers: tuple[dict[str, Any], ...]
    diff_ids: tuple[str, ...] = ()  # the config's, one a layer


def _blob(blobs: Path, digest: object, what: str) -> Path:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise InputError(f"{what}: not a sha256 digest: {str(digest)[:80]!r}",
                         hint="the base image layout is damaged or not an OCI image layout")
    path = blobs / "sha256" / digest.split(":", 1)[1]
    if not path.is_file():
        raise InputError(f"{what}: blob {digest} is missing from the layout", hint="copy the base image again")
    return path


def _json_blob(blobs: Path, desc: dict[str, Any], what: str) -> tuple[dict[str, Any], bytes]:
    """The JSON object of the blob ``desc`` names, its bytes checked against the descriptor's digest and size."""
    digest = desc.get("digest")
    what = f"{what} {str(digest)[:80]}"
    data = read_regular(_blob(blobs, digest, what), _JSON_LIMIT, f"{what}: not an image manifest",
                        hint="copy the base image again")
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise InputError(f"{what}: the blob does not match its digest", hint="copy the base image again")
    if len(data) != desc.get("size"):
        raise InputError(f"{what}: the blob has {len(data)} bytes, its descriptor says {desc.get('size')}",
                         hint="copy the base image again")
    return ocischema.load(data, what), data


def _is_index(value: dict[str, Any]) -> bool:
    return _DOCKER.get(str(value.get("mediaType")), value.get("mediaType")) == INDEX or "manifests" in value


def _tagged(manifests: list[dict[str, Any]], tag: str | None, label: str) -> dict[str, Any]:
    """The one descriptor of ``index.json`` named ``tag`` (the only one when None)."""
    if tag is not None:
        manifests = [m for m in manifests if (m.get("annotations") or {}).get(REF_NAME) == tag]
    if len(manifests) != 1:
        names = sorted(escape(str((m.get("annotations") or {}).get(REF_NAME))) for m in manifests)
        which = f"no image tagged '{escape(tag)}'" if tag is not None else \
            f"{len(manifests)} images ({', '.join(names)})"
        raise InputError(f"{label}: {which} in the layout", hint="name one tag: oci:DIR:TAG")
    return manifests[0]


def read_index(root: Path, label: str) -> dict[str, Any]:
    """The checked ``index.json`` of the OCI layout ``root``."""
    index_path = root / "index.json"
    if not (root / "oci-layout").is_file() or not index_path.is_file():
        raise InputError(f"{label}: not an OCI image layout (no oci-layout or index.json)",
                         hint="pass oci:DIR[:TAG] of a layout (skopeo copy ... oci:DIR:TAG), or a registry reference")
    data = read_regular(index_path, _JSON_LIMIT, f"{label}: not an image layout", hint="copy the base image again")
    return ocischema.load(data, f"{label}: index.json", ocischema.INDEX)


def read_layout(root: Path, tag: str | None, arch: str, label: str) -> BaseImage:
    """The image ``tag`` (the only one when None) of the OCI layout ``root``, for linux/``arch``; every JSON
    field it uses checked for its type (:mod:`rocmlock.image.ocischema`), every layer's descriptor against its
    blob and the config (diff_ids are checked as the layers are read: :func:`rootfs_facts`)."""
    blobs = root / "blobs"
    desc = _tagged(read_index(root, label)["manifests"], tag, label)
    manifest, raw = _json_blob(blobs, desc, f"{label}: manifest")
    if _is_index(manifest):
        ocischema.check(manifest, ocischema.INDEX, f"{label}: image index {desc['digest']}")
        wanted = [m for m in manifest["manifests"] if (m.get("platform") or {}).get("architecture") == arch
                  and (m.get("platform") or {}).get("os") == "linux"]
        if not wanted:
            raise InputError(f"{label}: the image index has no linux/{arch} image", hint="choose a base for this platform")
        desc = wanted[0]
        manifest, raw = _json_blob(blobs, desc, f"{label}: manifest")
        if _is_index(manifest):
            raise InputError(f"{label}: manifest {desc['digest']} is another image index",
                             hint="copy the base image for one platform (skopeo copy --override-arch ...)")
    ocischema.check(manifest, ocischema.MANIFEST, f"{label}: manifest {desc['digest']}")
    config, _ = _json_blob(blobs, manifest["config"], f"{label}: config")
    ocischema.check(config, ocischema.CONFIG, f"{label}: config {manifest['config']['digest']}")
    if config["architecture"] != arch:
        raise InputError(f"{label}: the base image is for {escape(config['architecture'][:40])}, the lock for {arch}",
                         hint="choose a base image for the lock's platform")
    layers = tuple(dict(m, mediaType=_DOCKER.get(m["mediaType"], m["mediaType"])) for m in manifest["layers"])
    diff_ids = config["rootfs"]["diff_ids"]
    if len(diff_ids) != len(layers):
        raise InputError(f"{label}: its config names {len(diff_ids)} layers, its manifest {len(layers)}",
                         hint="copy the base image again")
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        _check_layer(blobs, layer, diff_id, label)
    return BaseImage(blobs, "sha256:" + hashlib.sha256(raw).hexdigest(), config, layers, tuple(diff_ids))


def _check_layer(blobs: Path, layer: dict[str, Any], diff_id: str, label: str) -> None:
    """A layer's media type is one a runtime unpacks, its blob has the descriptor's size, its diff_id is a digest
    (the bytes are checked against both digests as they are read and copied)."""
    what = f"{label}: layer {layer['digest']}"
    if layer["mediaType"] not in LAYER_TYPES:
        raise InputError(f"{what}: media type '{escape(layer['mediaType'][:80])}' is not an image layer "
                         f"({', '.join(sorted(LAYER_TYPES))})", hint="copy the base image again")
    if not _DIGEST.fullmatch(diff_id):
        raise InputError(f"{what}: its diff_id '{escape(diff_id[:80])}' is not a sha256 digest",
                         hint="copy the base image again")
    size = _blob(blobs, layer["digest"], what).stat().st_size
    if size != layer["size"]:
        raise InputError(f"{what}: the blob has {size} bytes, the manifest says {layer['size']}",
                         hint="copy the base image again")


# ----------------------------------------------------------------------------- the base's rootfs


def _merged_files(base: BaseImage, wanted: Iterable[str]) -> dict[str, tarfile.TarInfo | bytes | None]:
    """Each path of ``wanted`` (and libc symlinks of the library directories) as the merged rootfs has it: bytes
    of a regular file (bounded), a symlink's TarInfo, or None (absent or whited out). Layers apply in order; a
    layer's whiteouts (``.wh.NAME``, ``.wh..wh..opq``) hide what the layers below it hold, never what it holds
    itself (image-spec layer.md). Every layer is read to its end and checked against its diff_id
    (:func:`rocmlock.image.ocilayer.open_layer`), with memory bounded whatever its members."""
    want = set(wanted)
    state: dict[str, tarfile.TarInfo | bytes | None] = {}
    for layer, diff_id in zip(base.layers, base.diff_ids, strict=True):
        path = _blob(base.blobs, layer.get("digest"), "base layer")
        added: dict[str, tarfile.TarInfo | bytes | None] = {}
        gone: set[str] = set()  # what this layer's whiteouts hide of the layers below
        with ocilayer.open_layer(path, str(layer["mediaType"]), diff_id, f"base layer {layer['digest']}") as tar:
            for member in tar.members():
                name = str(PurePosixPath("/", member.name))[1:]
                parent, _, leaf = name.rpartition("/")
                where = f"{parent}/" if parent else ""
                if leaf == ".wh..wh..opq":
                    gone |= {k for k in state if k.startswith(where)}
                elif leaf.startswith(".wh."):
                    gone |= {k for k in state if k == where + leaf[4:] or k.startswith(f"{where}{leaf[4:]}/")}
                elif name in want or (member.issym() and parent in _LIB_DIRS and _libc_name(leaf)):
                    if member.isreg() and member.size <= _LIBC_LIMIT:
                        added[name] = tar.read(member, _LIBC_LIMIT)
                    else:
                        added[name] = member if (member.issym() or member.islnk()) else None
                    if len(added) > _MAX_NAMES:
                        raise InputError(f"base layer {layer['digest']}: more than {_MAX_NAMES} libc links",
                                         hint="copy the base image again")
        state.update(dict.fromkeys(gone))
        state.update(added)
    return state


def _libc_name(leaf: str) -> bool:
    return leaf == "libc.so.6" or re.fullmatch(r"libc-\d+\.\d+\.so", leaf) is not None


_LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
             "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib")
_RELEASE = re.compile(rb"GNU C Library [^\n]{0,80}? (?:release|stable release) version (\d+)\.(\d+)")


def _version_of(data: bytes) -> tuple[int, int] | None:
    found = _RELEASE.search(data)
    if found:
        return int(found.group(1)), int(found.group(2))
    versions = [(int(a), int(b)) for a, b in re.findall(rb"GLIBC_(\d+)\.(\d+)\b", data)]
    return max(versions) if versions else None


_ROCM_VERSION = "opt/rocm/.info/version"


@dataclass(frozen=True)
class RootfsFacts:
    """What the build needs to know of the base's merged rootfs, read in one pass over its layers."""

    glibc: tuple[int, int] | None  # its libc.so.6's version (or that of the libc-X.Y.so it links to)
    rocm: bool  # AMD's ROCm at /opt/rocm (its .info/version)
    shell: str | None = None  # /bin/bash, else /bin/sh, when the image has it (the entrypoint is a /bin/sh script)


_SHELLS = ("bin/bash", "usr/bin/bash", "bin/sh", "usr/bin/sh")


def rootfs_facts(base: BaseImage) -> RootfsFacts:
    candidates = [f"{d}/libc.so.6" for d in _LIB_DIRS]
    state = _merged_files(base, [*candidates, _ROCM_VERSION, "bin", *_SHELLS])
    return RootfsFacts(_glibc(state, candidates), isinstance(state.get(_ROCM_VERSION), bytes), _shell(state))


def _shell(state: dict[str, tarfile.TarInfo | bytes | None]) -> str | None:
    """``/bin/bash`` or ``/bin/sh`` when the merged rootfs has it there, or in /usr/bin with /bin a link to it."""
    merged = isinstance(state.get("bin"), tarfile.TarInfo) and \
        str(state["bin"].linkname).strip("/") in ("usr/bin", "usr/bin/")  # type: ignore[union-attr]

    def has(name: str) -> bool:
        return state.get(f"bin/{name}") is not None or (merged and state.get(f"usr/bin/{name}") is not None)

    if not has("sh"):
        return None
    return "/bin/bash" if has("bash") else "/bin/sh"


def _glibc(state: dict[str, tarfile.TarInfo | bytes | None], candidates: list[str]) -> tuple[int, int] | None:
    for name in candidates:
        seen = 0
        value = state.get(name)
        while isinstance(value, tarfile.TarInfo) and seen < 8:  # a symlink: libc.so.6 -> libc-2.31.so
            seen += 1
            target = value.linkname
            found = re.fullmatch(r"(?:.*/)?libc-(\d+)\.(\d+)\.so", target)
            if found:
                return int(found.group(1)), int(found.group(2))
            base_dir = "" if value.islnk() or target.startswith("/") else str(PurePosixPath(name).parent)
            name = str(PurePosixPath("/", base_dir, target))[1:]
            value = state.get(name)
        if isinstance(value, bytes):
            version = _version_of(value)
            if version is not None:
                return version
    return None


# ----------------------------------------------------------------------------- writing


class HashingWriter:
    """A write-only file that hashes and counts what passes through it to ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


def _entries(root: Path) -> Iterator[Path]:
    """Every path under ``root``, sorted by its archive name (so the tar never depends on directory order)."""
    paths = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        paths += [Path(dirpath, n) for n in (*dirnames, *filenames)]
    yield from sorted(paths[1:], key=lambda p: p.relative_to(root).as_posix())


def write_layer(root: Path, out: Path, mtime: int, level: int = LEVEL) -> tuple[str, str, int]:
    """A gzip-compressed tar of everything under ``root`` (paths relative to it) written to ``out``.

    Reproducible: sorted entries, mtime ``mtime``, uid/gid 0 with no names, modes 0755/0644 (executable or not),
    hard links written as files, PAX format, gzip without a name or time, compressed on several threads with the
    same output whatever their number (:class:`rocmlock.util.pgzip.ParallelGzip`) at gzip ``level``. Returns
    (diff_id, digest, size)."""
    # The tar stream is written here, not by tarfile (its headers are: ``TarInfo.tobuf``, as ``TarFile.addfile``
    # makes them): each file is read by one system call per MiB straight into the compressor's chunk, where
    # tarfile's stream copied every byte three times in Python. The bytes are those tarfile writes.
    offset = 0
    with out.open("wb") as raw:
        outer = HashingWriter(raw)
        with ParallelGzip(outer, level=level) as gz:
            for path in _entries(root):
                st = path.lstat()
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                elif stat.S_ISDIR(st.st_mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                elif stat.S_ISREG(st.st_mode):
                    info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
                else:
                    raise InputError(f"{path}: neither a file, a directory nor a symlink",
                                     hint="an installed package holds a special file")
                header = info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
                gz.write(header)
                offset += len(header)
                if info.type == tarfile.REGTYPE:
                    with path.open("rb", buffering=0) as fh:
                        if gz.copy_from(fh, info.size) != info.size:
                            raise OperationError(f"{path}: shorter than when the layer began ({info.size} bytes)",
                                                 hint="nothing else may write the staging directory; build again")
                    pad = -info.size % tarfile.BLOCKSIZE
                    gz.write(bytes(pad))
                    offset += info.size + pad
            # The end of the archive as TarFile.close writes it: two zero blocks, then zeros to a whole record.
            offset += 2 * tarfile.BLOCKSIZE
            gz.write(bytes(2 * tarfile.BLOCKSIZE + -offset % tarfile.RECORDSIZE))
    return "sha256:" + gz.sha256.hexdigest(), "sha256:" + outer.sha.hexdigest(), outer.size


def copy_blob(src_blobs: Path, digest: str, dest_blobs: Path) -> None:
    """The blob ``digest`` copied from one layout to another, its bytes checked against the digest on the way."""
    src = _blob(src_blobs, digest, "base layer")
    dest = dest_blobs / "sha256" / src.name
    sha = hashlib.sha256()
    with src.open("rb") as fin, dest.open("wb") as fout:
        while chunk := fin.read(1 << 20):
            sha.update(chunk)
            fout.write(chunk)
    if "sha256:" + sha.hexdigest() != digest:
        raise InputError(f"base layer {digest}: its bytes do not match its digest", hint="copy the base image again")


def put_json(blobs: Path, value: dict[str, Any], media_type: str) -> dict[str, Any]:
    """``value`` written as a blob (sorted keys, compact); its descriptor."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def start_layout(root: Path) -> Path:
    """A new image layout at ``root`` (``oci-layout``, ``blobs/sha256``); its blobs directory."""
    (root / "blobs" / "sha256").mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return root / "blobs"


def finish_layout(root: Path, manifest: dict[str, Any], tag: str) -> str:
    """Write ``manifest`` and the index naming it ``tag``; the manifest's digest."""
    desc = put_json(root / "blobs", manifest, MANIFEST)
    desc["annotations"] = {REF_NAME: tag}
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [desc]}
    (root / "index.json").write_text(json.dumps(index, sort_keys=True, separators=(",", ":"), allow_nan=False))
    return str(desc["digest"])


def place_layout(src: Path, dest: Path) -> None:
    """The finished one-image layout ``src`` (beside ``dest``, on its filesystem) put at ``dest``: renamed there
    when ``dest`` is new or empty, else added to the layout there as skopeo and umoci add to one (image-spec
    image-layout.md): its blobs moved in (a blob's name is its digest: one already there is the same bytes),
    then ``index.json`` rewritten in one rename, where an image of the same tag gives up its entry and every
    other entry, tag and blob stays. Concurrent builds into one layout take turns (a lock on its directory)."""
    if not dest.exists() or (dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir())):
        src.rename(dest)
        return
    label = f"-o {dest}"
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        index = read_index(dest, label)  # checked before anything of ours goes in
        (ours,) = json.loads((src / "index.json").read_bytes())["manifests"]
        (dest / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        for blob in sorted((src / "blobs" / "sha256").iterdir()):
            os.replace(blob, dest / "blobs" / "sha256" / blob.name)
        tag = ours["annotations"][REF_NAME]
        entries = [m for m in index["manifests"] if (m.get("annotations") or {}).get(REF_NAME) != tag]
        at = next((i for i, m in enumerate(index["manifests"])
                   if (m.get("annotations") or {}).get(REF_NAME) == tag), len(entries))
        index["manifests"] = [*entries[:at], ours, *entries[at:]]
        write_atomic(dest / "index.json", json.dumps(index, sort_keys=True, separators=(",", ":"), allow_nan=False))
    finally:
        os.close(fd)
