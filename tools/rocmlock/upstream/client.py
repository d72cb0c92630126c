"""Talking to upstream over HTTP: PyPI's JSON API (releases, sdist digests, downloads) and GitHub
(commits of tags, files at a commit, archives to hash).

One ``requests`` Session with retries (urllib3's ``Retry``: connection errors, read errors and
429/5xx answers, with backoff) and a timeout on every call. Like pip, the session takes proxies
(HTTP(S)_PROXY, NO_PROXY) and the CA bundle (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) from the
environment (``trust_env``); ``PIP_CERT`` is honoured too. Credentials in an index URL never reach a
message: every URL shown goes through :func:`rocmlock.util.credentials.mask_query`, which also hides a file URL's
query (a mirror's presigned ``X-Amz-Signature``); a root URL has none (:func:`check_root_url`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from rocmlock.errors import InputError, OperationError
from rocmlock.upstream.pypijson import BadAnswer, Project, kind, parse_project
from rocmlock.util.credentials import mask_query, refuse_query

PYPI_URL = "https://pypi.org/pypi"
RETRY_STATUS = (429, 500, 502, 503, 504)
_CHUNK = 1 << 20


class Unreachable(OperationError):
    """The host did not answer (connection refused, DNS, timeout) after the retries."""


class NotFound(OperationError):
    """The host answered 404."""


class ChecksumMismatch(OperationError):
    """A download's sha256 is not the one expected."""


@dataclass(frozen=True)
class Hosts:
    """Where upstream lives (a mirror or a local test server can stand in for each)."""

    index_url: str = PYPI_URL
    github: str = "https://github.com"
    github_api: str = "https://api.github.com"
    github_raw: str = "https://raw.githubusercontent.com"

    def placeholders(self) -> dict[str, str]:
        return {
            "github": self.github.rstrip("/"),
            "github_api": self.github_api.rstrip("/"),
            "github_raw": self.github_raw.rstrip("/"),
        }


def check_root_url(url: str, option: str) -> None:
    """An InputError naming ``option``, the URL not shown, when the root ``url`` (of the index, GitHub, its API or
    raw files) has a query string or fragment.

    Paths are appended to a root (``<index>/<name>/json``): after a query they land inside it, so such a URL
    never worked, and its query, maybe a token, was printed in every error (redaction knows userinfo only).
    requests sends ``user:password@`` from the URL, and reads ``~/.netrc`` for a request without credentials
    (requests/sessions.py ``prepare_request``, with ``trust_env``)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:  # "Invalid IPv6 URL" for http://[::1
        raise InputError(f"{option}: not a URL ({exc})",
                         hint="e.g. --index-url https://pypi.org/pypi") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{option}: not an http(s) URL", hint="e.g. --index-url https://pypi.org/pypi")
    refuse_query(url, option, what="a root URL rocmlock appends paths to cannot have",
                 hint="give the credentials in ~/.netrc (read for every host) or as user:password@ before the host")


@dataclass(frozen=True)
class HttpOptions:
    """Timeout (seconds, per connect and per read), retries, and urllib3's backoff factor."""

    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5


def make_session(options: HttpOptions) -> requests.Session:
    """A Session that retries connection/read errors and 429/5xx, with the environment's proxies and CA."""
    session = requests.Session()
    retry = Retry(
        total=options.retries,
        connect=options.retries,
        read=options.retries,
        status=options.retries,
        backoff_factor=options.backoff,
        status_forcelist=RETRY_STATUS,
        allowed_methods=("GET", "HEAD"),
        raise_on_status=False,
    )
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = "rocmlock (+https://github.com/rocmlock)"
    if os.environ.get("PIP_CERT"):
        session.verify = os.environ["PIP_CERT"]
    return session


class Client:
    """Upstream lookups over one Session; every call raises OperationError subclasses, never requests'."""

    def __init__(self, hosts: Hosts | None = None, options: HttpOptions | None = None) -> None:
        self.hosts = hosts or Hosts()
        self.options = options or HttpOptions()
        self.session = make_session(self.options)
        self._projects: dict[str, Project] = {}
        # Like pip, credentials of the index URL also go to files on the index's host (a mirror's sdists),
        # and to no other host.
        index = urlsplit(self.hosts.index_url)
        self._index_host = index.hostname
        self._index_auth = (
            (unquote(index.username), unquote(index.password or "")) if index.username else None
        )

    def _get(
        self, url: str, stream: bool = False, headers: dict[str, str] | None = None
    ) -> requests.Response:
        shown = mask_query(url)
        try:
            same_host = urlsplit(url).hostname == self._index_host and "@" not in urlsplit(url).netloc
            auth = self._index_auth if same_host else None
            response = self.session.get(
                url, timeout=self.options.timeout, stream=stream, headers=headers, auth=auth
            )
        except requests.exceptions.RetryError as exc:
            raise OperationError(
                f"{shown}: failing after {self.options.retries} retries ({_reason(exc)})",
                hint="the server answers with errors; try again later or use a mirror",
            ) from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise Unreachable(
                f"{shown}: unreachable ({_reason(exc)})",
                hint="check the network, the proxy (HTTPS_PROXY) or pass a reachable mirror",
            ) from None
        if response.status_code == 404:
            raise NotFound(f"{shown}: not found (HTTP 404)")
        if response.status_code >= 400:
            retried = f" after {self.options.retries} retries" if response.status_code in RETRY_STATUS else ""
            raise OperationError(
                f"{shown}: HTTP {response.status_code}{retried}", hint="try again later or use a mirror"
            )
        return response

    def project(self, name: str) -> Project:
        """``name``'s releases from the index's JSON API (cached per Client)."""
        if name not in self._projects:
            url = f"{self.hosts.index_url.rstrip('/')}/{name}/json"
            try:
                data = self._get(url).json()
            except (ValueError, RecursionError):  # RecursionError: JSON nested past the interpreter's limit
                raise OperationError(
                    f"{mask_query(url)}: not a PyPI JSON API answer",
                    hint="--index-url takes the JSON API root, e.g. https://pypi.org/pypi",
                ) from None
            self._projects[name] = parse_project(name, data, url)
        return self._projects[name]

    def download(self, url: str, sha256: str | None = None) -> bytes:
        """The bytes at ``url``; with ``sha256``, a ChecksumMismatch unless they hash to it."""
        data = self._get(url).content
        got = hashlib.sha256(data).hexdigest()
        if sha256 is not None and got != sha256:
            raise ChecksumMismatch(
                f"{mask_query(url)}: sha256 {got}, expected {sha256}",
                hint="the download is corrupt or the file changed upstream; do not pin it",
            )
        return data

    def sha256_of(self, url: str) -> str:
        """The sha256 of what ``url`` serves, streamed (archives can be hundreds of MB)."""
        digest = hashlib.sha256()
        with self._get(url, stream=True) as response:
            for chunk in _chunks(response):
                digest.update(chunk)
        return digest.hexdigest()

    def reachable(self, url: str) -> bool:
        """Whether ``url`` answers a HEAD request (following redirects) with a success."""
        try:
            response = self.session.head(url, timeout=self.options.timeout, allow_redirects=True)
        except requests.exceptions.RequestException:
            return False
        return response.status_code < 400

    def text(self, url: str) -> str:
        """The text at ``url``."""
        return self._get(url).text

    def github_commit(self, repo: str, ref: str) -> str:
        """The commit ``ref`` (a tag) of ``repo`` points at, from GitHub's REST API.

        ``GET /repos/{owner}/{repo}/commits/{ref}`` with the ``sha`` media type answers the bare commit,
        annotated tags dereferenced (octokit/plugin-enterprise-rest scripts/update-endpoints/workarounds.js,
        "Get a single commit with media type format set to sha").
        """
        url = f"{self.hosts.github_api.rstrip('/')}/repos/{repo}/commits/{ref}"
        answer = self._get(url, headers={"Accept": "application/vnd.github.sha"}).text.strip()
        return _commit(answer, url, f"tag {ref} of {repo}")

    def github_tags(self, repo: str, pages: int = 10) -> list[str]:
        """The tag names of ``repo`` (GitHub's ``GET /repos/{owner}/{repo}/tags``, 100 a page, at most ``pages``
        pages through the ``Link: rel="next"`` header); an OperationError when an answer is not a list of tags."""
        url: str | None = f"{self.hosts.github_api.rstrip('/')}/repos/{repo}/tags?per_page=100"
        names: list[str] = []
        for _ in range(pages):
            if url is None:
                break
            response = self._get(url, headers={"Accept": "application/vnd.github+json"})
            try:
                answer = response.json()
            except (ValueError, RecursionError):
                answer = None
            if not isinstance(answer, list) or not all(
                    isinstance(tag, dict) and isinstance(tag.get("name"), str) for tag in answer):
                raise OperationError(f"{mask_query(url)}: not a list of tags (GitHub's /tags answer)",
                                     hint="check --github-api-url: it must be GitHub's REST API or a mirror of it")
            names += [tag["name"] for tag in answer]
            nxt = response.links.get("next", {}).get("url")
            # Only pages of the same API: a Link header pointing elsewhere is not followed.
            url = nxt if isinstance(nxt, str) and nxt.startswith(self.hosts.github_api.rstrip("/") + "/") else None
        return names

    def commit_in(self, url: str, what: str) -> str:
        """The commit a text file at ``url`` names first (a ``.ci_commit`` pin file), for ``what``."""
        return _commit(next(iter(self.text(url).split()), ""), url, what)

    def commit_in_json(self, url: str, key: str, what: str) -> str:
        """The commit under ``key`` of the JSON object at ``url`` (Triton's cmake/llvm-info.json, ``llvm_hash``)."""
        text = self.text(url)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        value = data.get(key) if isinstance(data, dict) else None
        if not isinstance(value, str):
            shown = kind(text) if data is None else f"JSON without a string '{key}'"
            raise BadAnswer(f"{mask_query(url)} answered {shown} for the commit of {what}",
                            hint=f"a JSON object with the commit under '{key}' was expected; check the URL or pass "
                                 "--rev NAME=COMMIT")
        return _commit(value, url, what)

    def commit_in_files(self, files: Sequence[tuple[str, str | None]], what: str) -> str:
        """The commit the first of ``files`` that exists names: ``(url, JSON key)`` pairs, a None key for a text file
        whose first word is the commit. A 404 moves on to the next (a file an older layout of the repository has);
        the last one's NotFound is raised."""
        *earlier, (last_url, last_key) = files
        for url, key in earlier:
            try:
                return self._commit_at(url, key, what)
            except NotFound:
                continue
        return self._commit_at(last_url, last_key, what)

    def _commit_at(self, url: str, key: str | None, what: str) -> str:
        return self.commit_in_json(url, key, what) if key else self.commit_in(url, what)


_COMMIT = re.compile(r"[0-9a-f]{40}")


def _commit(text: str, url: str, what: str) -> str:
    """``text`` when it is a full commit hash, else a BadAnswer (the answer reaches variants.yaml and reports)."""
    if not _COMMIT.fullmatch(text):
        raise BadAnswer(f"{mask_query(url)} answered {kind(text) if text else 'nothing'} for the commit of {what}",
                        hint="a full 40-hex commit was expected; check the URL (a login page? a proxy?) or pass "
                             "--rev NAME=COMMIT")
    return text


def _chunks(response: requests.Response) -> Iterator[bytes]:
    try:
        yield from response.iter_content(_CHUNK)
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise Unreachable(f"{mask_query(response.url)}: download interrupted ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    """Why a request failed in a few words, without the URL (it may hold credentials)."""
    # After urllib3's retries, requests wraps the last error: MaxRetryError(reason=ReadTimeoutError(...)).
    inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else exc
    cause = getattr(inner, "reason", None) or inner
    if isinstance(exc, requests.exceptions.Timeout) or "Timeout" in type(cause).__name__:
        return "timed out"
    if isinstance(exc, requests.exceptions.RetryError):
        return "too many error answers"
    return f"connection failed: {type(cause).__name__}"
