"""Keep secrets in channel URLs out of files, logs and error messages."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_TOKEN_SEGMENT = re.compile(r"/t/[^/]+(?=/|$)")


def redact_url(url: str) -> str:
    """Return ``url`` without ``user:password@`` and without a ``/t/<token>/`` segment.

    ``https://bob:s3cret@host/t/abc123/private`` becomes ``https://host/private``: the
    credentials belong in rattler's auth file (``RATTLER_AUTH_FILE``), keyed by host.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _TOKEN_SEGMENT.sub("", url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    path = _TOKEN_SEGMENT.sub("", parts.path)
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """Redact every URL in ``text`` and every literal secret given."""
    out = re.sub(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+", lambda m: redact_url(m.group(0)), text)
    for secret in secrets or []:
        if secret:
            out = out.replace(secret, "***")
    return out
