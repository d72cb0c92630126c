"""``envs/<env>/conda-lock.yml``: an environment's lock in conda-lock's v1 format (the one conda-lock 4.0.3 installs
from, ``conda-lock install``, and conda-lockfiles reads for ``conda env create -f``), a pure renderer.

conda-lock keys a solution by conda subdir (``linux-64``) and installs the one of the host's subdir
(conda_lock/conda_lock.py ``_render_lockfile_for_install``: "does not contain a solution for the current platform"),
so rocmlock's platform names (``linux-64-gfx942``) cannot be its platforms. One file per environment, with one
solution per subdir: written when the environment's platforms of one subdir lock the same packages (one GPU target
per environment, the usual case); an environment whose platforms of one subdir differ (several GPU targets) gets
none, its ``conda-<platform>.lock`` files say it. The GPU target and rocmlock's platform go into
``metadata.custom_metadata`` (a ``dict[str, str]`` in conda_lock/lockfile/v1/models.py ``LockMeta``), the only
place the format has for them (with the ``created_by`` conda-lockfiles requires), and into a comment. The models are strict (``StrictModel``: extra keys refused);
a conda package needs its md5 (``validate_hash``). PyPI packages are not written (a ``pip`` entry needs the
archive's URL, which no export writes): a comment points at ``requirements-<platform>.txt``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from rattler import RepoDataRecord

from rocmlock.lock.generated import HEADER
from rocmlock.lock.lockfile import LockedPlatform, RecordView, view
from rocmlock.util.credentials import redact_url
from rocmlock.util.yamlwrite import render_item, render_yaml

CONDA_LOCK_NAME = "conda-lock.yml"


def _dependencies(record: RecordView) -> dict[str, str]:
    # conda-lock writes `name: spec` per dependency (its solver output's `depends`, split at the first space)
    deps: dict[str, str] = {}
    for dep in record.depends:
        name, _, spec = dep.partition(" ")
        deps.setdefault(name, spec.strip())
    return deps


@lru_cache(maxsize=16384)  # by value: a package the GPU environments share is built once per lock
def _package(record: RecordView, subdir: str) -> dict[str, Any]:
    assert record.md5 is not None  # _solutions leaves out a platform with a record lacking one
    hashes = {"md5": record.md5, **({"sha256": record.sha256} if record.sha256 else {})}
    # `build` (optional in the model) keeps the GPU build string (rocm72_gfx942_...) beside the URL's
    return {"name": record.name, "version": record.version, "build": record.build,
            "manager": "conda", "platform": subdir, "dependencies": _dependencies(record), "url": redact_url(record.url),
            "hash": hashes, "category": "main", "optional": False}


def _pins(records: Sequence[RepoDataRecord]) -> tuple[str, ...]:
    return tuple(sorted(redact_url(view(r).url) for r in records))


def _solutions(platforms: Sequence[LockedPlatform], records: Mapping[str, Sequence[RepoDataRecord]]
               ) -> dict[str, list[LockedPlatform]] | None:
    """subdir -> the environment's platforms of it; None when two of one subdir lock different packages, or a
    record has no md5 (conda-lock refuses a conda package without one)."""
    by_subdir: dict[str, list[LockedPlatform]] = {}
    for plat in platforms:
        if plat.name in records:
            by_subdir.setdefault(plat.subdir, []).append(plat)
    for plats in by_subdir.values():
        if len(plats) > 1 and len({_pins(records[p.name]) for p in plats}) > 1:
            return None
    if any(view(r).md5 is None for p in platforms if p.name in records for r in records[p.name]):
        return None
    return by_subdir


def _custom_metadata(by_subdir: Mapping[str, list[LockedPlatform]], gpu_target: str | None) -> dict[str, str]:
    # conda-lockfiles 0.2.2 reads custom_metadata as a model with a required `created_by` (conda_lock/v1.py,
    # CondaLockV1CustomMetadata): without it, `conda env create -f conda-lock.yml` refuses the file.
    meta = {"created_by": "rocmlock"}
    if gpu_target:
        meta["amdgpu-target"] = gpu_target
    for subdir, plats in sorted(by_subdir.items()):
        meta[f"rocmlock-platforms.{subdir}"] = ", ".join(p.name for p in plats)
        vps = [v for v in plats[0].virtual_packages if v.startswith("__amdgpu")] if len(plats) == 1 else []
        if vps:
            meta[f"virtual-packages.{subdir}"] = ", ".join(vps)
    return meta


@lru_cache(maxsize=16384)
def _item(record: RecordView, subdir: str) -> str | None:
    return render_item(_package(record, subdir))


def _body(metadata: dict[str, Any], packages: list[tuple[RecordView, str]]) -> str:
    """The YAML document: the metadata, then the packages one by one (a package the environments share is written
    once per process), or the whole as PyYAML writes it where a string needs PyYAML's own rules."""
    items = [_item(record, subdir) for record, subdir in packages]
    if not packages or None in items:
        return render_yaml({"version": 1, "metadata": metadata,
                            "package": [_package(record, subdir) for record, subdir in packages]})
    head = render_yaml({"version": 1, "metadata": metadata})
    return head + "package:\n" + "".join(items)  # type: ignore[arg-type]  # no None left


def render_conda_lock(env: str, channels: Sequence[str], platforms: Sequence[LockedPlatform],
                      records: Mapping[str, Sequence[RepoDataRecord]], gpu_target: str | None = None,
                      pypi_platforms: Sequence[str] = ()) -> str | None:
    """conda-lock.yml for ``env`` (records per platform name), or None when the format cannot hold it (see the
    module docstring). ``channels`` as the exports name them (absolute URLs, no credentials)."""
    by_subdir = _solutions(platforms, records)
    if not by_subdir:
        return None
    packages: list[tuple[RecordView, str]] = []
    content_hash = {}
    for subdir, plats in sorted(by_subdir.items()):
        recs = sorted(records[plats[0].name], key=lambda r: view(r).name)
        packages += [(view(r), subdir) for r in recs]
        # conda-lock compares it with a hash of its sources to tell a stale lock; here: of the locked pins
        content_hash[subdir] = hashlib.sha256(json.dumps(_pins(recs)).encode()).hexdigest()
    metadata = {"content_hash": content_hash,
                "channels": [{"url": redact_url(c).rstrip("/"), "used_env_vars": []} for c in channels],
                "platforms": sorted(by_subdir), "sources": [],
                "custom_metadata": _custom_metadata(by_subdir, gpu_target)}
    body = _body(metadata, packages)
    target = f", GPU target {gpu_target}" if gpu_target else ""
    notes = [HEADER, f"# environment: {env}{target}; conda-lock v1 format, one solution per conda subdir:",
             "#   conda-lock install -p <prefix> conda-lock.yml"]
    if pypi_platforms:
        notes.append(f"# PyPI packages are not in it: then pip install --require-hashes -r "
                     f"requirements-<platform>.txt ({', '.join(pypi_platforms)})")
    return "\n".join(notes) + "\n" + body
