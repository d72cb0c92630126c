"""TheRock's ROCm layouts built as TheRock's own sources describe them (github.com/ROCm/TheRock), for tests.

Why built and not installed: PyPI's ``rocm``, ``rocm-sdk-core`` and ``rocm-sdk-devel`` are 0.1.0 placeholders
("Placeholder for ROCm python package", 606 bytes, 2025-05); the real wheels are on AMD's index, which this machine
cannot reach. So the trees are made here file by file, each path from the source named beside it, and the
``rocm-sdk`` console script is a minimal stand-in (:func:`rocm_sdk_stub`), the only part not TheRock's layout.

The install tree (a tarball's root, or the devel tree of the Python packages):
- ``.info/version``: rocm-core's ``lib`` component (base/artifact.toml ``.info/**``).
- ``include/hip/hip_runtime.h``: core-hip's ``dev`` component, which also reaches rocm-sdk-core
  (build_tools/build_python_packages.py ``core_artifact_filter``, "hiprtc needs to be able to find HIP headers").
- ``include/rocm-core/rocm_version.h``, ``include/<library>/...``: the ``dev`` components, devel only.
- ``lib/llvm/bin/clang`` and ``lib/llvm/bin/rocm.cfg`` (``--rocm-path='<CFGDIR>/../../..'``),
  ``lib/llvm/amdgcn/bitcode`` (compiler/artifact-amd-llvm.toml), and the links ``amdgcn -> lib/llvm/amdgcn`` and
  ``llvm -> lib/llvm`` (base/aux-overlay/CMakeLists.txt).
- ``share/therock/dist_info.json`` (``{"dist_amdgpu_targets": "gfx942;gfx950"}``, CMake's GPU_TARGETS list) and
  ``share/therock/therock_manifest.json`` (base/aux-overlay/CMakeLists.txt).
- ``.kpack/<component>_<gfx>.kpack`` in multi-arch tarballs (RELEASES.md "Installing multi-arch tarballs":
  ``blas_lib_gfx1100.kpack``).

The Python packages in one site-packages (build_tools/packaging/python/templates, rocm_sdk/_dist_info.py,
_therock_utils/py_packaging.py): each distribution ``X`` has its pure package ``rocm_sdk_X`` and its platform
directory ``_rocm_sdk_X`` (``_`` + the name + an empty version-suffix nonce); ``rocm-sdk-device-<gfx>`` overlays its
``.kpack`` files and ``.devel_links/<gfx>.json`` into ``_rocm_sdk_libraries``; ``rocm-sdk-devel`` ships
``rocm_sdk_devel/_devel.tar`` and ``rocm-sdk path --root`` unpacks it into ``_rocm_sdk_devel`` (rocm_sdk/_devel.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rocmlock.host.rocm import component_table
from test_probe import write as _write

# Every header of rocm_components.toml: a full TheRock devel tree or SDK tarball holds them all.
COMPONENT_HEADERS = tuple(sorted({c.header for cs in component_table().values() for c in cs}))


def install_tree(root: Path, version: str = "7.14.0", targets: tuple[str, ...] = ("gfx942", "gfx950"),
                 headers: tuple[str, ...] = COMPONENT_HEADERS, kpack: bool = True) -> Path:
    """The tree a TheRock tarball extracts to (and the devel tree's contents)."""
    major, minor, patch = (version.split(".") + ["0", "0"])[:3]
    _write(root / ".info/version", f"{version}\n")
    _write(root / "include/hip/hip_runtime.h", "#pragma once\n")
    _write(root / "include/rocm-core/rocm_version.h",
           f"#define ROCM_VERSION_MAJOR {major}\n#define ROCM_VERSION_MINOR {minor}\n#define ROCM_VERSION_PATCH {patch}\n")
    for header in headers:
        _write(root / "include" / header, "#pragma once\n")
    _write(root / "lib/llvm/bin/clang", "#!/bin/sh\nexit 1\n", 0o755)
    _write(root / "lib/llvm/bin/rocm.cfg", "-Wl,--enable-new-dtags\n--rocm-path='<CFGDIR>/../../..'\n-frtlib-add-rpath")
    _write(root / "lib/llvm/amdgcn/bitcode/ocml.bc", "BC")
    (root / "amdgcn").symlink_to("lib/llvm/amdgcn")
    (root / "llvm").symlink_to("lib/llvm")
    _write(root / "share/therock/dist_info.json", json.dumps({"dist_amdgpu_targets": ";".join(targets)}))
    _write(root / "share/therock/therock_manifest.json", "{}")
    for gfx in targets if kpack else ():
        _write(root / f".kpack/blas_lib_{gfx}.kpack", "KPAK")
    return root


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    _write(info / "RECORD", "")


def site_packages(site: Path, version: str = "7.14.0", targets: tuple[str, ...] = ("gfx942", "gfx950"),
                  devices: tuple[str, ...] = ("gfx942",), devel: bool = True, libraries: bool = True,
                  headers: tuple[str, ...] = COMPONENT_HEADERS) -> Path:
    """A site-packages with TheRock's packages installed (``pip install 'rocm[libraries,devel,device-gfx942]'``),
    the devel tree already unpacked; returns the devel tree (``rocm-sdk path --root``) or the site without devel."""
    _dist_info(site, "rocm", version)
    _write(site / "rocm_sdk/__init__.py")
    _dist_info(site, "rocm-sdk-core", version)
    _write(site / "rocm_sdk_core/__init__.py")
    core = site / "_rocm_sdk_core"
    _write(core / "__init__.py")
    _write(core / ".info/version", f"{version}\n")
    _write(core / "include/hip/hip_runtime.h", "#pragma once\n")
    _write(core / "share/therock/dist_info.json", json.dumps({"dist_amdgpu_targets": ";".join(targets)}))
    if libraries:
        _dist_info(site, "rocm-sdk-libraries", version)
        _write(site / "rocm_sdk_libraries/__init__.py")
        _write(site / "_rocm_sdk_libraries/__init__.py")
        _write(site / "_rocm_sdk_libraries/lib/libhipblas.so.3", "ELF")
    for gfx in devices:
        _dist_info(site, f"rocm-sdk-device-{gfx}", version)
        _write(site / f"_rocm_sdk_libraries/.kpack/blas_lib_{gfx}.kpack", "KPAK")
        _write(site / f"_rocm_sdk_libraries/.devel_links/{gfx}.json",
               json.dumps({"version": version, "links": [{"relpath": f".kpack/blas_lib_{gfx}.kpack",
                                                          "target": f"../../_rocm_sdk_libraries/.kpack/blas_lib_{gfx}.kpack"}]}))
    if not devel:
        return site
    _dist_info(site, "rocm-sdk-devel", version)
    _write(site / "rocm_sdk_devel/__init__.py")
    tree = install_tree(site / "_rocm_sdk_devel", version, targets, headers, kpack=False)
    _write(tree / "__init__.py")
    return tree


def rocm_sdk_stub(bindir: Path, site: Path, version: str = "7.14.0") -> Path:
    """A stand-in for the ``rocm-sdk`` console script (``rocm_sdk.__main__:main``), answering ``path --root`` and
    ``version`` as TheRock's does: the devel tree when ``rocm_sdk_devel`` is installed, else its error and exit 1."""
    script = f"""#!/bin/sh
# Test stand-in for TheRock's rocm-sdk (rocm_sdk/__main__.py _do_path / _do_version).
site='{site}'
case "$1 $2" in
    "path --root")
        if [ -f "$site/rocm_sdk_devel/__init__.py" ]; then
            echo "$site/_rocm_sdk_devel"
        else
            echo 'ERROR: Could not load the `rocm[devel]` package, which is required to access runtime tools and development files. Please install it with your package manager (pip, uv, etc)' >&2
            exit 1
        fi ;;
    "version "*) echo '{version}' ;;
    *) echo "usage: rocm-sdk {{command}} ..." >&2; exit 2 ;;
esac
"""
    return _write(bindir / "rocm-sdk", script, 0o755)


def path_with(bindir: Path) -> str:
    """PATH with ``bindir`` first and the system's tools after (sh, tail, awk, sed for the shell scripts)."""
    return os.pathsep.join([str(bindir), "/usr/bin", "/bin"])
