"""AOTriton's table (``tools/rocmlock/data/aotriton.toml``), validated before a recipe renders from it.

The pytorch recipe builds its AOTriton sources (the runtime's and the target's kernel image's URL and sha256) from
variant keys that ``rocmlock variants --write`` generates from it (:mod:`rocmlock.build.variantkeys`). Malformed data there surfaces as a render error
that names the recipe, not the file or the key (``Invalid SHA256 checksum``, ``undefined value``), or not at all:
a target that gpu_targets.toml gives AOTriton kernels but that has no ``[targets]`` entry rendered with no pinned
AOTriton, and build.sh then said the ROCm had no prebuilt runtime. ``rocmlock plan`` (and every command built on
it) reads the table beside the recipes first (``variantkeys.derived``), so bad data is one line naming
``aotriton.toml`` and the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type
from rocmlock.gpu.targets import GpuTarget, all_targets
from rocmlock.util.tables import check_keys, expect_match, read_toml
from rocmlock.util.tables import key as _key

NAME = "aotriton.toml"
SHA256 = re.compile(r"[0-9a-f]{64}")
SERIES = re.compile(r"\d+\.\d+")
# aotriton.cmake takes `string(SUBSTRING ${image} 7 -1 ...)` of each image name: they start with "amd-gfx".
_IMAGE = re.compile(r"amd-gfx[0-9a-z]+")
_GFX = re.compile(r"gfx[0-9a-z]+")
# Each string goes into a URL or a file name of the release assets.
_STRINGS = {
    "version": (re.compile(r"[0-9][0-9A-Za-z.+_-]*"), "the AOTriton release (__AOTRITON_VER), e.g. 0.11.2b"),
    "base_url": (re.compile(r"https://\S+[^/\s]"), "an https URL without a trailing slash (__AOTRITON_BASE_URL)"),
    "manylinux": (re.compile(r"manylinux_\d+_\d+"), "the runtime's manylinux tag, e.g. manylinux_2_28"),
    "arch": (re.compile(r"[a-z0-9_]+"), "the runtime's CPU architecture, e.g. x86_64"),
}
_TABLES = ("runtime", "images", "targets", "pytorch_releases")
KEYS = ("pytorch", *_STRINGS, *_TABLES)


@dataclass(frozen=True)
class AotritonTable:
    """One AOTriton release: the PyTorch series it was checked for, where its assets are, and their sha256s."""

    path: Path
    pytorch: tuple[str, ...]
    version: str
    base_url: str
    manylinux: str
    arch: str
    runtime: tuple[tuple[str, str], ...]  # ROCm major.minor -> sha256 of the runtime tarball
    images: tuple[tuple[str, str], ...]  # kernel image (amd-gfx942) -> sha256, in aotriton.cmake's (matching) order
    targets: tuple[tuple[str, str], ...]  # gfx -> kernel image, for the targets gpu_targets.toml gives kernels
    # PyTorch series -> the AOTriton release its aotriton.cmake names (for the tiers the presets expect)
    pytorch_releases: tuple[tuple[str, str], ...] = ()

    def image_for(self, gfx: str) -> str | None:
        """The kernel image ``gfx`` takes, or None (a target without AOTriton kernels pins none)."""
        return dict(self.targets).get(gfx)


def _string(data: dict[str, Any], path: Path, key: str) -> str:
    pattern, what = _STRINGS[key]
    return expect_match(data[key], pattern, path, key, what)


def _series(data: dict[str, Any], path: Path) -> tuple[str, ...]:
    what = 'a non-empty list of the PyTorch series (major.minor) it was checked for, e.g. ["2.12"]'
    items = expect_type(data["pytorch"], list, path, "pytorch", what)
    if not items:
        raise InputError(f"{path}: key 'pytorch' must be {what}, got an empty list",
                         hint="list the PyTorch series it serves, e.g. [\"2.12\"]")
    for i, item in enumerate(items):
        if not SERIES.fullmatch(expect_type(item, str, path, f"pytorch[{i}]", "a major.minor string, e.g. 2.12")):
            raise InputError(f"{path}: key 'pytorch[{i}]' must be a major.minor string, e.g. 2.12, got {item!r}",
                             hint='write the series as a string, e.g. "2.12"')
    return tuple(items)


def _table(data: dict[str, Any], path: Path, name: str, keys: tuple[re.Pattern[str], str, str],
           value_what: str) -> dict[str, str]:
    """``[name]`` as a table of strings (``value_what``), its keys matching ``keys`` (pattern, what, example)."""
    table = expect_type(data[name], dict, path, name, f"a table of {value_what}s")
    pattern, what, example = keys
    for key, value in table.items():
        if not pattern.fullmatch(key):
            raise InputError(f"{path}: key '{_key(name, key)}' is not {what}", hint=f"e.g. {example}")
        expect_type(value, str, path, _key(name, key), value_what)
    return table


def _sha256s(table: dict[str, str], path: Path, name: str) -> None:
    for key, value in table.items():
        if not SHA256.fullmatch(value):
            raise InputError(f"{path}: key '{_key(name, key)}' must be a sha256 (64 lowercase hex digits), got "
                             f"{value!r}", hint="copy it from PyTorch's cmake/External/aotriton.cmake")


def _check_targets(targets: dict[str, str], images: dict[str, str], path: Path,
                   kernels: Mapping[str, bool]) -> None:
    """[targets] against gpu_targets.toml's ``aotriton`` column and against [images]."""
    for gfx, image in targets.items():
        if gfx not in kernels:
            raise InputError(f"{path}: key '{_key('targets', gfx)}': {gfx} is not in gpu_targets.toml",
                             hint=f"known targets: {', '.join(kernels)}")
        if not kernels[gfx]:
            raise InputError(f"{path}: key '{_key('targets', gfx)}': gpu_targets.toml gives {gfx} no AOTriton kernels "
                             "(aotriton = false), so the recipe would never pin this image",
                             hint=f"remove the entry, or set aotriton = true for {gfx} in gpu_targets.toml")
        if image not in images:
            raise InputError(f"{path}: key '{_key('targets', gfx)}' names image '{image}', which [images] lacks",
                             hint=f"one of: {', '.join(images)}")
    for gfx, has in kernels.items():
        if has and gfx not in targets:
            raise InputError(
                f"{path}: key '{_key('targets', gfx)}' is missing: gpu_targets.toml gives {gfx} AOTriton kernels "
                "(aotriton = true), so the pytorch recipe needs its kernel image",
                hint="add the image PyTorch's cmake/External/aotriton.cmake picks for it (its image rule, in "
                     f"[images] order), or set aotriton = false for {gfx} in gpu_targets.toml")


def read_table(path: Path, kernels: Mapping[str, bool] | None = None) -> AotritonTable:
    """The AOTriton table at ``path``, validated: an InputError naming the file and the key otherwise.

    ``kernels``: gfx -> whether it has AOTriton kernels (gpu_targets.toml's ``aotriton``); [targets] must list
    exactly those with kernels.
    """
    data = read_toml(path)
    check_keys(data, path, (), KEYS, KEYS, NAME,
               lambda _: "restore it from git, or take it from PyTorch's cmake/External/aotriton.cmake")
    pytorch = _series(data, path)
    strings = {key: _string(data, path, key) for key in _STRINGS}
    runtime = _table(data, path, "runtime", (SERIES, "a ROCm major.minor version",
                                               '"7.2" = "<sha256>" (quoted: a bare 7.2 is a nested key)'),
                     "a sha256 string")
    images = _table(data, path, "images", (_IMAGE, "a kernel image name", 'amd-gfx942 = "<sha256>"'),
                    "a sha256 string")
    targets = _table(data, path, "targets", (_GFX, "a gfx target name", 'gfx942 = "amd-gfx942"'),
                     "a kernel image name")
    _sha256s(runtime, path, "runtime")
    _sha256s(images, path, "images")
    releases = _table(data, path, "pytorch_releases", (SERIES, "a PyTorch series (major.minor)",
                                                         '"2.13" = "0.12b" (quoted: a bare 2.13 is a nested key)'),
                      "an AOTriton release string")
    for series, release in releases.items():
        expect_match(release, _STRINGS["version"][0], path, _key("pytorch_releases", series),
                     "an AOTriton release, e.g. 0.12b")
    for series in pytorch:
        if releases.get(series) != strings["version"]:
            raise InputError(f"{path}: key '{_key('pytorch_releases', series)}' must be \"{strings['version']}\": "
                             f"series {series} is listed in 'pytorch' for this release",
                             hint=f'write "{series}" = "{strings["version"]}" under [pytorch_releases]')
    kernels = kernels if kernels is not None else {gfx: t.aotriton for gfx, t in all_targets().items()}
    _check_targets(targets, images, path, kernels)
    return AotritonTable(
        path=path, pytorch=pytorch, version=strings["version"], base_url=strings["base_url"],
        manylinux=strings["manylinux"], arch=strings["arch"], runtime=tuple(runtime.items()),
        images=tuple(images.items()), targets=tuple(targets.items()), pytorch_releases=tuple(releases.items()))


def check_tiers(release: str, gpus: Mapping[str, GpuTarget], gpu_path: Path, pinned: bool = True) -> None:
    """Every target of ``gpus`` records how AOTriton ``release`` classes it: the presets and the probe's expectations
    read that tier. For the ``pinned`` release (whose kernel images the recipe pins), "none" exactly where the target
    has no kernels (``aotriton = false``); another release of [pytorch_releases] only needs its tier recorded."""
    for gfx, target in gpus.items():
        tier = target.aotriton_tier(release)
        where = _key(gfx, "aotriton_tier", release)
        if tier is None:
            why = f"the release {NAME} pins" if pinned else f"the release of a PyTorch series in {NAME} [pytorch_releases]"
            raise InputError(f"{gpu_path}: key '{_key(gfx, 'aotriton_tier')}' has no entry for AOTriton {release}, "
                             f"{why}",
                             hint=f'add "{release}" = "supported" (or "experimental", "none") from AOTriton '
                                  f"{release}'s v3src/util.cc isArchExperimentallySupported()")
        if pinned and (tier == "none") == target.aotriton:
            raise InputError(f"{gpu_path}: key '{where}' is \"{tier}\" but {gfx} has aotriton = "
                             f"{str(target.aotriton).lower()}",
                             hint='"none" exactly where the release ships no kernels for the target (aotriton = false)')
