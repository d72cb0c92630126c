"""flash-attn's own Triton AMD kernels, compiled ahead of time for a GPU target with no GPU (tests/test_triton_aot.py).

Two uses:
- ``python tests/flash_attn_aot.py fetch`` (.ci/run): put the flash-attn sdist recipes/variants.yaml pins into the
  test cache (``pip download``; its sha256 is checked against variants.yaml's flash_attn_sha256 before use).
- ``python tests/flash_attn_aot.py compile SRC GFX:WAVE ...``: import flash-attn's Triton backend from the unpacked
  sdist ``SRC`` and compile its training kernels (forward, and the default "split" backward's dK/dV and dQ kernels,
  causal, bf16, head dim 128) for each target, printing one JSON object per target. It runs in a process of its
  own: importing flash_attn (with FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE) must not leak into the test process.
- :class:`Compiles` runs those processes in the background, at the lowest CPU priority: about 40 s of CPU per
  target here, 12 targets, so tests/conftest.py starts them as soon as the session's tests are collected and the
  compiles use the CPU the rest of the suite leaves idle (it waits on servers, daemons and subprocesses); the
  test collects their results at the end.

The kernels' arguments follow the calls in flash-attn 2.8.3's fwd_prefill.py (attention_prefill_forward_triton_impl:
attn_fwd[grid](...) with the Triton config of get_autotune_configs() when autotune is off) and bwd_prefill_split.py
(attention_prefill_backward_triton_split_impl: NUM_WARPS, NUM_STAGES = 4, 1; WAVES_PER_EU = 1; BLOCK_M1, BLOCK_N1,
BLOCK_M2, BLOCK_N2 = 32, 128, 128, 32; BLK_SLICE_FACTOR = 2): no dropout, no ALiBi, no fp8, not varlen, so those
arguments are None (Triton specializes None arguments as constexpr None, as at run time).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from rocmlock.gpu.targets import GpuTarget

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ROCMLOCK_TEST_CACHE", str(Path.home() / ".cache/rocmlock-tests"))) / "flash-attn"
EM_AMDGPU = 224  # ELF e_machine of AMD GPU code objects (LLVM's ELF.h)
HEAD_DIM = 128


def pinned() -> tuple[str, str]:
    """(flash_attn_version, flash_attn_sha256) of recipes/variants.yaml."""
    data = yaml.safe_load((REPO / "recipes/variants.yaml").read_text())
    return str(data["flash_attn_version"][0]), str(data["flash_attn_sha256"][0])


def sdist_path() -> Path:
    """Where .ci/run's ``fetch`` puts the pinned sdist."""
    version, _ = pinned()
    return CACHE / f"flash_attn-{version}.tar.gz"


def sdist_to_test() -> Path:
    """The sdist the tests compile: ``ROCMLOCK_FLASH_ATTN_SDIST``, else :func:`sdist_path`."""
    return Path(os.environ.get("ROCMLOCK_FLASH_ATTN_SDIST", str(sdist_path())))


def triton_targets() -> list[GpuTarget]:
    """The GPU targets the table gives flash-attn's Triton backend."""
    from rocmlock.gpu.targets import all_targets

    return [t for t in all_targets().values() if t.flash_attn_triton]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch() -> Path:
    """Download the pinned sdist into the cache (once) and check its sha256; the path."""
    version, expected = pinned()
    path = sdist_path()
    if not path.is_file():
        # pip downloads the sdist and reads its metadata: setup.py imports torch (the CPU one, hence no build
        # isolation) and compiles nothing with FLASH_ATTENTION_SKIP_CUDA_BUILD.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"flash-attn=={version}", "--no-deps",
                        "--no-binary", ":all:", "--no-build-isolation", "-d", str(CACHE)],
                       check=True, env={**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"})
    if sha256(path) != expected:
        raise SystemExit(f"{path}: sha256 {sha256(path)} is not variants.yaml's flash_attn_sha256 {expected}")
    return path


def unpack(sdist: Path, dest: Path) -> Path:
    """The sdist's ``flash_attn`` package (Python files only) under ``dest``; the directory to put on sys.path."""
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.isfile() and re.fullmatch(r"[^/]+/flash_attn/[\w/]+\.py", m.name)]
        tar.extractall(dest, members=members, filter="data")
    (top,) = {m.name.split("/", 1)[0] for m in members}
    return dest / top


class Compiles:
    """:func:`compile_all` for ``targets`` (``gfx:wave``), split round-robin over ``jobs`` processes started now
    with ``nice 19`` (they take only CPU nothing else wants), each writing its JSON lines and stderr to files under
    ``workdir``, with a Triton cache there (empty: every kernel is really compiled)."""

    def __init__(self, sdist: Path, targets: list[str], workdir: Path, jobs: int, env: Mapping[str, str]) -> None:
        self.workdir = workdir
        self._runs: list[tuple[list[str], subprocess.Popen[bytes], int]] = []
        try:
            src = unpack(sdist, workdir / "src")
            run_env = {**env, "TRITON_CACHE_DIR": str(workdir / "triton-cache")}
            jobs = max(1, min(jobs, len(targets)))
            for i in range(jobs):
                with open(workdir / f"{i}.out", "wb") as out, open(workdir / f"{i}.err", "wb") as err:
                    proc = subprocess.Popen(["nice", "-n", "19", sys.executable, str(Path(__file__).resolve()),
                                             "compile", str(src), *targets[i::jobs]], stdout=out, stderr=err,
                                            env={**run_env, PARENT: f"{os.getpid()} {workdir}"})
                self._runs.append((targets[i::jobs], proc, i))
        except BaseException:
            self.stop()  # nothing started is left running, nothing made is left behind
            raise

    def results(self, timeout: float) -> dict[str, tuple[int, dict[str, Any] | None, str]]:
        """gfx -> (its process's exit status, its JSON result or None, the last 3,000 characters of the
        process's stderr), once every process has ended (killed, status -9, past ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        out: dict[str, tuple[int, dict[str, Any] | None, str]] = {}
        for chunk, proc, i in self._runs:
            try:
                status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
            found = {r["gfx"]: r for r in map(json.loads, (self.workdir / f"{i}.out").read_text().splitlines())}
            err = (self.workdir / f"{i}.err").read_text(errors="replace")[-3000:]
            for spec in chunk:
                gfx = spec.split(":")[0]
                out[gfx] = (status, found.get(gfx), err)
        return out

    def stop(self) -> None:
        """Kill what still runs and remove ``workdir``."""
        for _, proc, _ in self._runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def describe(kernel: Any) -> dict[str, Any]:
    """What a compiled kernel is: its code object's ELF machine, the target the assembly names, the wavefront
    size it was compiled for, and the matrix-core instructions it uses."""
    hsaco: bytes = kernel.asm["hsaco"]
    amdgcn: str = kernel.asm["amdgcn"]
    targets = re.findall(r'\.amdgcn_target "amdgcn-amd-amdhsa--([^"]+)"', amdgcn)
    return {
        "elf": hsaco[:4] == b"\x7fELF",
        "machine": int.from_bytes(hsaco[18:20], "little"),
        "target": targets[0] if len(set(targets)) == 1 else targets,
        "wave32": ".amdhsa_wavefront_size32 1" in amdgcn,
        "matrix": sorted(set(re.findall(r"\b(v_wmma_\w+|v_mfma_\w+)", amdgcn))),
        "size": len(hsaco),
    }


def signature(fn: Any, pointers: Mapping[str, str], floats: set[str], nones: set[str],
              values: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """ASTSource's (signature, constexprs) for the JIT function ``fn``: pointers by name, floats, None arguments,
    constexpr values; every other argument is an i32 (strides, sizes). An argument none of them covers that is
    a constexpr is an error: flash-attn added one, and this file must say its value."""
    sig: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    for param in fn.params:
        name = param.name
        if param.is_constexpr:
            if name not in values:
                raise SystemExit(f"{fn.__name__}: constexpr {name} has no value here (flash-attn changed?)")
            sig[name], constexprs[name] = "constexpr", values[name]
        elif name in nones:
            sig[name], constexprs[name] = "constexpr", None
        else:
            sig[name] = pointers.get(name) or ("fp32" if name in floats else "i32")
    return sig, constexprs


_COMMON = {"IS_VARLEN": False, "ENABLE_DROPOUT": False, "USE_ALIBI": False, "USE_EXP2": False, "IS_FP8": False,
           "FP8_MAX": None, "FP8_OUTPUT": False}
_BWD_NONES = {"cu_seqlens_q", "cu_seqlens_k", "Dropout_mask", "philox_seed", "philox_offset_base", "Alibi_slopes",
              "Descale_q", "Descale_k", "Descale_v", "Descale_do", "stride_descale_q_z", "stride_descale_k_z",
              "stride_descale_v_z", "stride_descale_do_z"}


def kernels() -> list[tuple[str, Any, dict[str, str], dict[str, Any], dict[str, int]]]:
    """(name, jit function, signature, constexprs, options) of each kernel a causal bf16 training step runs."""
    fwd = importlib.import_module("flash_attn.flash_attn_triton_amd.fwd_prefill")
    bwd = importlib.import_module("flash_attn.flash_attn_triton_amd.bwd_prefill_split")
    (config,) = fwd.attn_fwd.configs  # autotune off: the one default config
    fwd_values = {**_COMMON, **config.kwargs, "SM_SCALE": HEAD_DIM ** -0.5, "HQ": 8, "HK": 8,
                  "ACTUAL_BLOCK_DMODEL": HEAD_DIM, "MAX_SEQLENS_Q": 2048, "MAX_SEQLENS_K": 2048, "IS_INFERENCE": False,
                  "IS_CAUSAL": True, "BLOCK_DMODEL": HEAD_DIM, "USE_BIAS": False, "RETURN_SCORES": False}
    fwd_nones = {"bias", "Cache_seqlens", "Cache_batch_idx", "Descale_Q", "Descale_K", "Descale_V", "Descale_O",
                 "stride_descale_q_z", "stride_descale_k_z", "stride_descale_v_z", "stride_descale_o_z",
                 "cu_seqlens_q", "cu_seqlens_k", "philox_seed", "philox_offset_base", "sd_mask", "dropout_mask",
                 "alibi_slopes"}
    bf16 = dict.fromkeys(("Q", "K", "V", "Out", "DO", "DQ", "DK", "DV"), "*bf16")
    fp32 = {"LSE": "*fp32", "M": "*fp32", "Delta": "*fp32"}
    out = []
    fn = fwd.attn_fwd.fn
    sig, cx = signature(fn, {**bf16, **fp32}, {"dropout_p"}, fwd_nones, fwd_values)
    out.append(("attn_fwd", fn, sig, cx, {"num_warps": config.num_warps, "num_stages": config.num_stages,
                                          "waves_per_eu": config.kwargs["waves_per_eu"]}))
    for name, block_m, block_n in (("_bwd_kernel_dkdv_causal", 32, 128), ("_bwd_kernel_dq_causal", 128, 32)):
        fn = getattr(bwd, name)
        values = {**_COMMON, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLK_SLICE_FACTOR": 2, "HEAD_DIM": HEAD_DIM,
                  "ACTUAL_HEAD_DIM": HEAD_DIM, "DEBUG_TRITON": False, "DEBUG_TRITON_DETAIL": False}
        sig, cx = signature(fn, {**bf16, **fp32}, {"sm_scale", "dropout_p"}, _BWD_NONES, values)
        out.append((name, fn, sig, cx, {"num_warps": 4, "num_stages": 1, "waves_per_eu": 1}))
    return out


# "PID WORKDIR" of the process that started a compile (Compiles): see end_with_parent.
PARENT = "ROCMLOCK_AOT_PARENT"


def end_with_parent() -> None:
    """When the process named in :data:`PARENT` is gone (pytest killed: SIGKILL, or SIGTERM at a CI timeout, where
    no ``stop()`` runs), remove its work directory and exit, rather than compile on for minutes as an orphan. A
    thread polls ``getppid()``: an orphan is adopted by init or a subreaper, so its parent changes."""
    import threading

    pid, _, workdir = os.environ.get(PARENT, "").partition(" ")
    if not pid.isdigit() or not workdir:
        return

    def watch() -> None:
        while os.getppid() == int(pid):
            time.sleep(0.5)
        shutil.rmtree(workdir, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def compile_all(src: Path, targets: list[str]) -> None:
    """Compile every kernel of :func:`kernels` for each ``gfx:wave`` of ``targets``; one JSON line per target."""
    end_with_parent()  # first: importing triton takes seconds
    os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
    sys.path.insert(0, str(src))
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    found = kernels()
    for spec in targets:
        gfx, wave = spec.split(":")
        result: dict[str, Any] = {"gfx": gfx, "kernels": {}}
        for name, fn, sig, constexprs, options in found:
            try:
                kernel = triton.compile(ASTSource(fn, sig, constexprs), target=GPUTarget("hip", gfx, int(wave)),
                                        options=options)
            except Exception as exc:  # noqa: BLE001 (the test reports what failed, per kernel and target)
                result["kernels"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
                continue
            result["kernels"][name] = describe(kernel)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["fetch"]:
        print(fetch())
    elif sys.argv[1:2] == ["compile"] and len(sys.argv) > 3:
        compile_all(Path(sys.argv[2]), sys.argv[3:])
    else:
        raise SystemExit("usage: flash_attn_aot.py fetch | compile SRC GFX:WAVE ...")
