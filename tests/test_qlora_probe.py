"""The probe's bitsandbytes and DeepSpeed checks: skipped with the reason when the packages are absent,
a failure with the fix when they are broken, and run for real on the CPU with the PyPI packages."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tools" / "verify_env.py"
IDS = ["bnb.linear4bit", "deepspeed.ops", "deepspeed.zero2"]


def load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_env_qlora_under_test", PROBE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


probe = load_probe()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, dict]]:
    code = probe.main([*args, "--only", "bnb", "--only", "deepspeed", "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {c["id"]: c for c in report["checks"]}


def block_imports(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make ``names`` unimportable (find_spec returns None, import raises) for this test."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)


def test_checks_are_registered_after_the_existing_ones() -> None:
    ids = [c.id for c in probe.CHECKS]
    start = ids.index(IDS[0])
    # Contiguous, after every check that existed before them; only checks added later (triton.cc) follow.
    assert ids[start:start + 3] == IDS and ids[start + 3:] == ["triton.cc"]
    assert all(c.required and c.option is None for c in probe.CHECKS if c.id in IDS)


def test_absent_packages_are_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    block_imports(monkeypatch, "bitsandbytes", "deepspeed")
    code, checks = run(capsys, "--device", "cpu", "--prefix", str(tmp_path))
    assert code == 0
    assert [checks[i]["status"] for i in IDS] == ["skipped"] * 3
    assert "bitsandbytes is not installed" in checks["bnb.linear4bit"]["evidence"]
    assert "qlora feature" in checks["bnb.linear4bit"]["evidence"]
    assert "DeepSpeed is not installed" in checks["deepspeed.ops"]["evidence"]


def test_installed_by_conda_but_not_importable_is_a_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    block_imports(monkeypatch, "bitsandbytes", "deepspeed")
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    for name, version in (("bitsandbytes", "0.50.1"), ("deepspeed", "0.18.4")):
        build = "rocm72_gfx942_py312_h0000000_0"
        (meta / f"{name}-{version}-{build}.json").write_text(
            json.dumps({"name": name, "version": version, "build": build}))
    code, checks = run(capsys, "--device", "cpu", "--prefix", str(tmp_path))
    assert code == 1
    bnb, ops = checks["bnb.linear4bit"], checks["deepspeed.ops"]
    assert bnb["status"] == "fail" and "conda-meta: bitsandbytes 0.50.1 rocm72_gfx942" in bnb["evidence"]
    assert "pixi install" in bnb["fix"]
    assert ops["status"] == "fail" and "import deepspeed failed" in ops["evidence"]


def test_without_a_device_the_bnb_step_is_skipped_but_ds_report_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = run(capsys)
    assert code == 0
    assert checks["bnb.linear4bit"]["status"] == "skipped"
    assert "--device cpu" in checks["bnb.linear4bit"]["evidence"]
    assert checks["deepspeed.zero2"]["status"] == "skipped"
    assert checks["deepspeed.ops"]["status"] == "ok"


def test_bitsandbytes_4bit_layer_runs_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    import bitsandbytes

    code, checks = run(capsys, "--device", "cpu")
    bnb = checks["bnb.linear4bit"]
    assert code == 0 and bnb["status"] == "ok", bnb
    assert bnb["data"]["version"] == bitsandbytes.__version__
    assert bnb["data"]["native"].startswith("libbitsandbytes_cpu")
    assert bnb["data"]["out_err"] < 0.03 and bnb["data"]["grad_err"] < 0.03
    # The weight really is 4-bit: NF4 keeps it within ~10%, never exactly.
    assert 0.01 < bnb["data"]["quant_err"] < 0.2
    assert "on cpu" in bnb["evidence"]


def test_wrong_4bit_results_fail(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from bitsandbytes import functional

    real = functional.dequantize_4bit
    # A dequantization that disagrees with the layer's kernels, as a build for the wrong target would.
    monkeypatch.setattr(functional, "dequantize_4bit", lambda *a, **kw: real(*a, **kw) * 1.5)
    code, checks = run(capsys, "--device", "cpu")
    assert code == 1 and checks["bnb.linear4bit"]["status"] == "fail"
    assert "reinstall the bitsandbytes built for this GPU target" in checks["bnb.linear4bit"]["fix"]


def test_deepspeed_report_and_zero2_step_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    import deepspeed

    capsys.readouterr()  # DeepSpeed's own import logs to stdout; the probe's report must not contain it
    for _ in range(2):  # a second run in the same process sets the world up again
        code, checks = run(capsys, "--device", "cpu")
        ops, zero2 = checks["deepspeed.ops"], checks["deepspeed.zero2"]
        assert code == 0 and ops["status"] == "ok" and zero2["status"] == "ok", (ops, zero2)
        assert ops["data"]["version"] == deepspeed.__version__ and ops["data"]["accelerator"] == "cpu"
        assert isinstance(ops["data"]["compatible"], dict) and ops["data"]["compatible"]
        assert set(ops["data"]["torch_info"]) >= {"version", "hip_version"}
        assert zero2["data"]["loss_after"] < zero2["data"]["loss_before"]
        assert zero2["data"]["optimizer"].startswith("DeepSpeedZeroOptimizer(")
    assert "MASTER_PORT" not in probe.os.environ


def test_deepspeed_ops_built_for_another_torch_are_named() -> None:
    torch = SimpleNamespace(__version__="2.12.1+rocm7.2", version=SimpleNamespace(hip="7.2.53211-abc"))
    assert probe._deepspeed_build_mismatch(torch, {"version": "2.12", "hip_version": "7.2"}) == ""
    assert "built against torch 2.11" in probe._deepspeed_build_mismatch(torch, {"version": "2.11",
                                                                                 "hip_version": "7.2"})
    assert "built for HIP 6.4" in probe._deepspeed_build_mismatch(torch, {"version": "2.12", "hip_version": "6.4"})


def test_a_rocm_torch_with_a_non_hip_bitsandbytes_library_fails(tmp_path: Path) -> None:
    # A ROCm torch that sees one GPU; the real bitsandbytes here loads its CPU library, as a PyPI or CUDA
    # build of bitsandbytes would in a ROCm environment.
    fake_torch = SimpleNamespace(version=SimpleNamespace(hip="7.2.53211"),
                                 cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 1))
    ctx = probe.Context(root=Path("/"), prefix=tmp_path, environ={})
    ctx.facts["torch"] = fake_torch
    outcome = probe.check_bnb(ctx)
    assert outcome.status == "fail"
    assert "no HIP library loaded for torch's ROCm 7.2" in outcome.evidence
    assert "libbitsandbytes_rocm72.so" in outcome.fix


def test_deepspeed_on_a_rocm_gpu_must_use_it(tmp_path: Path) -> None:
    # On this host DeepSpeed chose its CPU accelerator; with a ROCm GPU visible that is a failure.
    fake_torch = SimpleNamespace(__version__="2.12.1+rocm7.2", version=SimpleNamespace(hip="7.2.53211"),
                                 cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 1))
    ctx = probe.Context(root=Path("/"), prefix=tmp_path, environ={})
    ctx.facts["torch"] = fake_torch
    outcome = probe.check_deepspeed_ops(ctx)
    assert outcome.status == "fail" and "accelerator cpu" in outcome.evidence
    assert "DS_ACCELERATOR" in outcome.fix
    assert outcome.data["prebuilt"] == [] and "cpu_adam" in outcome.data["compatible"]
