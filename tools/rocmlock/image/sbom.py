"""The image's SBOM: a CycloneDX 1.6 JSON document of the conda packages installed in it, as pixi-sbom writes one
for the same pixi.lock environment and platform.

What pixi-sbom 1.15 writes (``pixi-sbom --lockfile pixi.lock -e ENV -p PLATFORM``, run by tests/test_image_sbom.py;
aesir-oss/pixi-sbom src/format/cyclonedx.rs, src/format/mod.rs, src/purl.rs), and what this module writes of it:

- ``serialNumber``: a UUIDv5 of the lock's text, the environment, the platform, the format and the tool's version,
  so the same input gives the same document. Here: a UUIDv5 of the lock's sha256, the environment, the platform
  and the prefix, in a namespace of rocmlock's own;
- ``metadata.timestamp``: ``SOURCE_DATE_EPOCH`` when set, else now. Here: the image's ``created`` (itself
  ``SOURCE_DATE_EPOCH`` or the newest build time of the locked packages), so two builds are byte-identical;
- one component a package, sorted by name: ``type`` library, ``bom-ref`` and ``purl``
  ``pkg:conda/NAME@VERSION?build=B&channel=C&subdir=S&type=conda|tar.bz2`` (the channel's name is the last
  segment of its URL), ``supplier`` the channel, ``hashes`` SHA-256 and MD5, a ``distribution`` reference to the
  package's URL, ``pixi:*`` properties of the record (build, build number, channel, file name, noarch, size,
  subdir, kind);
- ``dependencies``: each package's ``depends`` that name a package of the environment; the root's are the
  packages the manifest declares (``pixi:direct`` true, ``pixi:declared-in`` the features whose tables declare
  them, comma separated) and those no other package needs (pixi-sbom 0.9.0's notes: "root edges are the declared
  set ∪ graph roots").

Left out: the root's version, authors and URLs of the manifest, pixi-sbom's CPE for python, and SPDX
normalisation of licenses (pixi-sbom carries the SPDX license list; here the declared license is a license
``name``, as the lock has it). Only conda packages are in the image (PyPI and source packages are left out, as
``install`` leaves them out), so only they are in its SBOM.

The lock's strings are data here: they reach JSON strings (escaped by ``json``) and purls (percent-encoded), never
a path; every URL loses its credentials first (:func:`rocmlock.util.credentials.redact_url`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rattler import PackageName, RepoDataRecord

from rocmlock.util.credentials import redact_url

SPEC_VERSION = "1.6"
MEDIA_TYPE = "application/vnd.cyclonedx+json"  # IANA, registered 2021-01-28
# Fixed for all time: the same image inputs give the same serialNumber.
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://rocmlock.invalid/image/sbom")
# What pixi-sbom's purls percent-encode (it builds them with the packageurl crate, scm-rs/packageurl.rs src/purl.rs
# ENCODE_SET): the controls, every non-ASCII byte and these; '/', ':', '!', '&' ... stay as they are. Seen in
# pixi-sbom 1.15's output: version 1!2.0 stays, 2.5.1+rocm7.2 is 2.5.1%2Brocm7.2.
_ENCODED = frozenset(' "#%<>`?{};=+@\\[]^|')


def _enc(text: str) -> str:
    return "".join("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                   if ch in _ENCODED or not " " <= ch < "\x7f" else ch for ch in text)


def channel_name(url: str) -> str:
    """The channel's name in a purl: the last segment of its URL without credentials (pixi-sbom's
    ``channel_name_from_url``: ``https://conda.anaconda.org/conda-forge/`` -> ``conda-forge``)."""
    return redact_url(url).rstrip("/").rsplit("/", 1)[-1]


def _archive_type(file_name: str) -> str | None:
    if file_name.endswith(".conda"):
        return "conda"
    if file_name.endswith(".tar.bz2"):
        return "tar.bz2"
    return None


def purl(record: RepoDataRecord) -> str:
    """The package's purl (purl-spec type ``conda``): qualifiers sorted by key, every part percent-encoded."""
    qualifiers = {"build": str(record.build), "channel": channel_name(record.channel or ""),
                  "subdir": record.subdir, "type": _archive_type(record.file_name)}
    query = "&".join(f"{k}={_enc(v)}" for k, v in sorted(qualifiers.items()) if v)
    return f"pkg:conda/{_enc(record.name.source)}@{_enc(str(record.version))}" + (f"?{query}" if query else "")


def _noarch(record: RepoDataRecord) -> bool:
    kind = record.noarch
    return bool(kind.python or kind.generic)


def _component(record: RepoDataRecord, ref: str, declared_in: Sequence[str]) -> dict[str, Any]:
    channel = redact_url(record.channel or "")
    name = channel_name(channel)
    props = {"pixi:build": str(record.build), "pixi:build-number": str(record.build_number),
             "pixi:channel": name, "pixi:channel-url": channel, "pixi:declared-in": ",".join(declared_in),
             "pixi:direct": "true" if declared_in else "", "pixi:file-name": record.file_name,
             "pixi:noarch": "true" if _noarch(record) else "", "pixi:size": str(record.size or ""),
             "pixi:subdir": record.subdir}
    component: dict[str, Any] = {"type": "library", "bom-ref": ref, "name": record.name.source,
                                 "version": str(record.version)}
    if name:
        component["supplier"] = {"name": name, "url": [channel]}
    component["purl"] = ref
    hashes = [{"alg": alg, "content": digest.hex()}
              for alg, digest in (("SHA-256", record.sha256), ("MD5", record.md5)) if digest]
    if hashes:
        component["hashes"] = hashes
    license_ = (record.license or "").strip()
    if license_:
        component["licenses"] = [{"license": {"name": license_}}]
    component["externalReferences"] = [{"type": "distribution", "url": redact_url(record.url)}]
    component["properties"] = [{"name": k, "value": v} for k, v in props.items() if v] + \
        [{"name": "pixi:kind", "value": "conda"}]
    return component


def _dependency_name(spec: str) -> str:
    """The package name a ``depends`` match spec names ('' when it is not one rattler reads)."""
    try:
        return str(PackageName.from_matchspec_str(spec).normalized)
    except Exception:  # noqa: BLE001 - rattler's parse error: a depends entry that names no package of ours
        return ""


def document(records: Sequence[RepoDataRecord], *, root_name: str, environment: str, platform: str,
             lock_name: str, lock_sha256: str, prefix: str, created: str, tool_version: str,
             declared: Mapping[str, Sequence[str]] | None = None) -> bytes:
    """The CycloneDX JSON of ``records`` (pretty-printed as pixi-sbom prints it, ASCII, with a final newline).
    ``declared``: the normalised names the manifest declares for this environment, each with its features."""
    declared = declared or {}
    ordered = sorted(records, key=lambda r: (r.name.normalized, purl(r)))
    refs = {r.name.normalized: purl(r) for r in ordered}
    edges = {refs[r.name.normalized]: sorted({refs[n] for n in map(_dependency_name, r.depends)
                                              if n in refs and n != r.name.normalized})
             for r in ordered}
    needed = {ref for deps in edges.values() for ref in deps}
    serial = uuid.uuid5(_NAMESPACE, f"{lock_sha256}\0{environment}\0{platform}\0{prefix}")
    bom = {
        "$schema": f"http://cyclonedx.org/schema/bom-{SPEC_VERSION}.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": created,
            "lifecycles": [{"phase": "pre-build"}],
            "tools": {"components": [{"type": "application", "bom-ref": f"rocmlock@{tool_version}",
                                      "name": "rocmlock", "version": tool_version}]},
            "component": {"type": "application", "bom-ref": "root", "name": root_name},
            "properties": [{"name": "pixi:environment", "value": environment},
                           {"name": "pixi:platform", "value": platform},
                           {"name": "pixi:lockfile", "value": lock_name},
                           {"name": "rocmlock:lock-sha256", "value": lock_sha256},
                           {"name": "rocmlock:prefix", "value": prefix}],
        },
        "components": [_component(r, refs[r.name.normalized], declared.get(r.name.normalized, ())) for r in ordered],
        "dependencies": [{"ref": "root", "dependsOn": sorted((set(refs.values()) - needed) |
                                                              {refs[n] for n in declared if n in refs})},
                         *({"ref": ref, "dependsOn": deps} for ref, deps in edges.items())],
    }
    return (json.dumps(bom, indent=2, ensure_ascii=True) + "\n").encode()
