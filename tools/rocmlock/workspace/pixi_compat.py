"""pixi's conventions that the lock engine must reproduce: platform virtual packages and channel URLs.

References are to the pixi repository (crates/pixi_manifest, crates/pixi_default_versions).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rocmlock.errors import InputError
from rocmlock.util.credentials import one_line, redact_text, redact_url, refuse_query, split_url

DEFAULT_GLIBC = "2.28"
DEFAULT_LINUX = "4.18"
# pixi's subdir defaults (pixi_manifest/src/platform.rs, subdir_default_virtual_packages) as
# (name, version, build); a platform's lock entry lists them unless the user overrides them.
DEFAULT_OSX = {"osx-64": "13.0", "osx-arm64": "13.0"}
ARCHSPEC = {"linux-64": "x86_64", "osx-64": "x86_64", "win-64": "x86_64", "linux-aarch64": "aarch64",
            "win-arm64": "aarch64", "osx-arm64": "m1", "linux-ppc64le": "ppc64le"}
LIBC_NAMES = frozenset({"__glibc", "__musl", "__eglibc"})
# A bare channel name resolves like pixi's default channel alias does.
CHANNEL_ALIAS = "https://conda.anaconda.org/"
VirtualPackage = tuple[str, str, str]


def subdir_default_virtual_packages(subdir: str) -> list[VirtualPackage]:
    """pixi's default virtual packages for ``subdir``: ``__unix``, ``__linux``/``__glibc``/... and ``__archspec``."""
    out: list[VirtualPackage] = []
    if not subdir.startswith("win") and subdir != "noarch":
        out.append(("__unix", "0", "0"))
    if subdir.startswith("linux"):
        out += [("__linux", DEFAULT_LINUX, ""), ("__glibc", DEFAULT_GLIBC, "")]
    if subdir.startswith("win"):
        out.append(("__win", "10.0", ""))
    if subdir in DEFAULT_OSX:
        out.append(("__osx", DEFAULT_OSX[subdir], ""))
    if subdir in ARCHSPEC:
        out.append(("__archspec", "0", ARCHSPEC[subdir]))
    return out


def format_virtual_package(vp: VirtualPackage) -> str:
    """The ``__name=version[=build]`` form pixi.lock stores (rattler's GenericVirtualPackage display)."""
    name, version, build = vp
    return f"{name}={version}={build}" if build else f"{name}={version}"


def parse_virtual_package(text: str) -> VirtualPackage:
    """Inverse of :func:`format_virtual_package`."""
    name, _, rest = text.partition("=")
    version, _, build = rest.partition("=")
    return (name, version, build)


def customised_virtual_packages(subdir: str, vps: Iterable[str]) -> list[str]:
    """``vps`` (``__name=version[=build]``) less ``subdir``'s defaults, sorted: what tells pixi's platforms apart."""
    defaults = set(subdir_default_virtual_packages(subdir))
    return sorted(v for v in vps if parse_virtual_package(v) not in defaults)


def is_local_channel(channel: str) -> bool:
    """True for a channel written as a path (``./channel``, ``../x``, ``/srv/x``, ``~/x``)."""
    return channel.startswith(("./", "../", "/", "~", ".\\")) or channel in (".", "..")


def check_channel(channel: str, path: Path, key: str) -> str:
    """``channel`` when rattler can read it as a channel (pixi parses a URL with the url crate, toml/channel.rs);
    else an input error that shows the URL without its credentials (and a URL with a query string, which no
    channel has, without the URL: :func:`rocmlock.util.credentials.refuse_query`)."""
    if is_local_channel(channel):
        return channel
    refuse_query(channel, f"{path}: key '{key}'")  # a bare name with '?' is a URL with a query below the alias
    from rattler import Channel
    from rattler.exceptions import InvalidChannelError

    try:
        Channel(redact_url(channel))
    except InvalidChannelError as exc:
        shown = redact_url(channel)
        reason = redact_text(one_line(str(exc)), split_url(channel).secrets)
        raise InputError(f"{path}: key '{key}' is '{shown}', not a valid channel: {reason}",
                         hint="write a channel name, a path, or a URL such as https://host/channel") from None
    return channel


def channel_base_url(channel: str, root: Path) -> str:
    """The channel's base URL with a trailing slash, resolved as pixi does.

    Paths are relative to the manifest directory, bare names go through the default channel
    alias (``conda-forge`` -> ``https://conda.anaconda.org/conda-forge/``), URLs stay as written.
    """
    if "://" in channel:
        url = channel
    elif is_local_channel(channel):
        url = (root / Path(channel).expanduser()).resolve().as_uri()
    else:
        url = CHANNEL_ALIAS + channel.strip("/")
    return url.rstrip("/") + "/"


# The virtual packages rattler models: rattler_virtual_packages' VirtualPackage variants, which py-rattler 0.28
# (the version rocmlock pins) detects. `__amdgpu` (presence, `0=0`) and `__amdgpu_arch` (the ISA, `9.4.2`) joined
# them in conda/rattler#2806 (crates/rattler_virtual_packages/src/amdgpu.rs; overrides CONDA_OVERRIDE_AMDGPU and
# CONDA_OVERRIDE_AMDGPU_ARCH). pixi solves and checks a lock with the declared packages it maps to these
# (pixi_core/src/workspace/virtual_packages.rs, generic_to_virtual_package) and drops every other name. pixi
# 0.77.0 (2026-08-18, the newest source that could be read here) predates #2806 and has no arm for the two AMD
# names: which pixi release first maps them is not verified (docs/locking.md, "pixi and __amdgpu").
RATTLER_VIRTUAL_PACKAGES = frozenset({"__unix", "__linux", "__glibc", "__musl", "__eglibc", "__win", "__osx",
                                      "__cuda", "__cuda_arch", "__archspec", "__amdgpu", "__amdgpu_arch"})


def pixi_virtual_packages(declared: Iterable[VirtualPackage]) -> list[VirtualPackage]:
    """What pixi's solver and ``--locked`` check see for a platform that declares ``declared``.

    Version-only packages get build ``0``; ``__archspec`` is version 1 with the microarchitecture as build
    (pixi's snapshot virtual_packages__tests__get_minimal_virtual_packages@linux-64.snap: ``__archspec=1=x86_64``,
    though the lock file records ``__archspec=0=x86_64``).
    """
    out: list[VirtualPackage] = []
    for name, version, build in declared:
        if name not in RATTLER_VIRTUAL_PACKAGES:
            continue
        if name == "__archspec":
            out.append((name, "1", build or "0"))
        else:
            out.append((name, "0" if name == "__unix" else version, "0"))
    return out
