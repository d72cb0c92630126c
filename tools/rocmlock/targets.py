"""The GPU target table: gfx name -> ISA, products, first ROCm, flash-attn backends, peak, memory."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from rocmlock.errors import InputError
from rocmlock.tomlcompat import tomllib


@dataclass(frozen=True)
class GpuTarget:
    """One LLVM AMDGPU target (``gfx942``) and what the stack knows about it."""

    gfx: str
    isa: str
    family: str
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

    @property
    def is_rdna(self) -> bool:
        return self.family.startswith("rdna")

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
    """Every known target, keyed by gfx name, in table order."""
    raw = tomllib.loads(resources.files("rocmlock").joinpath("data/gpu_targets.toml").read_text())
    return {
        gfx: GpuTarget(
            gfx=gfx,
            isa=row["isa"],
            family=row["family"],
            products=tuple(row["products"]),
            first_rocm=row["first_rocm"],
            flash_attn_ck=row["flash_attn_ck"],
            flash_attn_triton=row["flash_attn_triton"],
            aotriton=row["aotriton"],
            bf16=row["bf16"],
            peak_bf16_tflops=float(row["peak_bf16_tflops"]),
            memory_gib=int(row["memory_gib"]),
            bnb_first_rocm=str(row.get("bnb_first_rocm", "")),
            wavefront_size=int(row.get("wavefront_size", 64)),
        )
        for gfx, row in raw.items()
    }


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
