"""Image references (``--base``, ``--push``) read by the distribution reference grammar, with the registry named.

The grammar (distribution/reference's reference.go, which docker, skopeo and containers/image follow)::

    reference := name [ ":" tag ] [ "@" digest ]
    name      := [ domain "/" ] path
    domain    := host [ ":" port ]   host: a DNS name, an IPv4 address or "[" IPv6 "]"
    path      := component ( "/" component )*   component: [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}

A name's first component is its registry only when it holds a "." or a ":" or is "localhost"; otherwise the
tools read the whole name as a Docker Hub repository (``127.0.0.1:5077`` is Docker Hub's image "127.0.0.1" with
the tag "5077"). rocmlock never lets that happen silently: a reference must name its registry
(``docker.io/library/debian:12`` for Docker Hub), and one that does not is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmlock.errors import InputError
from rocmlock.util.credentials import redact_url
from rocmlock.util.text import escape

# `--base debootstrap:SUITE[:PKG,...]`: a base rocmlock.image.debianbase makes, not a registry or layout reference
DEBOOTSTRAP = "debootstrap:"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:.]+\])"
_REFERENCE = re.compile(rf"(?P<domain>{_HOST}(?::[0-9]+)?)/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
                        r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?", re.ASCII)
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
NAME_MAX = 255  # distribution/reference's NameTotalLengthMax: domain and path together
FORM = "REGISTRY/REPOSITORY:TAG, the registry named (docker.io/library/debian:12 for Docker Hub)"


@dataclass(frozen=True)
class Reference:
    """A registry reference: ``domain/path[:tag][@digest]``."""

    domain: str
    path: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        return f"{self.domain}/{self.path}" + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def loopback(self) -> bool:
        """The registry is this machine (127.0.0.1, localhost, [::1], any port)."""
        host = self.domain.rsplit(":", 1)[0] if not self.domain.endswith("]") else self.domain
        return host in _LOOPBACK or self.domain.startswith("[::1]")


def parse(ref: str, flag: str) -> Reference:
    """``ref`` (``docker://`` optional) as a reference that names its registry; InputError otherwise."""
    bare = ref.removeprefix("docker://")
    shown = escape(redact_url("docker://" + bare).removeprefix("docker://"))[:200]
    first = bare.split("/", 1)[0]
    if "@" in first or "://" in bare:
        raise InputError(f"{flag} {shown}: not a registry reference {FORM} (credentials never go into it)",
                         hint="log in with `skopeo login REGISTRY` (or docker login); rocmlock reads no password")
    found = _REFERENCE.fullmatch(bare)
    if "/" not in bare:
        name, colon, tag = bare.rpartition(":")
        why = f"no registry and repository: it reads as Docker Hub's image '{escape(name)}' with the tag '{escape(tag)}'" \
            if colon else "no registry and no repository"
    elif not _names_registry(first):
        why = f"'{escape(first)}' is not a registry: it would be read as a Docker Hub repository"
    elif found is None:
        why = "not a reference (a lowercase repository, a tag of letters, digits, '_', '.', '-')"
    if found is None or "/" not in bare or not _names_registry(first):
        raise InputError(f"{flag} {shown}: {why}", hint=f"write {FORM}")
    if found["tag"] and found["digest"]:
        # skopeo (containers/image docker transport): "Docker references with both a tag and digest are currently
        # not supported"; refused before the build rather than after it.
        raise InputError(f"{flag} {shown}: both a tag and a digest, which skopeo does not take",
                         hint="write REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST")
    if len(found["domain"]) + 1 + len(found["path"]) > NAME_MAX:
        raise InputError(f"{flag} {shown}: the name is longer than {NAME_MAX} characters", hint=f"write {FORM}")
    return Reference(found["domain"], found["path"], found["tag"], found["digest"])


def _names_registry(first: str) -> bool:
    """Whether a name's first component is its registry (distribution/reference's splitDomain rule)."""
    return "." in first or ":" in first or first == "localhost" or first.startswith("[")
