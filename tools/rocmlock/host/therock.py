"""TheRock's ROCm (7.14 and later): installed as Python packages (``rocm-sdk``) or from a TheRock tarball.

Facts from TheRock's sources (github.com/ROCm/TheRock):

- The ``rocm`` package (build_tools/packaging/python/templates/rocm) provides the ``rocm-sdk`` command
  (``rocm_sdk.__main__``). ``rocm-sdk path --root`` prints the expanded devel tree,
  ``<site-packages>/_rocm_sdk_devel`` (``_`` + the distribution name with ``_`` for ``-`` + a version-suffix nonce,
  empty by default: rocm_sdk/_dist_info.py ``get_py_package_name``, build_python_packages.py ``--version-suffix``);
  the first call unpacks ``rocm_sdk_devel/_devel.tar[.xz]`` there (rocm_sdk/_devel.py ``get_devel_root``).
  Without ``rocm[devel]`` it exits 1 ("Could not load the `rocm[devel]` package"). ``rocm-sdk version`` prints the
  package version (PEP 440: ``7.14.0``, ``7.13.0a20260430``).
- The distributions (rocm_sdk/_dist_info.py ``PackageEntry``): ``rocm-sdk-core`` (HIP runtime, compiler, HIP's
  headers: build_python_packages.py ``core_artifact_filter``), ``rocm-sdk-libraries`` (hipBLAS, hipBLASLt, MIOpen,
  rocRAND ... as shared libraries only: ``libraries_artifact_filter`` takes the ``lib`` component), one
  ``rocm-sdk-device-<gfx>`` per GPU target (the ``.kpack`` device code, overlaid into ``_rocm_sdk_libraries``:
  docs/packaging/python_packaging.md "Kpack-split packaging") and ``rocm-sdk-devel`` (every header, CMake file and
  tool: the ``dev`` components reach no other package).
- The install tree, tarball or devel (RELEASES.md "Installing multi-arch tarballs"): the /opt/rocm layout, with
  ``.info/version`` (rocm-core, base/artifact.toml), ``lib/llvm/bin/clang``, the device libraries in
  ``lib/llvm/amdgcn/bitcode`` and ``amdgcn -> lib/llvm/amdgcn`` (base/aux-overlay/CMakeLists.txt), the device code
  in ``.kpack/``, and ``share/therock/therock_manifest.json`` and ``share/therock/dist_info.json``
  (``dist_amdgpu_targets``: the GPU targets it was built for, ``;``-separated) from base/aux-overlay.

Nothing here runs a command: the caller passes what ``rocm-sdk`` printed (:mod:`rocmlock.host.rocm` runs it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

__all__ = ["CORE", "DEVEL", "DEVEL_PACKAGE", "LIBRARIES", "ROCM_SDK", "Layout", "dist_targets", "installed",
           "is_python_tree", "is_therock", "layout_of", "missing_packages", "package_fix"]

ROCM_SDK = "rocm-sdk"
DEVEL = "_rocm_sdk_devel"
MANIFEST = Path("share/therock/therock_manifest.json")
DIST_INFO = Path("share/therock/dist_info.json")
KPACK_DIR = ".kpack"
# The packages a build needs, in the order pip installs them; the device packages are per target.
CORE, LIBRARIES, DEVEL_PACKAGE = "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-devel"

Layout = Literal["amd", "distro", "therock-python", "therock-tarball"]
_GFX = re.compile(r"gfx[0-9]{2,4}[0-9a-f]?")


def is_python_tree(prefix: Path) -> bool:
    """``prefix`` is the devel tree of TheRock's Python packages (``rocm-sdk path --root``)."""
    return prefix.name.startswith(DEVEL) and prefix.parent.is_dir()


def is_therock(prefix: Path) -> bool:
    """``prefix`` was installed from TheRock (its aux-overlay's share/therock files are there)."""
    return (prefix / MANIFEST).is_file() or (prefix / DIST_INFO).is_file() or is_python_tree(prefix)


def layout_of(prefix: Path, distro_root: Path = Path("/usr")) -> Layout:
    """Which of the four layouts ``prefix`` has."""
    if is_python_tree(prefix):
        return "therock-python"
    if is_therock(prefix):
        return "therock-tarball"
    if prefix == distro_root and not (prefix / ".info/version").is_file():
        return "distro"
    return "amd"


def dist_targets(prefix: Path) -> tuple[str, ...] | None:
    """The GPU targets a TheRock tree was built for (``dist_amdgpu_targets``); None when it does not say.

    Read as untrusted: anything but a JSON object with a string of gfx names is "does not say".
    """
    try:
        data = json.loads((prefix / DIST_INFO).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    value = data.get("dist_amdgpu_targets") if isinstance(data, dict) else None
    if not isinstance(value, str):
        return None
    names = tuple(t.strip().split(":")[0] for t in value.split(";") if t.strip())
    return names if names and all(_GFX.fullmatch(n) for n in names) else None


def installed(site: Path, distribution: str) -> str | None:
    """The version of ``distribution`` installed in the site-packages directory ``site`` (its ``.dist-info``
    directory, named ``<name with _>-<version>.dist-info``), None when it is not installed."""
    stem = distribution.replace("-", "_")
    for info in sorted(site.glob(f"{stem}-*.dist-info")):
        version = info.name[len(stem) + 1:-len(".dist-info")]
        if version and "-" not in version:
            return version
    return None


def missing_packages(prefix: Path, targets: tuple[str, ...] = ()) -> list[str]:
    """TheRock's packages a build (and a run on ``targets``) needs that are not installed beside the devel tree
    ``prefix``: rocm-sdk-core, rocm-sdk-libraries, rocm-sdk-devel, rocm-sdk-device-<gfx>. Empty off that layout."""
    if not is_python_tree(prefix):
        return []
    site = prefix.parent
    wanted = [CORE, LIBRARIES, DEVEL_PACKAGE, *(f"rocm-sdk-device-{gfx}" for gfx in targets)]
    return [name for name in wanted if installed(site, name) is None]


def package_fix(missing: list[str]) -> str:
    """The pip command that installs ``missing`` through the ``rocm`` package's extras (``rocm[libraries,devel,
    device-gfx942]``, build_tools/packaging/python/templates/rocm/setup.py and _dist_info.build_per_target_extras),
    then ``rocm-sdk init``, which unpacks the devel tree and links the device files into it."""
    extras = []
    for name in missing:
        if name == LIBRARIES:
            extras.append("libraries")
        elif name == DEVEL_PACKAGE:
            extras.append("devel")
        elif name.startswith("rocm-sdk-device-"):
            extras.append(name.removeprefix("rocm-sdk-"))
    spec = f"rocm[{','.join(extras)}]" if extras else "rocm"
    return f"pip install '{spec}' (TheRock's index for this ROCm release), then rocm-sdk init"
