"""What a channel holds: its package files' suffixes, and its repodata read through rattler's Gateway."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from rattler import Client, RepoDataRecord

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


def query_channel(url: str, subdirs: Iterable[str], names: Iterable[str],
                  headers: Mapping[str, str] | None = None) -> list[RepoDataRecord]:
    """The records of ``names`` in ``subdirs`` of the channel at ``url`` (their dependencies not followed).

    Each call reads the channel afresh (a new, uncached gateway), so a channel written a moment ago is
    seen as it is now. The client carries rattler's auth middleware (RATTLER_AUTH_FILE) for private
    channels; ``headers`` (a quetz ``X-API-Key``, say) go, in memory, to requests for ``url``'s host only.
    rattler's errors propagate: what a failure means is the caller's to say.
    """
    # Imported here: publishing to a directory or S3 never loads rattler's Gateway.
    from rattler import Channel, Gateway, SourceConfig, Subdir

    async def query() -> list[RepoDataRecord]:
        with tempfile.TemporaryDirectory(prefix="rocmlock-gateway-") as cache:
            gateway = Gateway(cache_dir=Path(cache), client=_client(url, headers),
                              default_config=SourceConfig(cache_action="no-cache"))
            result = await gateway.query([Channel(url)], [Subdir(s) for s in sorted(set(subdirs))],
                                         sorted(set(names)), recursive=False)
            return [rec for per_spec in result for rec in per_spec]

    return asyncio.run(query())


def _client(url: str, headers: Mapping[str, str] | None) -> Client:
    """rattler's default client, plus ``headers`` on requests to ``url``'s host when there are any."""
    from rattler import Client
    from rattler.networking import AddHeadersMiddleware, AuthenticationMiddleware, RetryMiddleware

    if not headers:
        return Client.default_client()
    host, extra = urlsplit(url).hostname, dict(headers)
    add = AddHeadersMiddleware(lambda req_host, _path: extra if req_host == host else None)
    return Client([RetryMiddleware(3), AuthenticationMiddleware(), add])
