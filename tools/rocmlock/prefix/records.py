"""The records rattler writes into ``<prefix>/conda-meta``, made to say what the lock says and nothing about the
host that installed them: an image's layer and an unpacked bundle are then the same bytes wherever they were made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

# PrefixRecord fields that name the installing host's package cache or scratch directory (rattler_conda_types
# PrefixRecord: extracted_package_dir, package_tarball_full_path and link are optional there, and conda and pixi
# read none of them to tell what is installed); never true on another machine, and temporary for an unpack.
HOST_FIELDS = ("extracted_package_dir", "package_tarball_full_path", "link")


def settle_records(prefix: Path, urls: Mapping[str, str], channels: Mapping[str, str] | None = None) -> None:
    """Rewrite ``prefix``'s ``conda-meta/*.json`` without :data:`HOST_FIELDS`, each package's ``url`` (and, where
    ``channels`` has it, ``channel``) the lock's for its file name rather than where it was installed from."""
    for meta in sorted((prefix / "conda-meta").glob("*.json")):
        record = json.loads(meta.read_text())
        for key in HOST_FIELDS:
            record.pop(key, None)
        name = record.get("fn")
        record["url"] = urls.get(name, record.get("url"))
        if channels is not None and name in channels:
            record["channel"] = channels[name]
        meta.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
