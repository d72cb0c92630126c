"""What a channel holds: its package files' suffixes, and its repodata read through rattler's Gateway."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rocmlock.util.credentials import rattler_client, split_url

if TYPE_CHECKING:
    from rattler import RepoDataRecord

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


def query_channel(url: str, subdirs: Iterable[str], names: Iterable[str],
                  headers: Mapping[str, str] | None = None) -> list[RepoDataRecord]:
    """The records of ``names`` in ``subdirs`` of the channel at ``url`` (their dependencies not followed).

    Each call reads the channel afresh (a new, uncached gateway), so a channel written a moment ago is
    seen as it is now. Secrets in ``url``, and ``headers`` (a quetz ``X-API-Key``, say), reach rattler in
    memory only (:func:`rocmlock.util.credentials.rattler_client`, which also reads RATTLER_AUTH_FILE); the gateway
    sees the clean URL. rattler's errors propagate: what a failure means is the caller's to say.
    """
    # Imported here: publishing to a directory or S3 never loads rattler's Gateway.
    from rattler import Channel, Gateway, SourceConfig, Subdir

    auth = split_url(url)
    if headers:
        auth = dataclasses.replace(auth, headers=(*auth.headers, *sorted(headers.items())))
    client = rattler_client([auth])

    async def query() -> list[RepoDataRecord]:
        with tempfile.TemporaryDirectory(prefix="rocmlock-gateway-") as cache:
            gateway = Gateway(cache_dir=Path(cache), client=client,
                              default_config=SourceConfig(cache_action="no-cache"))
            result = await gateway.query([Channel(auth.url)], [Subdir(s) for s in sorted(set(subdirs))],
                                         sorted(set(names)), recursive=False)
            return [rec for per_spec in result for rec in per_spec]

    return asyncio.run(query())
