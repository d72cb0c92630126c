"""Publish built packages to the team's channel: a directory, S3, prefix.dev, quetz, artifactory or anaconda.org.

Before anything is uploaded the destination is read (its repodata, with the same credentials), so that
packages already there are skipped, a different file under the same name is refused unless ``force``,
and bad credentials stop the publish before the first file is sent. A package whose device code contradicts its
build string is refused before that (``devicecheck``).

Credentials come from the environment (``PREFIX_API_KEY``, ``QUETZ_API_KEY``, ``ARTIFACTORY_TOKEN``,
``ANACONDA_API_KEY``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``) or rattler's auth file
(``RATTLER_AUTH_FILE``); they are never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import SplitResult, urlsplit

from rocmlock.channel import channel_dir
from rocmlock.channel.devicecheck import check_device_code
from rocmlock.channel.local import LocalPackage, local_packages
from rocmlock.channel.repodata import query_channel
from rocmlock.errors import InputError, OperationError
from rocmlock.util.credentials import not_found, one_line, redact_text, redact_url, refuse_query, split_url
from rocmlock.util.credentials import refused as refused_text

Backend = Literal["directory", "s3", "prefix", "quetz", "artifactory", "anaconda"]
TOKEN_VARS: dict[Backend, str] = {"prefix": "PREFIX_API_KEY", "quetz": "QUETZ_API_KEY",
                                  "artifactory": "ARTIFACTORY_TOKEN", "anaconda": "ANACONDA_API_KEY"}
SECRET_VARS = (*TOKEN_VARS.values(), "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
FORMS = ("a directory or file:///path", "s3://bucket/prefix", "https://prefix.dev/<channel>",
         "quetz+https://host/<channel>", "artifactory+https://host/artifactory/<channel>",
         "anaconda://<owner>")


@dataclass(frozen=True)
class Destination:
    """Where packages go: ``url`` is the upload endpoint, ``read_url`` the channel as clients see it."""

    kind: Backend
    url: str
    channel: str
    read_url: str

    def __str__(self) -> str:
        return redact_url(self.read_url)


@dataclass(frozen=True)
class PublishResult:
    destination: str
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]
    replaced: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"destination": self.destination, "uploaded": list(self.uploaded), "skipped": list(self.skipped),
                "replaced": list(self.replaced)}


# ----------------------------------------------------------------------------- destinations


def parse_destination(to: str, option: str = "--to") -> Destination:
    """Turn ``--to`` into a :class:`Destination`; unknown forms list the accepted ones.

    ``option`` is what the user typed the URL as (``plan --channel`` takes these forms too), for the messages.
    Credentials in the URL are refused: the upload forms take them from the environment or RATTLER_AUTH_FILE.
    """
    if "://" in to:
        refuse_query(to, option)
    try:
        parts = urlsplit(to)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        raise InputError(f"{option} {redact_url(to)}: not a valid URL ({exc})",
                         hint="use one of: " + "; ".join(FORMS)) from None
    kind = _kind(parts)
    if kind is None:
        raise InputError(f"{option} {redact_url(to)}: cannot tell which kind of channel this is",
                         hint="use one of: " + "; ".join(FORMS))
    if parts.scheme:  # a plain path may hold '@' (/data/ci@node/channel): it is a directory name there
        _refuse_credentials(to, kind, option)
    return _destination(to, parts, kind, option)


def _kind(parts: SplitResult) -> Backend | None:
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return "directory"
    if scheme == "s3":
        return "s3"
    if scheme == "prefix" or (scheme == "https" and parts.hostname in ("prefix.dev", "repo.prefix.dev")):
        return "prefix"
    if scheme == "anaconda" or (scheme == "https" and parts.hostname == "anaconda.org"):
        return "anaconda"
    if scheme in ("quetz+http", "quetz+https", "artifactory+http", "artifactory+https") and parts.path.strip("/"):
        return "quetz" if scheme.startswith("quetz") else "artifactory"
    return None


def _destination(to: str, parts: SplitResult, kind: Backend, option: str) -> Destination:
    """The destination of a ``--to`` already known to hold no credentials (so ``netloc`` is the host)."""
    scheme, path = parts.scheme.lower(), parts.path.strip("/")
    if kind == "directory":
        return _directory(to, parts.path if scheme == "file" else to, option)
    if kind == "s3":
        _named(to, parts.netloc, "bucket", option)
        return Destination("s3", f"s3://{parts.netloc}/{path}".rstrip("/"), path, f"s3://{parts.netloc}/{path}")
    if kind == "prefix":
        channel = parts.netloc if scheme == "prefix" else path
        _named(to, channel, "channel", option)
        return Destination("prefix", "https://prefix.dev", channel, f"https://repo.prefix.dev/{channel}")
    if kind == "anaconda":
        owner = (parts.netloc if scheme == "anaconda" else path).split("/")[0]
        _named(to, owner, "owner", option)
        return Destination("anaconda", "https://api.anaconda.org", owner, f"https://conda.anaconda.org/{owner}")
    base, _, channel = path.rpartition("/")
    server = f"{scheme.partition('+')[2]}://{parts.netloc}/{base}".rstrip("/")
    return Destination(kind, server, channel, f"{server}/get/{channel}" if kind == "quetz" else f"{server}/{channel}")


# `--to` forms that name an upload endpoint, not a channel clients can read.
_UPLOAD_SCHEMES = ("prefix", "anaconda", "quetz+http", "quetz+https", "artifactory+http", "artifactory+https")


def read_url(channel: str, option: str = "--channel") -> str:
    """The channel clients read for a ``--to`` form (quetz+https://h/c -> https://h/get/c); other URLs as given.

    So one value (build-variants.yml's ROCMLOCK_CHANNEL) serves ``plan --channel``, ``build --channel`` and
    ``publish --to``; ``option`` names the one the user typed, for the messages.
    """
    scheme = channel.partition("://")[0].lower() if "://" in channel else ""
    if scheme:
        refuse_query(channel, option)
    try:
        host = urlsplit(channel).hostname if scheme == "https" else None
    except ValueError as exc:  # an unclosed IPv6 host: urllib cannot split it (and neither can rattler)
        raise InputError(f"{option} {redact_url(channel)}: not a valid URL ({exc})",
                         hint="check the URL (a host such as [::1] needs its closing bracket)") from None
    if scheme in _UPLOAD_SCHEMES or host in ("prefix.dev", "anaconda.org"):
        return parse_destination(channel, option).read_url
    return channel


def _named(to: str, name: str, what: str, option: str) -> None:
    if not name:
        raise InputError(f"{option} {redact_url(to)}: names no {what}", hint="use one of: " + "; ".join(FORMS))


def _directory(to: str, given: str, option: str) -> Destination:
    """A directory channel; ``file://`` with no path (or ``--to ''``) is an error, never the current directory."""
    _named(to, given.strip(), "directory", option)
    root = Path(given).expanduser().resolve()
    existing = next(p for p in (root, *root.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(f"{option} {to}: {existing} is not a directory", hint="publish to a directory (a channel)")
    return Destination("directory", str(root), root.name, root.as_uri())


def _refuse_credentials(to: str, kind: Backend, option: str) -> None:
    """A key in the URL (``user:key@``, ``anaconda://<key>@owner``, a ``/t/<key>/`` path) would show in ``ps``
    and the shell's history, and the uploads (py-rattler-build) never read it from there: they take the
    variable or the auth file. It is refused in every form, and never shown: ``anaconda://<key>@owner`` once
    became the owner, so the key was a path segment of the read URL that no redaction removes."""
    if split_url(to).empty:
        return
    if kind == "directory":
        hint = "a directory channel takes no credentials: write it as a path or file:///path"
    elif kind == "s3":
        hint = "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    elif option == "--to":
        hint = f"export {TOKEN_VARS[kind]}=<key>, or add the host to RATTLER_AUTH_FILE"
    else:
        hint = (f"add the host to RATTLER_AUTH_FILE to read it (publish --to takes {TOKEN_VARS[kind]} "
                "from the environment)")
    raise InputError(f"{option} {redact_url(to)}: credentials do not go in {option}", hint=hint)


# ----------------------------------------------------------------------------- what is there already


def _secrets(env: Mapping[str, str]) -> list[str]:
    return [env[v] for v in SECRET_VARS if env.get(v)]


def _read_headers(dest: Destination, env: Mapping[str, str]) -> dict[str, str]:
    """What reading the destination's repodata needs beyond RATTLER_AUTH_FILE: quetz's key from the environment.

    quetz 0.10.4 takes a key from the ``X-API-Key`` header (quetz/deps.py ``get_rules``) or from a ``/t/<key>/``
    prefix (quetz/main.py ``CondaTokenMiddleware``); a private channel answers 401 to anything else. Without
    QUETZ_API_KEY, a ``CondaToken`` for the host in RATTLER_AUTH_FILE reaches it through rattler's middleware.
    """
    key = env.get(TOKEN_VARS["quetz"]) if dest.kind == "quetz" else None
    return {"X-API-Key": key} if key else {}


def _remote_records(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str]) -> dict[str, str]:
    """``{subdir/file: sha256}`` of the given packages' names in the destination's repodata."""
    subdirs = {p.subdir for p in packages} | {"noarch"}
    try:
        records = query_channel(dest.read_url, subdirs, {p.name for p in packages}, _read_headers(dest, env))
        return {f"{r.subdir}/{r.file_name}": r.sha256.hex() if r.sha256 else "" for r in records}
    except Exception as exc:  # noqa: BLE001 - rattler raises several exception types for HTTP failures
        text = str(exc)
        if not_found(text):  # the status, not the URL's port (54041): a refusal there was taken for a 404
            return {}
        refused = refused_text(text)
        what = "credentials were refused" if refused else "it cannot be read"
        raise OperationError(
            f"cannot publish to {dest}: {what} ({one_line(redact_text(text, _secrets(env)))}); nothing was uploaded",
            hint=_read_hint(dest, env, refused),
        ) from None


def _read_hint(dest: Destination, env: Mapping[str, str], refused: bool) -> str:
    var = TOKEN_VARS.get(dest.kind, "the token")
    if not refused:
        return f"is the server running at {urlsplit(str(dest)).netloc}, and is the URL right (http or https)?"
    if env.get(var):
        return f"the server refused {var}: check that it is a key with a role on channel '{dest.channel}'"
    return f"set {var} or add the host to RATTLER_AUTH_FILE"


def _check_quetz_channel(dest: Destination, env: Mapping[str, str]) -> None:
    """quetz answers 404 for the repodata of a channel it does not have, as for an empty subdir; its API
    (``GET /api/channels/{name}``, quetz/main.py ``get_channel``) tells the two apart. Anything but a 404
    there (no key, a network error) leaves it to the upload to say."""
    import urllib.error
    import urllib.request

    key = env.get(TOKEN_VARS["quetz"])
    req = urllib.request.Request(f"{dest.url}/api/channels/{dest.channel}", headers={"X-API-Key": key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30):
            return
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            return
    except (OSError, ValueError):
        return
    raise OperationError(f"{redact_url(dest.url)} has no channel '{dest.channel}'; nothing was uploaded",
                         hint="create it in quetz (web UI, or POST /api/channels), or fix the channel in --to")


def sort_out(packages: list[LocalPackage], remote: dict[str, str], force: bool,
             where: str) -> tuple[list[LocalPackage], list[str], list[str]]:
    """Split into (to upload, skipped because identical, replaced); refuse a different file unless ``force``."""
    upload, skipped, replaced = [], [], []
    for pkg in packages:
        there = remote.get(pkg.key)
        if there is None:
            upload.append(pkg)
        elif there == pkg.sha256():
            skipped.append(pkg.key)
        else:
            replaced.append(pkg.key)
            upload.append(pkg)
    if replaced and not force:
        raise OperationError(
            f"{where} already has a different {replaced[0]}" + (f" (+{len(replaced) - 1} more)" if replaced[1:] else "")
            + "; nothing was uploaded",
            hint="bump the build number, or pass --force to overwrite",
        )
    return upload, skipped, replaced


# ----------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class S3Config:
    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str


def _s3(dest: Destination, env: Mapping[str, str]) -> tuple[S3Config, object]:
    try:
        import boto3
    except ImportError:
        raise OperationError("publishing to S3 needs boto3", hint="pip install boto3") from None
    parts = urlsplit(dest.url)
    cfg = S3Config(parts.netloc, parts.path.strip("/"), env.get("AWS_ENDPOINT_URL") or None,
                   env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")
    client = boto3.client("s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region,
                          aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                          aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                          aws_session_token=env.get("AWS_SESSION_TOKEN"))
    return cfg, client


def _s3_key(cfg: S3Config, pkg: LocalPackage) -> str:
    return "/".join(p for p in (cfg.prefix, pkg.subdir, pkg.path.name) if p)


def _s3_records(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str]) -> dict[str, str]:
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

    cfg, client = _s3(dest, env)
    out = {}
    for pkg in packages:
        try:
            head = client.head_object(Bucket=cfg.bucket, Key=_s3_key(cfg, pkg))  # type: ignore[attr-defined]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                continue
            raise OperationError(f"cannot publish to {dest}: {code or exc} for {_s3_key(cfg, pkg)}; "
                                 "nothing was uploaded",
                                 hint="check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and the bucket") from None
        except BotoCoreError as exc:
            raise OperationError(f"cannot reach {dest}: {redact_text(str(exc), _secrets(env))}",
                                 hint="check AWS_ENDPOINT_URL and AWS credentials") from None
        # rocmlock records the sha256 at upload; files put there otherwise are compared by their MD5 ETag.
        sha = head.get("Metadata", {}).get("sha256")
        md5 = hashlib.md5(pkg.path.read_bytes()).hexdigest()
        same = sha == pkg.sha256() if sha else head.get("ETag", "").strip('"') == md5
        out[pkg.key] = pkg.sha256() if same else "different"
    return out


def _publish_s3(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str]) -> None:
    from rattler.index import S3Credentials, index_s3

    cfg, client = _s3(dest, env)
    for pkg in packages:
        client.upload_file(str(pkg.path), cfg.bucket, _s3_key(cfg, pkg),  # type: ignore[attr-defined]
                           ExtraArgs={"Metadata": {"sha256": pkg.sha256()}})
    creds = S3Credentials(endpoint_url=cfg.endpoint_url or f"https://s3.{cfg.region}.amazonaws.com",
                          region=cfg.region, access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                          secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                          session_token=env.get("AWS_SESSION_TOKEN"),
                          addressing_style="path" if cfg.endpoint_url else "virtual-host")
    asyncio.run(index_s3(dest.url, credentials=creds))


def _await_index(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str],
                 timeout_s: float = 60.0) -> None:
    """Return once the channel's repodata lists ``packages`` with their sha256, so a lock run next sees them.

    quetz 0.10.4 answers an upload first and indexes afterwards, in a background task (quetz/main.py
    ``post_upload`` adds ``indexing.update_indexes`` to ``background_tasks``).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        remote = _remote_records(dest, packages, env)
        missing = [p.key for p in packages if remote.get(p.key) != p.sha256()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise OperationError(f"uploaded to {dest}, but after {timeout_s:.0f} s its repodata still does not "
                                 f"list {missing[0]}" + (f" (+{len(missing) - 1} more)" if missing[1:] else ""),
                                 hint="check the server's log: it indexes the channel after each upload")
        time.sleep(0.5)


def _refuse_quetz_replace(dest: Destination, replaced: list[str]) -> None:
    """quetz cannot overwrite through the upload: py-rattler-build's quetz upload has no ``force``, and quetz
    0.10.4 answers 409 to a second file under a name it holds (quetz/main.py ``post_upload``). Deleting the
    version first (``delete_package_version`` there) is the way, so say exactly how."""
    subdir, file = replaced[0].split("/", 1)
    name = file.rsplit("-", 2)[0]
    raise OperationError(
        f"{dest} already has a different {replaced[0]} and quetz cannot overwrite on upload; nothing was uploaded",
        hint=f"delete it first: curl -X DELETE -H \"X-API-Key: $QUETZ_API_KEY\" {dest.url}/api/channels/"
             f"{dest.channel}/packages/{name}/versions/{subdir}/{file} (or bump the build number)",
    )


def _upload_http(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str], force: bool) -> None:
    import rattler_build as rb

    files = [str(p.path) for p in packages]
    token = env.get(TOKEN_VARS[dest.kind]) or None
    auth_file = env.get("RATTLER_AUTH_FILE") or None
    if dest.kind == "prefix":
        rb.upload_package_to_prefix(files, dest.url, dest.channel, api_key=token, auth_file=auth_file,
                                    skip_existing=not force, force=force)
    elif dest.kind == "quetz":
        rb.upload_package_to_quetz(files, dest.url, dest.channel, api_key=token, auth_file=auth_file)
    elif dest.kind == "artifactory":
        rb.upload_package_to_artifactory(files, dest.url, dest.channel, token=token, auth_file=auth_file)
    else:
        rb.upload_package_to_anaconda(files, dest.channel, api_key=token, force=force, auth_file=auth_file)


def _send(dest: Destination, packages: list[LocalPackage], upload: list[LocalPackage], env: Mapping[str, str],
          force: bool, log: Callable[[str], None]) -> None:
    if dest.kind == "directory":  # also with nothing to upload: it indexes, and repairs an interrupted run
        channel_dir.publish_to_directory(Path(dest.url), {p.key: p.path for p in packages}, [p.key for p in upload],
                                         log)
    elif upload and dest.kind == "s3":
        _publish_s3(dest, upload, env)
    elif upload:
        _upload_http(dest, upload, env, force)
        if dest.kind == "quetz":
            _await_index(dest, upload, env)


def publish(source: Path, to: str, *, force: bool = False, env: Mapping[str, str] | None = None,
            log: Callable[[str], None] = lambda _: None) -> PublishResult:
    """Publish every package under ``source`` to ``to``; returns what was uploaded and skipped.

    Into a directory, all of it (what is there already, the copies, the index) holds the channel's publish lock,
    so publishes to one directory take turns (:func:`rocmlock.channel.channel_dir.publish_lock`).
    """
    env = dict(os.environ) if env is None else env
    dest = parse_destination(to)
    packages = local_packages(source)
    check_device_code([(p.key, p.path) for p in packages], log)
    with channel_dir.publish_lock(Path(dest.url), log) if dest.kind == "directory" else contextlib.nullcontext():
        return _publish(dest, packages, force, env, log)


def _records(dest: Destination, packages: list[LocalPackage], env: Mapping[str, str]) -> dict[str, str]:
    """``{subdir/file: sha256}`` of the packages' names that the destination holds."""
    if dest.kind == "directory":
        return channel_dir.present(Path(dest.url), [p.key for p in packages])
    if dest.kind == "s3":
        return _s3_records(dest, packages, env)
    return _remote_records(dest, packages, env)


def _publish(dest: Destination, packages: list[LocalPackage], force: bool, env: Mapping[str, str],
             log: Callable[[str], None]) -> PublishResult:
    upload, skipped, replaced = sort_out(packages, _records(dest, packages, env), force, str(dest))
    if dest.kind == "quetz" and upload:
        _check_quetz_channel(dest, env)
    if replaced and dest.kind == "quetz":
        _refuse_quetz_replace(dest, replaced)
    for key in skipped:
        log(f"skip {key} (already in {dest})")
    if upload:
        log(f"upload {len(upload)} package(s) to {dest}")
    try:
        _send(dest, packages, upload, env, force, log)
    except Exception as exc:  # the upload and index libraries raise their own exception types
        if isinstance(exc, OperationError) or (dest.kind == "directory" and isinstance(exc, OSError)):
            raise  # a local OSError names its file, and the CLI prints it in one line
        raise OperationError(f"publishing to {dest} failed: {one_line(redact_text(str(exc), _secrets(env)))}",
                             hint="check the credentials and that the channel exists") from None
    return PublishResult(str(dest), tuple(p.key for p in upload), tuple(skipped), tuple(replaced))
