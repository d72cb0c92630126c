"""The probe's device-code, attention-kernel and gradient checks (tools/verify_env.py: kernels.prefix,
compute.sdpa_kernel, train.lora's gradient norms).

The probe has its own small reader (it cannot import rocmlock): it must agree with rocmlock's on real code (the
bitsandbytes 0.50.1 ROCm 7.2 library, crafted plain/zlib/zstd bundles around its code objects). The GPUs are fake
KFD trees or a fake ROCm torch; the SDPA measurement runs for real on the CPU, and its verdict on a GPU is checked
with given timings (the device run on an H200 is in the lead's note: this machine has no GPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from devicecode_helpers import bnb_library, ccob, code_objects, host_elf, plain_bundle
from rocmlock.gpu import offload
from rocmlock.gpu.devicecode import scan_file
from test_probe import ctx_for, fake_llamafactory, fake_torch, probe, write

KFD = "sys/class/kfd/kfd/topology/nodes"


def kfd_root(root: Path, *versions: int) -> Path:
    for i, version in enumerate([0, *versions]):
        write(root / KFD / str(i) / "properties", f"cpu_cores_count {0 if i else 16}\ngfx_target_version {version}\n")
    return root


@pytest.fixture(scope="module")
def objects() -> dict[str, bytes]:
    return code_objects()


def test_the_probes_tables_are_rocmlocks() -> None:
    assert probe.GENERIC_TARGETS == offload.GENERIC
    assert all(offload.MACH[value] == name for value, name in probe.ELF_MACH.items())
    assert set(probe.TARGETS) <= set(probe.ELF_MACH.values())


def test_the_probes_reader_agrees_with_rocmlocks(objects: dict[str, bytes], tmp_path: Path) -> None:
    gfx942, gfx90a = (f"hipv4-amdgcn-amd-amdhsa--{g}" for g in ("gfx942", "gfx90a:xnack-"))
    sections = {
        "plain.so": plain_bundle([(gfx942, objects["gfx942"])]),
        "zlib.so": ccob(plain_bundle([(gfx90a, objects["gfx90a"])]), method=0, version=2),
        "two.so": ccob(plain_bundle([(gfx942, objects["gfx942"])])) + b"\0" * 64 + plain_bundle([(gfx90a, b"")]),
    }
    files = {name: tmp_path / name for name in sections}
    for name, section in sections.items():
        files[name].write_bytes(host_elf(section))
    files["bnb.so"] = bnb_library()
    files["k.hsaco"] = tmp_path / "k.hsaco"
    files["k.hsaco"].write_bytes(objects["gfx1201"])
    for name, path in files.items():
        ours = scan_file(path, name)
        assert ours is not None
        ids = probe.device_code_ids(path)
        assert sorted({i.removeprefix("code object ") for i in ids}) == sorted({str(t) for t in ours.targets}), name
        assert ids[0].startswith("code object ") == (ours.kind == "code-object")
    (tmp_path / "text").write_text("not an ELF")
    assert probe.device_code_ids(tmp_path / "text") is None


def _prefix(tmp_path: Path, files: dict[str, bytes | Path]) -> Path:
    prefix = tmp_path / "env"
    for rel, data in files.items():
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_bytes(data if isinstance(data, bytes) else data.read_bytes())
    (prefix / "conda-meta").mkdir(exist_ok=True)
    return prefix


def test_kernels_check_names_the_files_without_code_for_the_gpu(objects: dict[str, bytes], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _prefix(tmp_path, {"lib/python3.12/site-packages/bitsandbytes/libbitsandbytes_rocm72.so": bnb_library(),
                                "share/kernels/attn.hsaco": objects["gfx90a"]})
    gfx942 = kfd_root(tmp_path / "mi300x", 90402)
    assert probe.main(["--only", "kernels", "--json", "--prefix", str(prefix), "--root", str(gfx942)]) == 1
    (kernels,) = json.loads(capsys.readouterr().out)["checks"]
    assert kernels["status"] == "fail"
    assert kernels["evidence"].startswith(f"2 file(s) with GPU code in {prefix}; 1 without kernels for gfx942: "
                                          "share/kernels/attn.hsaco (gfx90a)")
    assert "rocmlock audit --prefix DIR" in kernels["fix"]
    assert kernels["data"]["files"]["share/kernels/attn.hsaco"] == ["gfx90a"]
    mi250 = kfd_root(tmp_path / "mi250", 90010, 90010)
    assert probe.main(["--only", "kernels", "--prefix", str(prefix), "--root", str(mi250)]) == 0
    assert "2 file(s) with GPU code" in capsys.readouterr().out  # the table is the result: stdout (issue 44)
    # No GPU seen: skipped, with where to check instead.
    assert probe.main(["--only", "kernels", "--json", "--prefix", str(prefix), "--root", str(tmp_path)]) == 0
    (kernels,) = json.loads(capsys.readouterr().out)["checks"]
    assert kernels["status"] == "skipped" and "rocmlock audit --prefix DIR --target GFX" in kernels["evidence"]


def test_kernels_check_counts_code_objects_with_their_alternatives(objects: dict[str, bytes], tmp_path: Path) -> None:
    library = {f"lib/rocblas/library/TensileLibrary_{g}.co": objects[g] for g in ("gfx90a", "gfx1100")}
    prefix = _prefix(tmp_path, library)
    assert probe.check_kernels(ctx_for(kfd_root(tmp_path / "mi250", 90010), prefix=prefix)).status == "ok"
    out = probe.check_kernels(ctx_for(kfd_root(tmp_path / "mi300x", 90402), prefix=prefix))
    assert out.status == "fail" and "2 without kernels for gfx942" in out.evidence
    assert "lib/rocblas/library/TensileLibrary_gfx1100.co (gfx1100)" in out.evidence


def test_kernels_check_on_a_mixed_node_checks_the_environments_target_only(objects: dict[str, bytes],
                                                                          tmp_path: Path) -> None:
    # CHANGELOG (nodes with GPUs of several targets): kernels.prefix checks against the target's GPUs only; the
    # other GPUs are host.driver's to name. An MI300X beside a Radeon PRO W7900, an environment for gfx942.
    prefix = _prefix(tmp_path, {"share/kernels/attn.hsaco": objects["gfx942"]})
    node = kfd_root(tmp_path / "mixed", 90402, 110000, 90402)
    out = probe.check_kernels(ctx_for(node, prefix=prefix, expect_arch="gfx942"))
    assert (out.status, out.data["gpus"]) == ("ok", ["gfx942"]), out.evidence
    assert out.evidence == f"1 file(s) with GPU code in {prefix}, all with kernels for gfx942"
    # The environment for the W7900: its code is what is missing.
    out = probe.check_kernels(ctx_for(node, prefix=prefix, expect_arch="gfx1100"))
    assert out.status == "fail" and out.data["gpus"] == ["gfx1100"]
    assert "1 without kernels for gfx1100: share/kernels/attn.hsaco (gfx942)" in out.evidence
    # No target known, or one that is none of the node's GPUs: every GPU is checked.
    for expect in (None, "gfx90a"):
        out = probe.check_kernels(ctx_for(node, prefix=prefix, expect_arch=expect))
        assert out.status == "fail" and out.data["gpus"] == ["gfx1100", "gfx942"], expect
        assert "1 without kernels for gfx1100, gfx942" in out.evidence


def test_kernels_check_reads_the_xnack_mode_from_torchs_device_name(tmp_path: Path) -> None:
    on = host_elf(plain_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942:xnack+", b"")]))
    prefix = _prefix(tmp_path, {"lib/libon.so": on})
    ctx = ctx_for(tmp_path, prefix=prefix)
    ctx.facts["torch"] = fake_torch("7.2.0", None, ["gfx942:sramecc+:xnack-"], ["gfx942"])
    out = probe.check_kernels(ctx)
    assert out.status == "fail" and "lib/libon.so (gfx942:xnack+)" in out.evidence
    ctx.facts["torch"] = fake_torch("7.2.0", None, ["gfx942:sramecc+:xnack+"], ["gfx942"])
    assert probe.check_kernels(ctx).status == "ok"


def test_zstd_bundles_without_a_zstd_module_warn_and_damage_is_named(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _prefix(tmp_path, {"lib/libbnb.so": bnb_library()})
    ctx = ctx_for(kfd_root(tmp_path / "root", 90402), prefix=prefix)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard raises ImportError
    monkeypatch.setitem(sys.modules, "compression", None)
    out = probe.check_kernels(ctx)
    assert out.status == "warn" and "lib/libbnb.so: zstd-compressed bundles, and this python has no zstd" in \
        out.evidence
    monkeypatch.undo()
    cut = bnb_library().read_bytes()[:-8192]
    (prefix / "lib/libbnb.so").write_bytes(cut)
    out = probe.check_kernels(ctx)
    assert out.status == "warn" and "lib/libbnb.so: a truncated or damaged ELF file" in out.evidence


# ----------------------------------------------------------------------------- compute.sdpa_kernel


def test_sdpa_kernel_on_the_cpu_names_the_default_and_times_each_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--device", "cpu", "--only", "compute.sdpa_kernel", "--json"]) == 0
    (sdpa,) = json.loads(capsys.readouterr().out)["checks"]
    assert sdpa["status"] == "ok"
    # torch._fused_sdp_choice: on the CPU, bf16 causal attention goes to the CPU flash kernel.
    assert sdpa["data"]["chosen"] == "flash" and sdpa["evidence"].startswith("default dispatch runs flash (")
    ms = sdpa["data"]["ms"]
    assert set(ms) == {"default", "flash", "efficient", "cudnn", "math"}
    # Times are what they are on a shared CPU; which backends ran is not. Past the 1.5 s budget a backend is
    # reported as not timed rather than run.
    assert isinstance(ms["default"], float)
    assert all(isinstance(ms[k], float) or ms[k] == "not timed (time budget spent)" for k in ("flash", "math"))
    assert all(ms[k].startswith(("unavailable", "not timed")) for k in ("efficient", "cudnn"))
    assert sdpa["evidence"].endswith("on cpu")


def _gpu_ctx(tmp_path: Path, arch: str, monkeypatch: pytest.MonkeyPatch, times: dict[str, float | str],
             **environ: str) -> object:
    ctx = ctx_for(tmp_path, environ={"PATH": "", **environ})
    ctx.facts["torch"] = fake_torch("7.2.0", None, [arch], [arch.split(":")[0]])
    monkeypatch.setattr(probe, "_sdpa_timings", lambda torch, device: ("math", times))
    return ctx


MATH_ONLY_DEFAULT = {"default": 109.0, "flash": 7.2, "efficient": 15.0, "cudnn": "unavailable: no", "math": 109.1}


def test_a_silent_math_fallback_fails_where_a_fused_kernel_exists(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = probe.check_sdpa_kernel(_gpu_ctx(tmp_path, "gfx942:sramecc+:xnack-", monkeypatch, MATH_ONLY_DEFAULT))
    assert out.status == "fail"
    assert out.evidence.startswith("default dispatch runs math (default 109.00 ms, flash 7.20 ms, efficient 15.00 ms, "
                                   "cudnn unavailable, math 109.10 ms) on AMD Instinct MI300X")
    assert "gfx942 has AOTriton kernels (gpu_targets.toml) and flash, efficient ran when forced" in out.evidence
    assert "built with AOTriton" in out.fix
    # Strix Halo with torch 2.12 (AOTriton 0.11.2b): experimental there, PyTorch uses it only when asked.
    out = probe.check_sdpa_kernel(_gpu_ctx(tmp_path, "gfx1151", monkeypatch, dict(MATH_ONLY_DEFAULT)))
    assert out.status == "fail" and out.fix.startswith("set TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1: AOTriton "
                                                       "0.11.2b treats gfx1151 as experimental")
    # With torch 2.13 on (AOTriton 0.12b, 0.13b) it is supported, like gfx1100 in every release: math is a wrong build.
    for arch, version in (("gfx1151", "2.13.0"), ("gfx1151", "2.14.1+rocm7.14"), ("gfx1100", "2.12.1")):
        ctx = _gpu_ctx(tmp_path, arch, monkeypatch, dict(MATH_ONLY_DEFAULT))
        ctx.facts["torch"].__version__ = version
        out = probe.check_sdpa_kernel(ctx)
        assert out.status == "fail" and "built with AOTriton" in out.fix, (arch, version)


def test_math_on_a_gpu_without_fused_kernels_only_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    times = {"default": 50.0, "flash": "unavailable: no", "efficient": "unavailable: no", "cudnn": "unavailable: no",
             "math": 50.0}
    out = probe.check_sdpa_kernel(_gpu_ctx(tmp_path, "gfx908:sramecc+:xnack-", monkeypatch, times))
    assert out.status == "warn" and "only the math kernel serves this GPU (no fused kernel listed for gfx908)" in \
        out.evidence


# ----------------------------------------------------------------------------- train.lora's gradients


@pytest.mark.parametrize(("norms", "problem"), [
    ([1.0, 0.9, 1.1, 0.8, 0.7], None),
    ([1.0, 0.9, float("nan"), 0.8], "the gradient norm is nan at step 3"),
    ([1.0, float("inf")], "the gradient norm is inf at step 2"),
    ([1.0, 1.2, 0.8, 5.0, 250.0], "the gradient norm explodes: 250 at step 5, 250x the first steps' 1"),
    ([], None),
])
def test_gradient_norms_that_are_not_finite_or_explode_are_named(norms: list[float], problem: str | None) -> None:
    assert probe._grad_problem(norms) == problem


def test_llamafactory_run_with_an_exploding_gradient_fails_though_the_loss_falls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fake_llamafactory(tmp_path, (
        "open(out / 'trainer_log.jsonl', 'w').writelines(json.dumps({'current_steps': i, 'loss': 4.0 / i}) + '\\n'"
        " for i in range(1, 9))\n"
        "norms = [1.0, 1.1, 0.9, 1.0, 2.0, 40.0, 900.0, 3e4]\n"
        "state = {'log_history': [{'step': i + 1, 'loss': 4.0 / (i + 1), 'grad_norm': n} for i, n in enumerate(norms)]}\n"
        "(out / 'trainer_state.json').write_text(json.dumps(state))\n"))
    argv = ["--device", "cpu", "--train", "--train-backend", "llamafactory", "--train-steps", "8", "--only", "train",
            "--json"]
    assert probe.main(argv, env) == 1
    (train,) = json.loads(capsys.readouterr().out)["checks"]
    assert train["status"] == "fail"
    assert train["evidence"].endswith("the gradient norm explodes: 3e+04 at step 8, 30000x the first steps' 1")
    assert train["data"]["grad_norms"][-1] == 30000.0


def test_peft_training_on_the_cpu_records_finite_gradient_norms(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--train", "--train-backend", "peft", "--train-steps", "8", "--only", "train", "--json"]
    probe.main(argv)
    (train,) = json.loads(capsys.readouterr().out)["checks"]
    norms = train["data"]["grad_norms"]
    assert len(norms) == 8 and all(isinstance(n, float) and n > 0 for n in norms)
    assert "grad norm" in train["evidence"]
