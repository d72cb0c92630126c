"""Nodes with GPUs of more than one target: unpack's GPU gate, doctor and the probe look at every GPU, say which
one rattler/pixi and the CEP draft report as ``__amdgpu_arch``, and fail when the environment's target is none
of them.

The rules, from their sources: rattler (conda/rattler#2806, crates/rattler_virtual_packages/src/amdgpu.rs,
``select_device``) takes the GPU with the most compute units (``simd_count / simd_per_cu`` from KFD's
``properties``), ties to the highest ISA; the CEP draft (conda/ceps#189) takes the highest ISA version. The /sys
trees below are KFD's topology as the kernel writes it: a CPU node 0 (``gfx_target_version 0``), one node per GPU.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from rocmlock.bundle import unpack
from rocmlock.bundle.layout import BundleMetadata
from rocmlock.errors import OperationError
from rocmlock.gpu.targets import get_target
from rocmlock.host.doctor import run_doctor
from rocmlock.host.node import Gpu, cep_pick, gpu_choice, node_problem, rattler_pick, read_gpus, read_node
from rocmlock.host.rocm import Host
from test_probe import load_probe

KFD = "sys/class/kfd/kfd/topology/nodes"
# (gfx_target_version, simd_count, simd_per_cu) of real boards: MI300X 304 CUs, MI355X 256, MI210 104,
# Radeon PRO W7900 96 (2 SIMDs per CU on RDNA), Strix Halo's Radeon 8060S 40.
MI300X, MI355X, MI210 = (90402, 1216, 4), (90500, 1024, 4), (90010, 416, 4)
W7900, STRIX_HALO = (110000, 192, 2), (110501, 80, 2)


def kfd_tree(root: Path, *gpus: tuple[int, int, int], rocm: str | None = "7.2.1") -> Path:
    props = root / KFD / "0/properties"
    props.parent.mkdir(parents=True, exist_ok=True)
    props.write_text("cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n")
    for i, (version, simds, per_cu) in enumerate(gpus, start=1):
        props = root / KFD / str(i) / "properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        props.write_text(f"cpu_cores_count 0\nsimd_count {simds}\nmax_waves_per_simd 8\nsimd_per_cu {per_cu}\n"
                         f"gfx_target_version {version}\n")
    if rocm:
        (root / "opt/rocm/.info").mkdir(parents=True, exist_ok=True)
        (root / "opt/rocm/.info/version").write_text(f"{rocm}-42\n")
    return root


# ----------------------------------------------------------------------------- the rules (rocmlock.host.node)


def test_every_gpu_is_read_with_its_isa_and_compute_units(tmp_path: Path) -> None:
    gpus = read_gpus(kfd_tree(tmp_path, MI300X, MI210))
    assert gpus == (Gpu(0, "gfx942", (9, 4, 2), 304), Gpu(1, "gfx90a", (9, 0, 10), 104))
    assert [g.isa_version for g in gpus] == ["9.4.2", "9.0.10"]


@pytest.mark.parametrize(("gpus", "rattler", "cep"), [
    # A newer GPU with fewer compute units: the rules disagree.
    ((MI300X, MI355X), "gfx942", "gfx950"),
    # A workstation's discrete Radeon beside the APU's newer iGPU (the case rattler's rule is for).
    ((STRIX_HALO, W7900), "gfx1100", "gfx1151"),
    # They agree where the newest GPU is also the biggest.
    ((MI210, MI300X), "gfx942", "gfx942"),
])
def test_rattler_takes_the_most_compute_units_the_cep_the_highest_isa(
        tmp_path: Path, gpus: tuple[tuple[int, int, int], ...], rattler: str, cep: str) -> None:
    found = read_gpus(kfd_tree(tmp_path, *gpus))
    assert (rattler_pick(found), cep_pick(found)) == (next(g for g in found if g.gfx == rattler),
                                                      next(g for g in found if g.gfx == cep))


def test_equal_compute_units_go_to_the_highest_isa_and_unknown_counts_lose() -> None:
    tie = (Gpu(0, "gfx1100", (11, 0, 0), 96), Gpu(1, "gfx1101", (11, 0, 1), 96))
    assert rattler_pick(tie) == tie[1]
    unknown = (Gpu(0, "gfx950", (9, 5, 0), None), Gpu(1, "gfx90a", (9, 0, 10), 104))
    assert rattler_pick(unknown) == unknown[1] and cep_pick(unknown) == unknown[0]


def test_the_choice_line_names_every_gpu_both_picks_and_the_devices_of_the_target(tmp_path: Path) -> None:
    gpus = read_gpus(kfd_tree(tmp_path, MI300X, MI355X, MI300X))
    line = gpu_choice(gpus, "gfx950")
    assert line == (
        "GPUs of 2 targets: GPU 0 gfx942 (9.4.2, 304 CUs), GPU 1 gfx950 (9.5.0, 256 CUs), GPU 2 gfx942 (9.4.2, "
        "304 CUs); __amdgpu_arch is 9.4.2 (gfx942) for rattler/pixi (most compute units, conda/rattler#2806) and "
        "9.5.0 (gfx950) under the CEP draft (highest ISA, conda/ceps#189); gfx950 is GPU 1: export "
        "HIP_VISIBLE_DEVICES=1 so the environment uses only those; a solver that detects __amdgpu_arch refuses "
        "the gfx950 packages here: install with CONDA_OVERRIDE_AMDGPU_ARCH=9.5.0")
    # The target rattler picks needs no override; one target only: nothing to say.
    assert "CONDA_OVERRIDE" not in (gpu_choice(gpus, "gfx942") or "")
    assert "HIP_VISIBLE_DEVICES=0,2" in (gpu_choice(gpus, "gfx942") or "")
    assert gpu_choice(read_gpus(kfd_tree(tmp_path / "one", MI300X, MI300X)), "gfx942") is None


def test_unpack_gate_passes_a_target_among_the_gpus_and_refuses_one_that_is_not(tmp_path: Path) -> None:
    node = read_node(kfd_tree(tmp_path, STRIX_HALO, W7900), {})
    assert node_problem(node, "gfx1151", "7.2") is None
    assert node_problem(node, "gfx1100", "7.2") is None
    problem = node_problem(node, "gfx942", "7.2")
    assert problem is not None
    assert problem.startswith("GPU 0 is gfx1151, GPU 1 is gfx1100; the bundle was built for gfx942")
    # The environment to pack instead: the one a solver on this node would pick (most compute units).
    assert "`rocmlock pack -e <env for gfx1100>`" in problem


def _meta(gfx: str) -> BundleMetadata:
    return BundleMetadata("strix", "linux-64", "linux-64", gfx, None, "7.2", "0" * 64, "0", None, ())


def test_unpack_says_which_gpus_the_bundle_runs_on_and_what_a_solver_picks(tmp_path: Path) -> None:
    root = kfd_tree(tmp_path, STRIX_HALO, W7900)
    line = unpack._check_node(_meta("gfx1151"), root, {}, force=False)
    assert line.startswith("node check: a gfx1151 GPU, ROCm 7.2 found, as the bundle needs; GPUs of 2 targets")
    assert "gfx1151 is GPU 0: export HIP_VISIBLE_DEVICES=0" in line
    assert "CONDA_OVERRIDE_AMDGPU_ARCH=11.5.1" in line
    with pytest.raises(OperationError, match="GPU 0 is gfx1151, GPU 1 is gfx1100; the bundle was built for gfx90a"):
        unpack._check_node(_meta("gfx90a"), root, {}, force=False)


# ----------------------------------------------------------------------------- doctor


def _doctor_gpus(root: Path, *targets: str, build: bool = False) -> tuple[str, str, str]:
    host = Host(env={"PATH": ""}, which=lambda _n, _p: None, kfd=root / "dev/kfd", sysroot=root)
    report = run_doctor([get_target(t) for t in targets], build=build, host=host)
    check = next(c for c in report.checks if c.name == "gpus")
    return check.status, check.message, check.fix


def test_doctor_on_a_node_of_two_targets_warns_with_both_picks(tmp_path: Path) -> None:
    status, message, fix = _doctor_gpus(kfd_tree(tmp_path, MI300X, MI355X), "gfx950")
    assert status == "warn"
    assert "9.4.2 (gfx942) for rattler/pixi" in message and "9.5.0 (gfx950) under the CEP draft" in message
    assert "HIP_VISIBLE_DEVICES=1" in message and "HIP_VISIBLE_DEVICES" in fix


def test_doctor_fails_a_node_where_no_gpu_is_the_target_but_not_a_build_host(tmp_path: Path) -> None:
    root = kfd_tree(tmp_path, MI300X, MI355X)
    status, message, fix = _doctor_gpus(root, "gfx90a")
    assert status == "fail"
    assert message == ("GPU 0 gfx942 (9.4.2, 304 CUs), GPU 1 gfx950 (9.5.0, 256 CUs); the environments checked are "
                       f"for gfx90a: none of them runs on this node (__amdgpu_arch 9.4.2 (gfx942) from /{KFD})")
    assert "--target gfx942" in fix
    # A build host cross-compiles: its GPUs only inform.
    assert _doctor_gpus(root, "gfx90a", build=True)[0] == "ok"


def test_doctor_on_a_node_of_one_target_lists_its_gpus(tmp_path: Path) -> None:
    assert _doctor_gpus(kfd_tree(tmp_path, MI300X, MI300X), "gfx942") == (
        "ok", f"GPU 0 gfx942 (9.4.2, 304 CUs), GPU 1 gfx942 (9.4.2, 304 CUs); __amdgpu_arch 9.4.2 (gfx942) from /{KFD}",
        "")


# ----------------------------------------------------------------------------- the probe (tools/verify_env.py)


probe: ModuleType = load_probe()


def _ctx(root: Path, expect: str | None) -> object:
    (root / "sys/module/amdgpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/amdgpu/initstate").write_text("live\n")
    return probe.Context(root=root, prefix=root / "env", environ={"PATH": ""}, expect_arch=expect,
                         expect_arch_source="--expect-arch")


def test_probe_driver_check_names_both_picks_and_the_target_gpus(tmp_path: Path) -> None:
    out = probe.check_driver(_ctx(kfd_tree(tmp_path, STRIX_HALO, W7900), "gfx1151"))
    assert out.status == "warn"
    assert out.evidence == ("amdgpu loaded; GPUs of 2 targets: GPU 0 gfx1151 (40 CUs), GPU 1 gfx1100 (96 CUs); "
                            "__amdgpu_arch is 11.0.0 (gfx1100) for rattler/pixi (most compute units) and 11.5.1 "
                            "(gfx1151) under the CEP draft (highest ISA)")
    assert out.fix.startswith("export HIP_VISIBLE_DEVICES=0 (the gfx1151 GPUs)")


def test_probe_driver_check_fails_when_the_target_is_none_of_the_gpus(tmp_path: Path) -> None:
    out = probe.check_driver(_ctx(kfd_tree(tmp_path, STRIX_HALO, W7900), "gfx942"))
    assert out.status == "fail"
    assert "gfx1100 x1, gfx1151 x1; the environment is for gfx942 (--expect-arch), which is none of them" \
        in out.evidence
    assert "built for gfx1100" in out.fix
    assert probe.check_driver(_ctx(kfd_tree(tmp_path / "one", MI300X), "gfx942")).status == "ok"


def _torch(archs: list[str]) -> SimpleNamespace:
    props = [SimpleNamespace(gcnArchName=a, name="AMD GPU", major=9, minor=4) for a in archs]
    return SimpleNamespace(__version__="2.12.1", version=SimpleNamespace(hip="7.2.0", cuda=None),
                           cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: len(archs),
                                                get_device_properties=lambda i: props[i],
                                                get_device_name=lambda i: props[i].name,
                                                get_arch_list=lambda: ["gfx942"]))


def test_probe_torch_arch_warns_on_a_mixed_node_and_fails_without_the_target(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "gfx942")
    ctx.facts["torch"] = _torch(["gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-"])
    out = probe.check_torch_arch(ctx)
    assert out.status == "warn" and "torch device(s) 0 only" in out.evidence
    ctx.facts["torch"] = _torch(["gfx950:sramecc+:xnack-", "gfx950:sramecc+:xnack-"])
    assert probe.check_torch_arch(ctx).status == "fail"


def test_a_kfd_value_of_thousands_of_digits_is_no_gpu_not_a_traceback(tmp_path: Path) -> None:
    # A /sys tree under --host-root (or a broken driver) is input rocmlock did not write: int() refuses a run of
    # over 4,300 digits with a ValueError, which reached the user as a traceback from unpack and doctor.
    root = kfd_tree(tmp_path, MI300X)
    for i, value in ((2, "9" * 5000), (3, "9" * 25)):
        (root / KFD / str(i)).mkdir()
        (root / KFD / str(i) / "properties").write_text(f"simd_count {value}\nsimd_per_cu 4\n"
                                                        f"gfx_target_version {value}\n")
    assert read_gpus(root) == (Gpu(0, "gfx942", (9, 4, 2), 304),)
    assert [gfx for gfx, _, _ in probe.kfd_gpus(_ctx(root, "gfx942"))] == ["gfx942"]
    assert probe.check_driver(_ctx(root, "gfx942")).status == "ok"
    assert probe._smi_gpus("rocm-smi", f"GPU[{'1' * 5000}]\nGPU[0] : ok\n") == ["0"]
