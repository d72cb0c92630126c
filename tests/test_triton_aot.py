"""flash-attn's Triton backend, compiled ahead of time for every GPU target the GPU table gives it (issue 28).

The flash-attn recipe uses its Triton AMD backend where flash-attn has no CK kernels (gpu_targets.toml
flash_attn_triton); those kernels are JIT-compiled on the user's GPU, so a target they do not compile for would
fail only there, at the first training step. Triton compiles for AMD targets with no GPU and no ROCm (its LLVM
and LLD are inside libtriton), so these tests compile, with the Triton release the environment gets
(variants.yaml's triton_version, PyPI's wheel):
- a FlashAttention-2 forward kernel of our own (tests/triton_kernels.py), first checked to be a correct attention
  in Triton's CPU interpreter;
- flash-attn's own training kernels from the pinned sdist (forward, and the default backward's dK/dV and dQ),
  which .ci/run downloads (tests/flash_attn_aot.py fetch);
and check each code object: an AMD GPU ELF for exactly that target, the table's wavefront size, and matrix-core
instructions (WMMA on RDNA 3/4, MFMA on CDNA) for the two GEMMs. Also: the recipe's patch that lets flash-attn's
autotuner know gfx1151, run on the real utils.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from ciskips import in_ci
from flash_attn_aot import EM_AMDGPU, describe, pinned, sdist_to_test, sha256, triton_targets, unpack
from rocmlock.gpu.targets import GpuTarget
from shipped import RECIPES

if TYPE_CHECKING:
    from flash_attn_aot import Compiles

# tests/requirements-extra.txt installs PyPI's triton wheel; without it the tests skip, except under CI=true.
if in_ci():
    import triton
else:
    triton = pytest.importorskip("triton", reason="tests/requirements-extra.txt installs triton (PyPI's wheel)")

TRITON_TARGETS: list[GpuTarget] = triton_targets()
HERE = Path(__file__).resolve().parent


def _check_code_object(facts: dict[str, Any], target: GpuTarget) -> None:
    assert "error" not in facts, facts.get("error")
    assert facts["elf"] and facts["machine"] == EM_AMDGPU
    assert facts["target"] == target.gfx
    assert facts["wave32"] == (target.wavefront_size == 32)
    # The QK^T and PV products run on the matrix cores: WMMA on RDNA 3/4, MFMA on CDNA.
    prefix = "v_wmma_" if target.is_rdna else "v_mfma_"
    assert facts["matrix"] and all(op.startswith(prefix) for op in facts["matrix"]), facts["matrix"]


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this run only, so every kernel below is really compiled here."""
    return tmp_path_factory.mktemp("triton-cache")


def test_the_triton_compiling_here_is_the_release_the_environment_gets() -> None:
    variants = yaml.safe_load((RECIPES / "variants.yaml").read_text())
    assert triton.__version__ == variants["triton_version"][0]
    assert TRITON_TARGETS and {t.gfx for t in TRITON_TARGETS} >= {"gfx1100", "gfx1101", "gfx1151", "gfx1201"}


def test_our_kernel_is_a_correct_causal_attention_in_tritons_interpreter() -> None:
    # TRITON_INTERPRET is read when @triton.jit runs: a process of its own. Sizes not multiples of the blocks, so
    # the masks are exercised; float32 in, float32 out (the interpreter runs on NumPy).
    code = """
import torch, triton_kernels as k
torch.manual_seed(0)
bh, n, d = 3, 50, 32
q, kk, v = (torch.randn(bh, n, d) for _ in range(3))
o, lse = torch.empty(bh, n, d), torch.empty(bh, n)
k.attention_forward[((n + 15) // 16, bh)](q, kk, v, o, lse, d ** -0.5, n * d, d, n,
                                          BLOCK_M=16, BLOCK_N=16, HEAD_DIM=d, CAUSAL=True)
ref = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True)
scores = (q @ kk.transpose(1, 2)) * d ** -0.5
scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
print((o - ref).abs().max().item(), (lse - torch.logsumexp(scores, -1)).abs().max().item())
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    out_err, lse_err = map(float, out.stdout.split())
    assert out_err < 1e-4 and lse_err < 1e-4, (out_err, lse_err)


@pytest.mark.parametrize("target", TRITON_TARGETS, ids=lambda t: t.gfx)
def test_our_attention_kernel_compiles_for_every_triton_backend_target(target: GpuTarget, triton_cache: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton_kernels import CONSTEXPRS, SIGNATURE, attention_forward

    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    kernel = triton.compile(ASTSource(attention_forward, SIGNATURE, CONSTEXPRS),
                            target=GPUTarget("hip", target.gfx, target.wavefront_size))
    _check_code_object(describe(kernel), target)


def _sdist() -> Path:
    """The pinned flash-attn sdist; skip (fail under CI=true) where .ci/run's fetch has not put it here."""
    path = sdist_to_test()
    if not path.is_file():
        reason = f"no flash-attn sdist at {path}: `python tests/flash_attn_aot.py fetch` downloads it (.ci/run does)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    version, expected = pinned()
    assert sha256(path) == expected, f"{path} is not the flash-attn {version} sdist variants.yaml pins"
    return path


@pytest.fixture(scope="module")
def flash_attn_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(_sdist(), tmp_path_factory.mktemp("flash-attn"))


def test_flash_attns_own_training_kernels_compile_for_every_triton_backend_target(
        flash_attn_compiles: Callable[[Path], Compiles]) -> None:
    # Compiled in processes of their own, started in the background when the suite was collected
    # (tests/conftest.py): this waits for them and checks every target's three code objects.
    results = flash_attn_compiles(_sdist()).results(timeout=1800)
    assert set(results) == {t.gfx for t in TRITON_TARGETS}
    for target in TRITON_TARGETS:
        status, result, stderr = results[target.gfx]
        assert status == 0 and result is not None, (target.gfx, status, stderr)
        assert result["gfx"] == target.gfx
        assert set(result["kernels"]) == {"attn_fwd", "_bwd_kernel_dkdv_causal", "_bwd_kernel_dq_causal"}
        for name, facts in result["kernels"].items():
            try:
                _check_code_object(facts, target)
            except AssertionError as exc:
                raise AssertionError(f"{target.gfx} {name}: {exc}") from exc


def _fake_sdist(tmp_path: Path, init: bytes) -> Path:
    """An sdist holding only ``flash_attn/__init__.py`` with ``init`` in it."""
    import io
    import tarfile

    sdist = tmp_path / "flash_attn-0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("flash_attn-0/flash_attn/__init__.py")
        info.size = len(init)
        tar.addfile(info, io.BytesIO(init))
    return sdist


def test_a_compile_process_that_fails_is_reported_for_each_of_its_targets(tmp_path: Path) -> None:
    # An sdist whose flash_attn has no Triton backend: each process exits non-zero before printing a result,
    # and every target it had is reported with that status and the process's stderr, none silently missing.
    import tarfile

    from flash_attn_aot import Compiles

    sdist = _fake_sdist(tmp_path, b"# not flash-attn\n")
    (tmp_path / "work").mkdir()
    compiles = Compiles(sdist, ["gfx1100:32", "gfx942:64", "gfx1201:32"], tmp_path / "work", 2, os.environ)
    try:
        results = compiles.results(timeout=600)
    finally:
        compiles.stop()
    assert sorted(results) == ["gfx1100", "gfx1201", "gfx942"]
    for status, result, stderr in results.values():
        assert status == 1 and result is None and "flash_attn_triton_amd" in stderr, (status, stderr)
    assert not (tmp_path / "work").exists()
    # An sdist that is not a tar: the error, and the work directory removed.
    (tmp_path / "work").mkdir()
    (tmp_path / "bad.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(tarfile.ReadError):
        Compiles(tmp_path / "bad.tar.gz", ["gfx1100:32"], tmp_path / "work", 2, os.environ)
    assert not (tmp_path / "work").exists()


_ORPHANING_DRIVER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from flash_attn_aot import Compiles
compiles = Compiles(Path(sys.argv[2]), ["gfx1100:32", "gfx942:64"], Path(sys.argv[3]), 2, os.environ)
print(" ".join(str(proc.pid) for _, proc, _ in compiles._runs), flush=True)
time.sleep(300)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended (where pid 1 does not reap, it stays one)


def test_compiles_whose_starter_is_killed_end_and_remove_their_work_directory(tmp_path: Path) -> None:
    # pytest killed (SIGKILL, or SIGTERM at a CI timeout) runs no stop(): the nice-19 compiles must not go on as
    # orphans for minutes, nor leave their directory in /tmp. Here they would sleep in flash_attn's import.
    import signal

    sdist = _fake_sdist(tmp_path, b"import time\ntime.sleep(300)\n")
    work = tmp_path / "work"
    work.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", _ORPHANING_DRIVER, str(HERE), str(sdist), str(work)],
                              stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        assert driver.stdout is not None
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(map(_running, pids))
        time.sleep(1)  # the compiles are under way (their watch started first thing)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 20
        while (any(map(_running, pids)) or work.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_running, pids)), "a compile outlived the process that started it"
        assert not work.exists(), sorted(p.name for p in work.iterdir())
    finally:
        driver.kill()
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_wrong_sdist_fails_the_test_and_not_the_session(tmp_path: Path) -> None:
    # tests/conftest.py starts the compiles at collection: other bytes than the pinned sdist's must leave that to
    # the test (a one-line sha256 failure), not stop the whole session with an INTERNALERROR (pytest exit 3).
    bad = tmp_path / "flash_attn.tar.gz"
    bad.write_bytes(b"not a tar")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__)),
                          "-k", "training_kernels_compile"], cwd=HERE.parent, capture_output=True, text=True,
                         env={**os.environ, "ROCMLOCK_FLASH_ATTN_SDIST": str(bad), "ROCMLOCK_TEST_NORMAL_EXIT": "1"},
                         timeout=300, check=False)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "is not the flash-attn" in run.stdout and "INTERNALERROR" not in run.stdout + run.stderr


# ----------------------------------------------------------------------------- the recipe's is_rdna patch

_AUTOTUNE_IMPORT = """
import os, sys
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
os.environ["FLASH_ATTENTION_TRITON_AMD_AUTOTUNE"] = "1"
import types
# The package without its __init__ (which imports the whole backend, fwd_prefill included, at once).
package = types.ModuleType("flash_attn")
package.__path__ = [os.path.join(sys.argv[1], "flash_attn")]
sys.modules["flash_attn"] = package
import flash_attn.flash_attn_triton_amd.utils as utils
# The GPU this would run on: Triton's driver is not asked (there is no GPU here).
utils.is_hip = lambda: True
utils.get_arch = lambda: sys.argv[2]
try:
    from flash_attn.flash_attn_triton_amd import fwd_prefill
except ValueError as exc:
    print("error:", exc)
else:
    print("configs:", sorted({c.num_warps for c in fwd_prefill.attn_fwd.configs}), len(fwd_prefill.attn_fwd.configs))
"""


def _patch(src: Path, gfx: str) -> subprocess.CompletedProcess[str]:
    script = (RECIPES / "flash-attn-rocm" / "build.sh").read_text()
    start = script.index("rocmlock_flash_attn_rdna() {")
    function = script[start:script.index("\n}\n", start) + 3]
    snippet = f'rocmlock_die() {{ echo "$*" >&2; exit 1; }}\n{function}rocmlock_flash_attn_rdna "$1"\n'
    return subprocess.run(["bash", "-c", snippet, "build.sh", gfx], cwd=src, capture_output=True, text=True,
                          check=False)


def test_the_recipe_teaches_flash_attns_autotuner_gfx1151(flash_attn_src: Path, tmp_path: Path) -> None:
    # The Triton branch of build.sh runs the patch for the variant's target (a no-op where upstream knows it).
    assert 'rocmlock_flash_attn_rdna "${ROCMLOCK_GPU_TARGET}"' in (RECIPES / "flash-attn-rocm" / "build.sh").read_text()
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(flash_attn_src), str(src)], check=True)

    def autotune_import(gfx: str) -> str:
        out = subprocess.run([sys.executable, "-c", _AUTOTUNE_IMPORT, str(src), gfx], capture_output=True,
                             text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip()

    # Upstream as released: gfx1100 gets the RDNA autotune configs (num_warps 2), gfx1151 fails at import.
    assert autotune_import("gfx1100") == "configs: [2] 7"
    assert autotune_import("gfx1151") == "error: Unknown Device Type"
    assert _patch(src, "gfx942").returncode == 0 and _patch(src, "gfx1100").returncode == 0  # nothing to add
    assert autotune_import("gfx1151") == "error: Unknown Device Type"
    patched = _patch(src, "gfx1151")
    assert patched.returncode == 0 and "added gfx1151 to flash-attn's RDNA targets" in patched.stdout
    assert autotune_import("gfx1151") == "configs: [2] 7"
    utils = (src / "flash_attn/flash_attn_triton_amd/utils.py").read_text()
    assert _patch(src, "gfx1151").returncode == 0  # idempotent: a rebuild in the same work dir adds nothing
    assert (src / "flash_attn/flash_attn_triton_amd/utils.py").read_text() == utils


def test_the_patch_stops_the_build_when_upstream_moves_the_list(tmp_path: Path) -> None:
    utils = tmp_path / "flash_attn/flash_attn_triton_amd/utils.py"
    utils.parent.mkdir(parents=True)
    utils.write_text("def is_rdna():\n    return get_gfx_family() == 'rdna'\n")
    out = _patch(tmp_path, "gfx1151")
    assert out.returncode == 1 and "is_rdna() no longer reads 'get_arch() in (...)'" in out.stderr

