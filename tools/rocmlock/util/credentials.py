"""Secrets in channel URLs: recognise exactly them, keep them out of every file, log line and message.

A channel URL may carry two kinds of secret, and nothing else in it is one:

- ``user:password@`` (or a lone ``user@``) before the host, in any scheme;
- an anaconda.org-style token ``/t/<token>/`` as the *first* path segment of an http(s) URL, on any
  host (anaconda.org, quetz, a proxy on 127.0.0.1), or of a ``publish --to`` form over http
  (``quetz+https://``, ``artifactory+https://``). rattler recognises it the same way
  (conda/rattler crates/rattler_networking/src/redaction.rs, ``redact_known_secrets_from_url``:
  only ``segments[0] == "t"``). A ``/t/`` deeper in the path, or in a ``file://`` URL, is an
  ordinary directory and stays.

A query string or fragment is not a place for a secret either: a channel URL with one is refused
where it is read (:func:`refuse_query`), so none reaches a message to be redacted; so is one in a
pixi.lock (rocmlock.lock.lockfile) and in an upstream root URL (``outdated``/``bump --index-url``). A PyPI
index URL may legitimately have one (uv sends it): it is read, and never written into an export
(rocmlock.workspace.pypi). :func:`mask_query` hides a query kept as data, :func:`mask_queries` those in a message.

:func:`split_url` separates a URL into its clean form and a :class:`ChannelAuth`. rattler only
ever sees the clean URL (so its repodata cache is keyed by, and stores, no secret), and the
secrets reach it in memory through :func:`rattler_client`'s middlewares: Basic credentials and
extra headers through ``AddHeadersMiddleware``, the token through ``MirrorMiddleware``, which
rewrites ``<clean>/...`` to ``<scheme>://<host>/t/<token>/...`` per request. Nothing is written
to an auth file, so a ``kill -9`` cannot leave one behind.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from rocmlock.errors import InputError
from rocmlock.util.text import escape

if TYPE_CHECKING:
    from rattler import Client

# A URL in free text: a scheme (RFC 3986: a letter, then letters, digits, + . -) then "://". Matched from the start
# of a run of scheme characters only, the scheme being the run from its first letter (see _urls): a regex that
# may start at any letter tried every letter of a long run again (100,000 letters without "://" took 20 s).
_URL_IN_TEXT = re.compile(r"(?<![a-zA-Z0-9+.-])([0-9+.-]*)([a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+)")
# The --to forms over http count too: quetz+https://host/t/<key>/chan is the same key as https://host/t/<key>/...
_TOKEN_SCHEMES = ("http", "https", "quetz+http", "quetz+https", "artifactory+http", "artifactory+https")
MASK = "***"


@dataclass(frozen=True)
class ChannelAuth:
    """What one channel URL needs to be read: its clean ``url`` and the secrets taken out of it.

    ``headers`` are extra request headers for this channel (e.g. a quetz ``X-API-Key``); they are
    secrets too and, like the rest, only ever held in memory.
    """

    url: str
    username: str | None = None
    password: str | None = None
    token: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def secrets(self) -> list[str]:
        """The literal secret strings (for :func:`redact_text`)."""
        values = [self.password, self.token, *(v for _, v in self.headers)]
        if self.username and self.password is None:  # a lone ``token@host`` user is the secret
            values.append(self.username)
        return [v for v in values if v]

    @property
    def empty(self) -> bool:
        return self.username is None and self.token is None and not self.headers

    def request_headers(self) -> dict[str, str]:
        """The headers to send with every request below :attr:`url`."""
        out = dict(self.headers)
        if self.username is not None:
            basic = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(basic).decode()
        return out


def _token_and_path(scheme: str, path: str) -> tuple[str | None, str]:
    if scheme.lower() not in _TOKEN_SCHEMES:
        return None, path
    match = re.fullmatch(r"/t/([^/]+)(/.*)?", path, flags=re.DOTALL)
    if match is None:
        return None, path
    return match.group(1), match.group(2) or "/"


def _crude_redact(url: str) -> str:
    """A malformed URL without anything that may be a ``user:password@`` or a ``/t/<token>/``."""
    url = re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@", r"\1", url)
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*)/t/[^/]+", r"\1", url)


def one_line(text: str) -> str:
    """rattler's multi-line error chain (``A\nCaused by: B\nCaused by: C``) as one line: ``A: C``."""
    lines = [line.strip().removeprefix("Caused by:").strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else text.strip()
    return f"{lines[0]}: {lines[-1]}"


def split_url(url: str) -> ChannelAuth:
    """``url`` split into its clean form and its secrets (see the module docstring for what counts)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib can split (``http://u:pw@[::1/x``): still never show its secrets
        return ChannelAuth(_crude_redact(url))
    userinfo, at, host = parts.netloc.rpartition("@")
    token, path = _token_and_path(parts.scheme, parts.path)
    clean = urlunsplit((parts.scheme, host, path, parts.query, parts.fragment))
    if not at:
        return ChannelAuth(clean, token=token)
    user, colon, password = userinfo.partition(":")
    return ChannelAuth(clean, unquote(user), unquote(password) if colon else None, token)


def redact_url(url: str) -> str:
    """``url`` without its secrets: ``https://bob:pw@host/t/tok/chan`` -> ``https://host/chan``.

    Only secrets are removed (``file:///tmp/x/t/chan`` and ``https://host/tools/t/x`` stay as they
    are), so a redacted channel or package URL still resolves to the same file.
    """
    if "@" not in url and "/t/" not in url:  # no secret possible: the common case, 12,000 times per lock
        return url
    return split_url(url).url


def _urls(text: str, replace: Callable[[str], str]) -> str:
    """``text`` with every URL in it (a scheme from its first letter, ``://``, what follows up to a space or
    quote) passed through ``replace``; linear in the length of ``text``."""
    return _URL_IN_TEXT.sub(lambda m: m[1] + replace(m[2]), text)  # m[1]: what precedes the scheme's first letter


def redact_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """Redact every URL in ``text`` and every literal secret given."""
    out = _urls(text, redact_url)
    for secret in secrets or []:
        if secret:
            out = out.replace(secret, MASK)
    return out


def has_query(url: str) -> bool:
    """Whether ``url`` has a query string or a fragment (to every URL parser, whatever precedes them)."""
    return "?" in url or "#" in url


def mask_query(url: str) -> str:
    """``url`` without its secrets and with whatever follows its first ``?`` or ``#`` replaced by :data:`MASK`.

    For a URL kept as data (a source package's location) where a query may be legitimate but may equally be a
    secret (a presigned ``X-Amz-Signature``): what remains still says where it points."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if cut < 0:
        return redact_url(url)
    if "@" in url[cut:]:  # ``https://bot:pw?x@host``: the part before the '?' may be half a password
        return url.split("://", 1)[0] + "://" + MASK if "://" in url else MASK
    return _crude_redact(url[:cut]) + url[cut] + MASK


def mask_queries(text: str) -> str:
    """:func:`redact_text`, and the query and fragment of every URL in ``text`` masked (:func:`mask_query`).

    For a message that quotes what it could not read (py-rattler's lock parser says
    ``invalid type: string "<value>", expected u64``), never for data: a query may be what makes a URL work."""
    return _urls(text, mask_query)


_CHANNEL_HINT = ("give the secret in RATTLER_AUTH_FILE, as user:password@ before the host, or as a first path "
                 "segment /t/<token>/ (a '?' or '#' in a password is written %3F or %23)")


def refuse_query(url: str, where: str, what: str = "conda channel URLs never have", hint: str = _CHANNEL_HINT
                 ) -> None:
    """An InputError, naming ``where`` (``--channel``, a pixi.toml key), when the channel URL ``url`` has a query
    string or a fragment; the URL is not shown, since what follows its ``?`` is likely the secret. ``what`` and
    ``hint`` say why such a URL has no query and where its secret goes, for URLs other than a channel's.

    A conda channel URL has neither, so refusing costs nothing that ever worked and keeps the secret out of
    every message (redaction only knows userinfo and ``/t/<token>/``):

    - rattler never sends it: a subdir is ``base_url.join("<platform>/")`` (rattler_conda_types
      src/channel/mod.rs ``Channel::platform_url``; channel_url.rs ``ChannelUrl::platform_url``), and resolving a
      relative path drops the base's query and fragment (RFC 3986 5.2.2, the url crate's ``Url::join``).
      Seen with py-rattler 0.28: ``http://127.0.0.1:N/chan?token=X`` requested ``/chan/noarch/repodata.json``
      and failed with "could not find subdir 'noarch' in channel 'http://127.0.0.1:N/chan/?token=X'";
    - rattler's redaction masks a password and a first ``/t/<token>`` segment, never the query
      (crates/rattler_redaction/src/lib.rs ``redact_known_secrets_from_url``), so its errors would print it;
    - conda splits the query off and drops it (conda/models/channel.py ``parse_conda_channel_url``: the
      ``query`` of ``split_conda_url_easy_parts`` is not passed to ``Channel``).

    A ``?`` or ``#`` inside a password is a query or fragment to every URL parser; written ``%3F``/``%23``
    it is a password again.
    """
    if has_query(url):
        raise InputError(
            f"{where}: the URL has a query string or fragment ('?...' or '#...'), which {what} "
            "(the URL is not shown: that part may be a secret)",
            # No example URL with userinfo here: the CLI redacts every URL it prints, examples too.
            hint=hint)


def _host_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return (parts.hostname or ""), parts.path.rstrip("/") + "/"


def rattler_client(auths: Iterable[ChannelAuth]) -> Client:
    """A py-rattler ``Client`` that reads the given channels with their secrets, held in memory only.

    The stack is ``Client.default_client()``'s (retry, auth file/keyring, OCI, GCS, S3) with two
    middlewares in front: request headers for each channel (matched by host and path prefix of the
    clean URL; py-rattler's ``AddHeadersMiddleware`` callback gets host and path, no port), then a
    mirror from each clean URL to its ``/t/<token>/`` form. Middlewares run in list order, so the
    headers are chosen on the clean URL before the mirror rewrites it.
    """
    from rattler import Client
    from rattler.exceptions import AuthenticationStorageError
    from rattler.networking import (
        AddHeadersMiddleware,
        AuthenticationMiddleware,
        GCSMiddleware,
        MirrorMiddleware,
        OciMiddleware,
        RetryMiddleware,
        S3Middleware,
    )

    wanted = [a for a in auths if not a.empty]
    # Longest path first, so a channel below another one's path gets its own headers.
    by_path = sorted(((_host_path(a.url), a.request_headers()) for a in wanted), key=lambda x: -len(x[0][1]))

    def headers(host: str, path: str) -> dict[str, str] | None:
        for (h, prefix), values in by_path:
            if host == h and (path.rstrip("/") + "/").startswith(prefix) and values:
                return values
        return None

    mirrors: dict[str, list[str]] = {}
    for a in wanted:
        if a.token is not None:
            parts = urlsplit(a.url)
            base = a.url.rstrip("/") + "/"
            mirrors[base] = [urlunsplit((parts.scheme, parts.netloc, f"/t/{a.token}{parts.path.rstrip('/')}/", "", ""))]
    middlewares: list[Any] = [RetryMiddleware()]
    if by_path:
        middlewares.append(AddHeadersMiddleware(headers))
    if mirrors:
        middlewares.append(MirrorMiddleware(mirrors))
    middlewares += [AuthenticationMiddleware(), OciMiddleware(), GCSMiddleware(), S3Middleware()]
    try:
        return Client(middlewares)  # reads RATTLER_AUTH_FILE (or ~/.rattler/credentials.json) now
    except AuthenticationStorageError as exc:
        raise auth_file_error(str(exc)) from None


def auth_file_error(text: str) -> InputError:
    """The credentials file rattler cannot parse, in one line without rattler's text: serde quotes the value it
    did not expect (``unknown variant `<password>` ``), which is the secret itself."""
    path = os.environ.get("RATTLER_AUTH_FILE") or "~/.rattler/credentials.json"
    where = re.search(r"at line (\d+) column (\d+)", text)
    at = f" (line {where.group(1)}, column {where.group(2)})" if where else ""
    return InputError(f"{escape(path)}: not a credentials file rattler can read{at}",
                      hint='a JSON object of host -> {"BasicHTTP": {"username": ..., "password": ...}}, '
                           '{"BearerToken": ...} or {"CondaToken": ...}; or unset RATTLER_AUTH_FILE')


def client_for_urls(urls: Iterable[str]) -> tuple[list[str], Client]:
    """The clean form of each of ``urls`` (same order) and a client holding their secrets."""
    auths = [split_url(u) for u in urls]
    return [a.url for a in auths], rattler_client(auths)


def _status_in(text: str, codes: str) -> bool:
    """Whether a fetch error's ``text`` (rattler's: "HTTP status client error (401 Unauthorized) for url (...)")
    names one of the HTTP status ``codes`` (a regex alternation), its URLs left out: a port such as 54041 holds
    "404", a path may hold "401"."""
    return re.search(rf"\b(?:{codes})\b", _urls(text, lambda url: " ")) is not None


def refused(text: str) -> bool:
    """Whether a fetch error's ``text`` is a server refusing the request (HTTP 401 or 403)."""
    return _status_in(text, "401|403")


def not_found(text: str) -> bool:
    """Whether a fetch error's ``text`` is a server answering 404."""
    return _status_in(text, "404")


def refused_channel(channels: Iterable[str], text: str) -> str | None:
    """The clean URL of the one of ``channels`` whose URL a refusal in ``text`` names, if any."""
    if not refused(text):
        return None
    urls = [redact_url(m[2]) for m in _URL_IN_TEXT.finditer(text)]
    for channel in channels:
        clean = redact_url(channel).rstrip("/")
        if any(u == clean or u.startswith(clean + "/") for u in urls):
            return clean
    return None


def credentials_hint(url: str) -> str:
    """How to give rocmlock (rattler) credentials for the channel at ``url``, in one line."""
    host = urlsplit(url).hostname or url
    return (f"add an entry for '{host}' to RATTLER_AUTH_FILE (CondaToken for quetz or anaconda.org, "
            "BearerToken for prefix.dev, BasicHTTP for a user and password), or write the channel in pixi.toml "
            "with its token as a /t/<token>/ URL")
