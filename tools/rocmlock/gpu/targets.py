"""The GPU target table (``data/gpu_targets.toml``): gfx name -> ISA, products, first ROCm, flash-attn backends,
peak, memory.

Read once and validated (:func:`read_targets`): a row a team adds with a typo'd key, a wrong type or an isa that is
not its gfx name's is one line naming the file and the key. ``rocmlock plan`` also validates the copy beside the recipes,
which recipes/variants.yaml's GPU keys are generated from, before anything renders from it.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from rocmlock.errors import InputError, expect_type
from rocmlock.gpu import amd
from rocmlock.util.tables import check_keys, expect_choice, expect_match, key, read_toml

NAME = "gpu_targets.toml"
# LLVM's AMDGPU processor names: gfx<major><minor><stepping>, minor and stepping one hex digit each (gfx90a is
# 9.0.10); __amdgpu_arch (conda/ceps#189) writes the same three numbers in decimal.
_GFX = re.compile(r"gfx([0-9]+)([0-9a-f])([0-9a-f])")
ROCM_SERIES = re.compile(r"[0-9]+\.[0-9]+")
_STRINGS: dict[str, tuple[re.Pattern[str], str]] = {
    "isa": (re.compile(r"[0-9]+\.[0-9]+\.[0-9]+"), "the __amdgpu_arch version, major.minor.stepping in decimal"),
    "architecture": (re.compile(r"[a-z]+[0-9]+(\.[0-9]+)?"), "AMD's architecture name, e.g. cdna3 or rdna3.5"),
    # AMD's target hierarchy (rocm-bootstrap's family and sub-family bundle keys, TheRock's package names).
    "family": (re.compile(r"gfx[0-9]+"), "the target's family in AMD's hierarchy (rocm-bootstrap), e.g. gfx9 or gfx11"),
    "sub_family": (re.compile(r"gfx[0-9]+(x|_[0-9]+)"),
                   "the target's sub-family in AMD's hierarchy (rocm-bootstrap), e.g. gfx9_4 or gfx115x"),
    "generic": (re.compile(r"(gfx[0-9]+(-[0-9]+)?-generic)?"),
                'the LLVM generic target that covers it, e.g. gfx11-generic, or "" for none'),
    "first_rocm": (ROCM_SERIES, "the first ROCm (major.minor) that supports the target, e.g. 6.0"),
    "bnb_first_rocm": (re.compile(r"([0-9]+\.[0-9]+)?"),
                       'the first ROCm (major.minor) of bitsandbytes\' ROCm build for it, or "" for none'),
}
_FLAGS = ("flash_attn_ck", "flash_attn_triton", "aotriton", "bf16")
# rocm-bootstrap's XnackMode values.
XNACK_MODES = ("supported", "unsupported", "default_on")
KEYS = ("isa", "architecture", "family", "sub_family", "generic", "xnack", "products", "first_rocm", "flash_attn_ck",
        "flash_attn_triton", "aotriton", "aotriton_tier",
        "bf16", "peak_bf16_tflops", "memory_gib", "bnb_first_rocm", "wavefront_size")
AotritonTier = Literal["supported", "experimental", "none"]
AOTRITON_TIERS: tuple[AotritonTier, ...] = ("supported", "experimental", "none")
# PyTorch reads it once, at its first SDPA call, and then uses an experimental target's AOTriton kernels.
AOTRITON_EXPERIMENTAL_VAR = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
# (AOTriton release, target) -> a known defect of that release on that target that users feel, with its upstream
# issue. ROCm/TheRock#7696 ("Verified Issue", 2026-08-27, first identified in ROCm 10.0.0): on MI350X (gfx950)
# AOTriton 0.13b selects a slower flash-attention backward kernel than 0.11.2b's 3-kernel split; HuggingFace training
# (BART, GPT-2, DiT, BERT, Llama 2 70B, RoBERTa-large) loses 9-25 % throughput; upstream's workaround is a PyTorch
# rebuilt on AOTriton 0.11.2b. The probe keeps a copy (tools/verify_env.py; tests/test_probe.py keeps them equal).
AOTRITON_KNOWN_ISSUES: dict[tuple[str, str], str] = {
    ("0.13b", "gfx950"): ("its flash-attention backward on gfx950 is a slower kernel than 0.11.2b's 3-kernel "
                          "split: 9-25 % lower training throughput (ROCm/TheRock#7696)"),
}
_RELEASE = re.compile(r"[0-9][0-9A-Za-z.+_-]*")
# What to write for a key a row lacks (the comment at the top of gpu_targets.toml says what each means).
_EXAMPLES = {"architecture": '"cdna3"', "family": '"gfx9" (rocm-bootstrap\'s family)',
             "sub_family": '"gfx9_4" (rocm-bootstrap\'s sub-family)',
             "generic": '"gfx9-4-generic" ("" for none)', "xnack": '"supported" (or "unsupported", "default_on")', "products": '["MI300X"]', "first_rocm": '"6.0"',
             "peak_bf16_tflops": "1307.0 (0 = unknown)", "memory_gib": "192",
             "bnb_first_rocm": '"6.3" ("" = not supported)', "wavefront_size": "64 (CDNA) or 32 (RDNA)",
             "aotriton_tier": '{ "0.11.2b" = "supported" } (per AOTriton release: supported, experimental or none)',
             **dict.fromkeys(_FLAGS, "true or false")}


@dataclass(frozen=True)
class GpuTarget:
    """One LLVM AMDGPU target (``gfx942``) and what the stack knows about it."""

    gfx: str
    isa: str
    architecture: str
    products: tuple[str, ...]
    first_rocm: str
    flash_attn_ck: bool
    flash_attn_triton: bool
    aotriton: bool
    bf16: bool
    peak_bf16_tflops: float
    memory_gib: int
    # First ROCm whose upstream bitsandbytes ROCm build includes the target ("" = none).
    bnb_first_rocm: str = ""
    wavefront_size: int = 64
    # (AOTriton release, tier) pairs in table order: how that release classes the target.
    aotriton_tiers: tuple[tuple[str, AotritonTier], ...] = ()
    # AMD's hierarchy (rocm-bootstrap): family (gfx11), sub-family (gfx115x), LLVM generic target ("" for none), xnack.
    family: str = ""
    sub_family: str = ""
    generic: str = ""
    xnack: str = "unsupported"

    def aotriton_tier(self, release: str) -> AotritonTier | None:
        """How AOTriton ``release`` classes this target; None when the table does not record that release."""
        return dict(self.aotriton_tiers).get(release)

    @property
    def is_rdna(self) -> bool:
        return self.architecture.startswith("rdna")

    def supports_rocm(self, rocm_version: str) -> bool:
        """True when ROCm ``rocm_version`` (``"7.2"``) can target this GPU."""
        return version_tuple(rocm_version) >= version_tuple(self.first_rocm)

    def supports_bitsandbytes(self, rocm_version: str) -> bool:
        """True when bitsandbytes' ROCm backend builds for this GPU with ROCm ``rocm_version``."""
        return bool(self.bnb_first_rocm) and version_tuple(rocm_version) >= version_tuple(self.bnb_first_rocm)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"6.3.1"`` -> ``(6, 3, 1)``; non-numeric parts end the tuple."""
    out: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def minor_version(spec: str) -> str:
    """The ``major.minor`` a version or spec starts with (``"7.2.*"``, ``">=7.2.1"`` -> ``"7.2"``); ``""`` if none."""
    return ".".join(str(p) for p in version_tuple(spec.lstrip("=<>~!"))[:2])


@cache
def all_targets() -> dict[str, GpuTarget]:
    """Every known target (rocmlock's own gpu_targets.toml, validated), keyed by gfx name, in table order."""
    return read_targets(Path(str(resources.files("rocmlock").joinpath(f"data/{NAME}"))))


@cache
def aotriton_release() -> str:
    """The AOTriton release rocmlock's PyTorch recipe pins (``version`` of data/aotriton.toml, validated by
    ``rocmlock.build.aotriton``; here only read)."""
    path = Path(str(resources.files("rocmlock").joinpath("data/aotriton.toml")))
    return expect_match(read_toml(path).get("version"), _RELEASE, path, "version", "the AOTriton release, e.g. 0.11.2b")


def _pytorch_releases() -> list[tuple[tuple[int, ...], str]]:
    """data/aotriton.toml's [pytorch_releases] rows, oldest series first (validated by ``rocmlock.build.aotriton``;
    here only read)."""
    path = Path(str(resources.files("rocmlock").joinpath("data/aotriton.toml")))
    table = read_toml(path).get("pytorch_releases")
    return sorted((version_tuple(s), str(r)) for s, r in table.items()) if isinstance(table, dict) else []


def aotriton_release_for(pytorch_series: str | None) -> str:
    """The AOTriton release a PyTorch series (``"2.13"``) builds with: its row of data/aotriton.toml's
    [pytorch_releases]; a series newer than every row takes the newest row, and none (or an older one) the pinned
    release."""
    want = version_tuple(pytorch_series or "")
    older = [release for series, release in _pytorch_releases() if want and series <= want]
    return older[-1] if older else aotriton_release()


def aotriton_known_issue(target: GpuTarget, pytorch_series: str | None) -> str | None:
    """The known AOTriton defect (:data:`AOTRITON_KNOWN_ISSUES`) that SDPA on ``target`` may meet with a PyTorch of
    ``pytorch_series``, said as a warning: certain where the series' recorded release has it, conditional where
    the series is newer than every recorded one (its AOTriton is then not known here); None otherwise."""
    rows = _pytorch_releases()
    want = version_tuple(pytorch_series or "")
    release = aotriton_release_for(pytorch_series)
    exact = AOTRITON_KNOWN_ISSUES.get((release, target.gfx))
    if exact:
        return f"warning: AOTriton {release}, that of PyTorch {pytorch_series}: {exact}"
    if not want or not rows or want[:2] <= rows[-1][0][:2]:
        return None
    later = [(r, text) for (r, gfx), text in AOTRITON_KNOWN_ISSUES.items()
             if gfx == target.gfx and version_tuple(r.rstrip("b")) > version_tuple(release.rstrip("b"))]
    return "; ".join(f"warning: if PyTorch {pytorch_series} bundles AOTriton {r} (torch/lib/libaotriton_v2.so."
                     f"{r.rstrip('b')}.*; `rocmlock probe` reads it): {text}" for r, text in later) or None


def aotriton_tier_for(target: GpuTarget, release: str) -> AotritonTier:
    """How AOTriton ``release`` classes ``target``; an InputError naming the key when the table does not say."""
    tier = target.aotriton_tier(release)
    if tier is None:
        raise InputError(f"{NAME}: key '{key(target.gfx, 'aotriton_tier')}' has no entry for AOTriton {release}",
                         hint=f'add "{release}" = "supported" (or "experimental", "none") from AOTriton '
                              f"{release}'s v3src/util.cc isArchExperimentallySupported()")
    return tier


def pinned_aotriton_tier(target: GpuTarget) -> AotritonTier:
    """How the pinned AOTriton release classes ``target``; an InputError naming the key when not recorded."""
    release = aotriton_release()
    tier = target.aotriton_tier(release)
    if tier is None:
        raise InputError(f"{NAME}: key '{key(target.gfx, 'aotriton_tier')}' has no entry for AOTriton {release}, "
                         "the release aotriton.toml pins",
                         hint=f'add "{release}" = "supported" (or "experimental", "none") from AOTriton {release}\'s '
                              "v3src/util.cc isArchExperimentallySupported()")
    return tier


def isa_of(gfx: str) -> str | None:
    """The __amdgpu_arch version a gfx name stands for (``gfx90a`` -> ``9.0.10``); None for no gfx name."""
    match = _GFX.fullmatch(gfx)
    if match is None:
        return None
    major, minor, stepping = match.groups()
    return f"{int(major)}.{int(minor, 16)}.{int(stepping, 16)}"


def read_targets(path: Path) -> dict[str, GpuTarget]:
    """The GPU target table at ``path``, validated: an InputError naming the file and the key otherwise.

    Every row has every key: each becomes a variant key of recipes/variants.yaml, which has no defaults.
    """
    data = read_toml(path)
    if not data:
        raise InputError(f"{path}: no GPU targets", hint="add a [gfxNNN] table per target, with the keys the comment "
                                                       "at the top of the file lists")
    return {gfx: _target(path, gfx, row) for gfx, row in data.items()}


def _target(path: Path, gfx: str, row: Any) -> GpuTarget:
    isa = isa_of(gfx)
    if isa is None:
        raise InputError(f"{path}: key '{key(gfx)}' is not a GPU target name: gfx, then the major version and one hex "
                         "digit each for minor and stepping (gfx942, gfx90a, gfx1100)",
                         hint="name the table after the LLVM target, in lower case: [gfx942]")
    row = expect_type(row, dict, path, key(gfx), f"a table of the target's facts ([{gfx}], then its keys)")
    examples = {"isa": f'"{isa}"', **_EXAMPLES}
    check_keys(row, path, (gfx,), KEYS, KEYS, "a GPU target row",
               lambda name: f"add {name} = {examples[name]} under [{gfx}] (the comment at the top of the file says "
                            "what it means)")
    text = {name: expect_match(row[name], pattern, path, key(gfx, name), what)
            for name, (pattern, what) in _STRINGS.items()}
    if text["isa"] != isa:
        raise InputError(f"{path}: key '{key(gfx, 'isa')}' must be \"{isa}\" for {gfx} (major.minor.stepping in "
                         f"decimal), got {text['isa']!r}",
                         hint=f"write isa = \"{isa}\", or rename the table if {text['isa']} is the target's ISA")
    xnack = expect_choice(row["xnack"], XNACK_MODES, path, key(gfx, "xnack"))
    # The facts AMD's own table states too must be its (rocm-bootstrap: ISA, hierarchy, generic target, xnack).
    amd.check_row(path, gfx, {**text, "xnack": xnack})
    flags = {name: expect_type(row[name], bool, path, key(gfx, name), "true or false") for name in _FLAGS}
    return GpuTarget(
        gfx=gfx, isa=isa, architecture=text["architecture"], family=text["family"], sub_family=text["sub_family"],
        generic=text["generic"], xnack=xnack,
        products=_products(path, gfx, row["products"]),
        first_rocm=text["first_rocm"], peak_bf16_tflops=_peak(path, gfx, row["peak_bf16_tflops"]),
        memory_gib=_memory(path, gfx, row["memory_gib"]), bnb_first_rocm=text["bnb_first_rocm"],
        wavefront_size=_wavefront(path, gfx, row["wavefront_size"]),
        aotriton_tiers=_tiers(path, gfx, row["aotriton_tier"]), **flags)


def _tiers(path: Path, gfx: str, value: Any) -> tuple[tuple[str, AotritonTier], ...]:
    name = key(gfx, "aotriton_tier")
    what = 'a table of AOTriton release -> "supported", "experimental" or "none", e.g. { "0.11.2b" = "supported" }'
    table: dict[str, Any] = expect_type(value, dict, path, name, what)
    if not table:
        raise InputError(f"{path}: key '{name}' must be {what}, got an empty table",
                         hint="fill it, or remove the key")
    out: list[tuple[str, AotritonTier]] = []
    for release, tier in table.items():
        where = key(gfx, "aotriton_tier", release)
        expect_match(release, _RELEASE, path, where, "an AOTriton release, e.g. 0.11.2b")
        out.append((release, expect_choice(tier, AOTRITON_TIERS, path, where)))
    return tuple(out)


def _products(path: Path, gfx: str, value: Any) -> tuple[str, ...]:
    what = 'a non-empty list of the product names with this target, e.g. ["MI300X"]'
    items = expect_type(value, list, path, key(gfx, "products"), what)
    if not items:
        raise InputError(f"{path}: key '{key(gfx, 'products')}' must be {what}, got an empty list",
                         hint="list at least one product, e.g. [\"MI300X\"]")
    for i, item in enumerate(items):
        name = key(gfx, "products", i)
        if not expect_type(item, str, path, name, "a product name").strip():
            raise InputError(f"{path}: key '{name}' must be a product name, got {item!r}",
                             hint="write the product as a non-empty string, e.g. \"MI300X\"")
        if item in items[:i]:
            raise InputError(f"{path}: key '{name}': {item!r} is listed twice", hint="remove the duplicate")
    return tuple(items)


def _peak(path: Path, gfx: str, value: Any) -> float:
    what = "the dense bf16 peak in TFLOP/s (a number, 0 = unknown)"
    peak = float(expect_type(value, (int, float), path, key(gfx, "peak_bf16_tflops"), what))
    if not math.isfinite(peak) or peak < 0:
        raise InputError(f"{path}: key '{key(gfx, 'peak_bf16_tflops')}' must be {what}, got {value!r}",
                         hint="write the datasheet's dense BF16 TFLOPS, a number above 0")
    return peak


def _memory(path: Path, gfx: str, value: Any) -> int:
    what = "the device memory in GiB (a whole number above 0)"
    gib: int = expect_type(value, int, path, key(gfx, "memory_gib"), what)
    if gib <= 0:
        raise InputError(f"{path}: key '{key(gfx, 'memory_gib')}' must be {what}, got {gib}",
                         hint="write the memory of one GPU in GiB, a number above 0")
    return gib


def _wavefront(path: Path, gfx: str, value: Any) -> int:
    what = "the wavefront size, 64 (CDNA) or 32 (RDNA)"
    size: int = expect_type(value, int, path, key(gfx, "wavefront_size"), what)
    if size not in (32, 64):
        raise InputError(f"{path}: key '{key(gfx, 'wavefront_size')}' must be {what}, got {size}",
                         hint="write 32 or 64")
    return size


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.0)
    return close[0] if close else choices[0]


def get_target(gfx: str, where: str = "") -> GpuTarget:
    """Look up ``gfx`` (``gfx942`` or ``gfx942:sramecc+:xnack-``); unknown names suggest the nearest one."""
    targets = all_targets()
    key = gfx.split(":", 1)[0].strip().lower()
    if key in targets:
        return targets[key]
    suggestion = _suggest(key, list(targets))
    prefix = f"{where}: " if where else ""
    raise InputError(
        f"{prefix}unknown GPU target '{gfx}'; did you mean '{suggestion}'?",
        hint=f"known targets: {', '.join(targets)}",
    )


def target_for_isa(isa: str, where: str = "") -> GpuTarget:
    """Look up a target by its ``__amdgpu_arch`` ISA version (``9.4.2``)."""
    for target in all_targets().values():
        if target.isa == isa:
            return target
    isas = {t.isa: t.gfx for t in all_targets().values()}
    suggestion = _suggest(isa, list(isas))
    prefix = f"{where}: " if where else ""
    raise InputError(
        f"{prefix}unknown __amdgpu_arch '{isa}'; did you mean '{suggestion}' ({isas[suggestion]})?",
        hint="__amdgpu_arch is the ISA version (gfx942 -> 9.4.2, gfx90a -> 9.0.10)",
    )
