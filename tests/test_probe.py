"""The post-install probe (tools/verify_env.py): host checks on faked trees, the real Debian ROCm tools,
the real CPU torch, the JSON report and the registry."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tools" / "verify_env.py"
# compression (compression.zstd) is the standard library's from Python 3.14; zstandard reads zstd before that.
OPTIONAL_IMPORTS = {"torch", "flash_attn", "transformers", "peft", "tokenizers", "llamafactory", "bitsandbytes",
                    "deepspeed", "compression", "zstandard"}


def load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_env_under_test", PROBE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


probe = load_probe()


def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The probe as users run it: its own process, report on stderr, JSON on stdout."""
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, check=False,
                          env=env if env is not None else dict(os.environ), timeout=300)


def ctx_for(root: Path, **kw: object) -> object:
    kw.setdefault("environ", {"PATH": ""})
    return probe.Context(root=root, prefix=kw.pop("prefix", root / "env"), **kw)


def write(path: Path, text: str = "", mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def conda_meta(prefix: Path, name: str, version: str, build: str) -> None:
    write(prefix / "conda-meta" / f"{name}-{version}-{build}.json",
          json.dumps({"name": name, "version": version, "build": build}))


# ----------------------------------------------------------------------------- standalone, registry


def test_probe_imports_only_stdlib_and_optional_ml_packages() -> None:
    tree = ast.parse(PROBE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert "rocmlock" not in imported
    assert imported - set(sys.stdlib_module_names) <= OPTIONAL_IMPORTS


def test_builtin_table_matches_the_gpu_table() -> None:
    from rocmlock.gpu.targets import all_targets

    table = {t.gfx: (t.isa, t.peak_bf16_tflops, t.flash_attn_ck, t.aotriton) for t in all_targets().values()}
    assert probe.TARGETS == table


def test_checks_run_in_order_from_hardware_to_training() -> None:
    ids = [c.id for c in probe.CHECKS]
    assert len(ids) == len(set(ids))
    groups = [i.split(".")[0] for i in ids]
    order = ["host", "tools", "rocm", "env", "torch", "kernels", "compute", "flash_attn", "bench", "train"]
    assert [g for g in order if g in groups] == list(dict.fromkeys(groups))[: len(order)]
    assert {c.id: c.option for c in probe.CHECKS if c.option} == {"bench.gemm": "bench", "train.lora": "train"}


def test_adding_a_check_is_one_function_and_its_exception_is_a_failure(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(probe, "CHECKS", list(probe.CHECKS))

    @probe.check("extra.boom", "a check that raises")
    def _boom(ctx: object) -> object:
        raise ValueError("bad things")

    assert probe.CHECKS[-1].id == "extra.boom"
    assert probe.main(["--only", "extra", "--json"]) == 1
    (result,) = json.loads(capsys.readouterr().out)["checks"]
    assert result["status"] == "fail"
    assert result["evidence"] == "the check raised ValueError: bad things"
    assert "--debug" in result["fix"]


def test_only_that_selects_nothing_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--only", "nosuch"]) == 2
    assert "no check matches --only nosuch" in capsys.readouterr().err


def test_a_prefix_that_does_not_exist_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--prefix", str(tmp_path / "nonexistent"), "--json"]) == 2
    captured = capsys.readouterr()
    assert f"--prefix {tmp_path / 'nonexistent'}: no such directory" in captured.err and captured.out == ""


# ----------------------------------------------------------------------------- host: faked trees


@pytest.mark.parametrize(("value", "gfx"), [(90402, "gfx942"), (90010, "gfx90a"), (90500, "gfx950"),
                                            (110000, "gfx1100"), (110501, "gfx1151"), (120001, "gfx1201")])
def test_kfd_gfx_target_version_to_gfx_name(value: int, gfx: str) -> None:
    assert probe.gfx_from_kfd_version(value) == gfx


def test_driver_missing_is_a_failure_with_the_driver_fix(tmp_path: Path) -> None:
    out = probe.check_driver(ctx_for(tmp_path))
    assert out.status == "fail"
    assert "/sys/module/amdgpu does not exist" in out.evidence
    assert "modprobe amdgpu" in out.fix


def test_nvidia_driver_is_named_not_rocm(tmp_path: Path) -> None:
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    out = probe.check_driver(ctx_for(tmp_path))
    assert out.status == "fail" and "NVIDIA driver is loaded: not ROCm" in out.evidence


def test_driver_loaded_lists_the_kfd_gpus(tmp_path: Path) -> None:
    write(tmp_path / "sys/module/amdgpu/initstate", "live\n")
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    write(nodes / "0/properties", "cpu_cores_count 64\ngfx_target_version 0\n")
    for n in (1, 2):
        write(nodes / f"{n}/properties", "simd_count 304\ngfx_target_version 90402\n")
    out = probe.check_driver(ctx_for(tmp_path))
    assert (out.status, out.evidence) == (
        "ok", "amdgpu loaded; KFD GPUs: gfx942 x2; __amdgpu_arch 9.4.2 from /sys/class/kfd/kfd/topology/nodes")


def test_driver_loaded_without_gpu_nodes_warns(tmp_path: Path) -> None:
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    assert probe.check_driver(ctx_for(tmp_path)).status == "warn"


def test_missing_device_files_in_a_container_name_the_device_flags(tmp_path: Path) -> None:
    write(tmp_path / ".dockerenv")
    out = probe.check_devices(ctx_for(tmp_path))
    assert out.status == "fail"
    assert "missing /dev/kfd and /dev/dri/renderD*; in a container (/.dockerenv)" == out.evidence
    assert "--device=/dev/kfd --device=/dev/dri" in out.fix


def test_missing_device_files_on_a_host_point_at_the_driver(tmp_path: Path) -> None:
    write(tmp_path / "dev/dri/renderD128")
    out = probe.check_devices(ctx_for(tmp_path))
    assert out.evidence == "missing /dev/kfd"
    assert "modprobe amdgpu" in out.fix


@pytest.mark.parametrize(("files", "environ", "why"), [
    ({"run/.containerenv": ""}, {}, "/run/.containerenv"),
    ({"proc/1/cgroup": "0::/kubepods/besteffort/pod1\n"}, {}, "/proc/1/cgroup mentions kubepods"),
    ({}, {"container": "podman"}, "container=podman"),
    ({"proc/1/cgroup": "0::/init.scope\n"}, {}, None),
])
def test_container_detection(tmp_path: Path, files: dict[str, str], environ: dict[str, str], why: str | None) -> None:
    for rel, text in files.items():
        write(tmp_path / rel, text)
    assert probe.in_container(ctx_for(tmp_path, environ=environ)) == why


def gpu_tree(root: Path, mode: int = 0o660, group_line: str = "") -> int:
    """/dev/kfd and one render node owned by this test's gid (named render in the fake /etc/group)."""
    kfd = write(root / "dev/kfd", mode=mode)
    write(root / "dev/dri/renderD128", mode=mode)
    gid = kfd.stat().st_gid
    write(root / "etc/group", f"root:x:0:\nvideo:x:44:\nrender:x:{gid}:{group_line}\nusers:x:100:\n")
    write(root / "etc/passwd", "root:x:0:0::/root:/bin/sh\nalice:x:4242:100::/home/alice:/bin/sh\n")
    return gid


def test_user_outside_the_render_group_is_told_to_join_it(tmp_path: Path) -> None:
    gpu_tree(tmp_path)
    out = probe.check_access(ctx_for(tmp_path, uid=4242, gids=(100,)))
    assert out.status == "fail"
    assert "user alice (uid 4242) in groups users cannot open /dev/kfd (group render, mode 0660)" in out.evidence
    assert out.fix.startswith("sudo usermod -aG render,video alice")


def test_user_in_the_render_group_can_open_the_devices(tmp_path: Path) -> None:
    gid = gpu_tree(tmp_path)
    out = probe.check_access(ctx_for(tmp_path, uid=4242, gids=(100, gid)))
    assert (out.status, out.evidence) == ("ok", "read-write for user alice (uid 4242) in groups render, users")


def test_group_added_but_session_not_renewed_says_log_in_again(tmp_path: Path) -> None:
    gpu_tree(tmp_path, group_line="alice")
    out = probe.check_access(ctx_for(tmp_path, uid=4242, gids=(100,)))
    assert "/etc/group lists alice in render but this session lacks it" in out.evidence
    assert "log out and back in" in out.fix


def test_container_without_group_add_is_told_to_add_the_gid(tmp_path: Path) -> None:
    gpu_tree(tmp_path)
    write(tmp_path / ".dockerenv")
    out = probe.check_access(ctx_for(tmp_path, uid=4242, gids=(100,)))
    assert out.status == "fail" and "--group-add" in out.fix


@pytest.mark.parametrize(("mode", "uid"), [(0o666, 4242), (0o600, 0)])
def test_world_writable_devices_or_root_need_no_group(tmp_path: Path, mode: int, uid: int) -> None:
    gpu_tree(tmp_path, mode=mode)
    assert probe.check_access(ctx_for(tmp_path, uid=uid, gids=(100,))).status == "ok"


def test_host_checks_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "sys/module/amdgpu/initstate", "live")
    write(tmp_path / "sys/class/kfd/kfd/topology/nodes/1/properties", "gfx_target_version 90010\n")
    gpu_tree(tmp_path, mode=0o666)
    assert probe.main(["--root", str(tmp_path), "--only", "host", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [c["status"] for c in report["checks"]] == ["ok", "ok", "ok"]
    assert "PASS: every required check passed" in captured.err


# ----------------------------------------------------------------------------- tools: Debian's real ROCm 5.2


@pytest.fixture
def debian_rocm_tools() -> dict[str, str]:
    for tool in ("rocm-smi", "rocminfo"):
        assert Path(f"/usr/bin/{tool}").exists(), "apt-get install rocm-smi rocminfo hipcc (.ci/run does)"
    return {"PATH": "/usr/bin:/bin"}


def test_rocm_smi_without_the_driver_is_a_failure_although_it_exits_0(
        tmp_path: Path, debian_rocm_tools: dict[str, str]) -> None:
    trap = subprocess.run(["/usr/bin/rocm-smi", "--showproductname"], capture_output=True, check=False)
    assert trap.returncode == 0  # the trap: a healthy exit code on a host without the driver
    out = probe.check_smi(ctx_for(tmp_path, environ=debian_rocm_tools))
    assert out.status == "fail"
    assert out.evidence.startswith("no AMD GPU driver loaded: /usr/bin/rocm-smi says ")
    assert out.evidence.endswith("(exit 0)")
    assert "modprobe amdgpu" in out.fix


def test_rocminfo_rock_module_not_loaded_is_a_failure(tmp_path: Path, debian_rocm_tools: dict[str, str]) -> None:
    out = probe.check_rocminfo(ctx_for(tmp_path, environ=debian_rocm_tools))
    assert out.status == "fail"
    assert "ROCk module is NOT loaded" in out.evidence
    assert "modprobe amdgpu" in out.fix


def fake_tool(root: Path, name: str, output: str, code: int = 0) -> dict[str, str]:
    write(root / "bin" / name, f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n", mode=0o755)
    return {"PATH": f"{root / 'bin'}:/usr/bin:/bin"}  # fakes first; /usr/bin for cat


def test_amd_smi_listing_gpus_is_ok(tmp_path: Path) -> None:
    env = fake_tool(tmp_path, "amd-smi", "GPU: 0\n    BDF: 0000:0c:00.0\nGPU: 1\n    BDF: 0000:22:00.0")
    out = probe.check_smi(ctx_for(tmp_path, environ=env))
    assert (out.status, out.evidence) == ("ok", "amd-smi lists 2 GPU(s)")


def test_smi_that_lists_no_gpu_is_a_failure(tmp_path: Path) -> None:
    env = fake_tool(tmp_path, "rocm-smi", "======= ROCm System Management Interface =======\n=== End of ROCm SMI Log ===")
    assert probe.check_smi(ctx_for(tmp_path, environ=env)).status == "fail"


def test_rocminfo_with_another_gpu_than_the_environment_is_a_failure(tmp_path: Path) -> None:
    env = fake_tool(tmp_path, "rocminfo", "Agent 2\n  Name:                    gfx90a\n  Marketing Name: MI250X")
    out = probe.check_rocminfo(ctx_for(tmp_path, environ=env, expect_arch="gfx942"))
    assert out.status == "fail"
    assert out.evidence == "rocminfo sees gfx90a; this environment is for gfx942"


def test_missing_tools_warn(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, environ={"PATH": str(tmp_path / "nothing")})
    assert probe.check_smi(ctx).status == probe.check_rocminfo(ctx).status == "warn"


# ----------------------------------------------------------------------------- ROCm install


def test_hip_path_unset_and_no_opt_rocm_fails(tmp_path: Path) -> None:
    out = probe.check_rocm_path(ctx_for(tmp_path))
    assert out.status == "fail" and "HIP_PATH and ROCM_PATH are unset" in out.evidence


def test_hip_path_pointing_nowhere_fails(tmp_path: Path) -> None:
    out = probe.check_rocm_path(ctx_for(tmp_path, environ={"HIP_PATH": str(tmp_path / "nowhere")}))
    assert out.status == "fail" and out.evidence == f"HIP_PATH={tmp_path / 'nowhere'} does not exist"


def test_rocm_without_hip_runtime_h_fails(tmp_path: Path) -> None:
    write(tmp_path / "rocm/.info/version", "7.2.0")
    out = probe.check_rocm_path(ctx_for(tmp_path, environ={"ROCM_PATH": str(tmp_path / "rocm")}))
    assert out.status == "fail" and "hip_runtime.h not found" in out.evidence


def test_debian_hip_headers_are_a_rocm_5_2(tmp_path: Path) -> None:
    assert Path("/usr/include/hip/hip_runtime.h").exists(), "apt-get install hipcc (.ci/run does)"
    out = probe.check_rocm_path(ctx_for(tmp_path, environ={"HIP_PATH": "/usr"}))
    assert out.status == "ok" and out.evidence.startswith("HIP_PATH=/usr: ROCm 5.2.")


def test_unset_variables_with_an_opt_rocm_warn(tmp_path: Path) -> None:
    write(tmp_path / "opt/rocm/include/hip/hip_runtime.h")
    write(tmp_path / "opt/rocm/.info/version", "7.2.1-81\n")
    out = probe.check_rocm_path(ctx_for(tmp_path))
    assert out.status == "warn" and "export ROCM_PATH=/opt/rocm HIP_PATH=/opt/rocm" in out.fix
    assert probe.host_rocm(ctx_for(tmp_path)) == (tmp_path / "opt/rocm", "7.2.1")


def test_unset_variables_with_a_distro_rocm_in_usr_warn_without_exporting_usr(tmp_path: Path) -> None:
    # Debian's ROCm 7.2.4 layout (no /opt/rocm, no .info/version; rocm-core's header in /usr/include).
    write(tmp_path / "usr/include/hip/hip_runtime.h")
    write(tmp_path / "usr/include/rocm-core/rocm_version.h",
          "#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 4\n")
    out = probe.check_rocm_path(ctx_for(tmp_path))
    assert out.status == "warn"
    assert out.evidence == ("HIP_PATH and ROCM_PATH are unset; a distribution's ROCm 7.2.4 is in /usr "
                            "(include/rocm-core/rocm_version.h)")
    assert "export" not in out.fix and "HIP_DEVICE_LIB_PATH" in out.fix
    assert probe.host_rocm(ctx_for(tmp_path)) == (tmp_path / "usr", "7.2.4")


def test_rocm_core_header_gives_the_version(tmp_path: Path) -> None:
    write(tmp_path / "include/rocm-core/rocm_version.h",
          "#define ROCM_VERSION_MAJOR 6\n#define ROCM_VERSION_MINOR 4\n#define ROCM_VERSION_PATCH 1\n")
    assert probe.rocm_version(tmp_path) == ("6.4.1", "include/rocm-core/rocm_version.h")


def test_host_rocm_must_match_the_installed_rocm_version_pin(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "env"
    conda_meta(prefix, "rocm-version", "7.2", "0")
    env = {"HIP_PATH": "/usr", "PATH": ""}
    assert probe.main(["--root", str(tmp_path), "--prefix", str(prefix), "--only", "rocm", "--json"], env) == 1
    rocm_path, rocm_ver = json.loads(capsys.readouterr().out)["checks"]
    assert rocm_path["status"] == "ok"
    assert rocm_ver["status"] == "fail"
    assert "the environment is built for ROCm 7.2 (rocm-version package)" in rocm_ver["evidence"]


def test_a_conda_meta_record_that_is_no_json_object_is_skipped(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Valid JSON that is no object (a damaged or hand-edited record) was read with .get(): an AttributeError
    # traceback before any check ran. It is skipped like unreadable JSON; the real record beside it counts.
    prefix = tmp_path / "env"
    write(prefix / "conda-meta" / "rocm-version-7.1-0.json", "[]")  # sorts before the real one
    conda_meta(prefix, "rocm-version", "7.2", "0")
    write(prefix / "conda-meta" / "amdgpu-target-1-gfx942.json", '"amdgpu-target"')
    assert probe.conda_meta_record(prefix, "amdgpu-target") is None
    assert probe.conda_meta_record(prefix, "rocm-version") == {"name": "rocm-version", "version": "7.2", "build": "0"}
    env = {"HIP_PATH": "/usr", "PATH": ""}
    assert probe.main(["--root", str(tmp_path), "--prefix", str(prefix), "--only", "rocm", "--json"], env) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["expected"]["rocm"] == "7.2" and report["expected"]["arch"] is None


# ----------------------------------------------------------------------------- torch: the real CPU build


def test_cpu_torch_is_reported_as_a_cpu_build_with_the_fix() -> None:
    proc = run_probe("--json", "--only", "torch")
    assert proc.returncode == 1
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["torch.import"]["status"] == "ok"
    build = checks["torch.build"]
    assert build["status"] == "fail"
    assert "not ROCm: a CPU build" in build["evidence"]
    assert "pixi install -e ENV" in build["fix"]
    assert checks["torch.gpu"]["status"] == "fail"
    assert checks["torch.arch"]["status"] == checks["torch.arch_list"]["status"] == "skipped"
    assert "FAIL     torch.build" in proc.stderr


def fake_torch(hip: str | None, cuda: str | None, archs: list[str], built: list[str]) -> SimpleNamespace:
    props = [SimpleNamespace(gcnArchName=a, name="AMD Instinct MI300X", major=9, minor=4) for a in archs]
    return SimpleNamespace(
        __version__="2.12.1", version=SimpleNamespace(hip=hip, cuda=cuda),
        cuda=SimpleNamespace(is_available=lambda: bool(archs), device_count=lambda: len(archs),
                             get_device_properties=lambda i: props[i], get_device_name=lambda i: props[i].name,
                             get_arch_list=lambda: built))


def test_cuda_torch_is_not_rocm(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    ctx.facts["torch"] = fake_torch(None, "12.8", ["sm_90"], ["sm_90"])
    out = probe.check_torch_build(ctx)
    assert out.status == "fail" and out.evidence.startswith("not ROCm: a CUDA 12.8 build")
    assert probe.check_torch_arch(ctx).evidence.startswith("not ROCm:")


def test_gpu_of_another_target_than_the_environment_is_a_failure(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    conda_meta(prefix, "amdgpu-target", "1", "gfx942")
    args = probe.build_parser().parse_args(["--prefix", str(prefix)])
    ctx = ctx_for(tmp_path, prefix=prefix)
    probe.resolve_expectations(ctx, args)
    assert (ctx.expect_arch, ctx.expect_arch_source) == ("gfx942", "amdgpu-target package")
    ctx.facts["torch"] = fake_torch("7.2.0", None, ["gfx90a:sramecc+:xnack-"] * 2, ["gfx942"])
    arch = probe.check_torch_arch(ctx)
    assert arch.status == "fail"
    assert arch.evidence == "GPUs: gfx90a x2; the environment is for gfx942 (amdgpu-target package)"
    built = probe.check_torch_arch_list(ctx)
    assert built.status == "fail" and "invalid device function" in built.evidence


def test_matching_target_passes_and_an_hsa_override_warns(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, expect_arch="gfx942", expect_arch_source="--expect-arch")
    ctx.facts["torch"] = fake_torch("7.2.0", None, ["gfx942:sramecc+:xnack-"], ["gfx90a", "gfx942"])
    assert probe.check_torch_arch(ctx).status == probe.check_torch_arch_list(ctx).status == "ok"
    ctx.environ["HSA_OVERRIDE_GFX_VERSION"] = "9.4.2"
    assert probe.check_torch_arch(ctx).status == "warn"


# ----------------------------------------------------------------------------- compute, bench, train on the CPU


def test_compute_checks_run_for_real_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--device", "cpu", "--only", "compute", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert [(c["id"], c["status"]) for c in checks] == [
        ("compute.matmul", "ok"), ("compute.bf16", "ok"), ("compute.sdpa", "ok"), ("compute.sdpa_kernel", "ok")]
    assert all("on cpu" in c["evidence"] for c in checks)


def test_compute_checks_without_a_gpu_are_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--only", "compute", "--json"]) == 0
    assert {c["status"] for c in json.loads(capsys.readouterr().out)["checks"]} == {"skipped"}


def test_bench_warns_below_the_ratio_of_peak(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--device", "cpu", "--bench", "--only", "bench", "--peak-tflops", "1000", "--json"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["checks"]
    assert bench["status"] == "warn"
    assert bench["data"]["tflops"] > 0 and bench["data"]["ratio"] < 0.3
    assert "of 1000 (--peak-tflops)" in bench["evidence"]


def test_train_with_peft_on_the_cpu_lowers_the_loss(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--train", "--train-backend", "peft", "--only", "train", "--json"]
    assert probe.main(argv) == 0
    (train,) = json.loads(capsys.readouterr().out)["checks"]
    losses = train["data"]["losses"]
    assert train["status"] == "ok" and train["data"]["backend"] == "peft"
    assert len(losses) == 30 and losses[-1] < 0.5 * losses[0]


def fake_llamafactory(root: Path, body: str) -> dict[str, str]:
    """A llamafactory-cli stand-in: reads output_dir from the generated config, then runs ``body``."""
    script = (f"#!{sys.executable}\nimport json, sys, pathlib\n"
              "cfg = dict(l.split(': ', 1) for l in open(sys.argv[2]).read().splitlines())\n"
              "out = pathlib.Path(json.loads(cfg['output_dir'])); out.mkdir(parents=True)\n" + body)
    write(root / "bin" / "llamafactory-cli", script, mode=0o755)
    return {**os.environ, "PATH": f"{root / 'bin'}:{os.environ['PATH']}"}


def test_llamafactory_backend_reads_the_trainer_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fake_llamafactory(tmp_path, (
        "assert json.loads(cfg['finetuning_type']) == 'lora' and cfg['max_steps'] == '8'\n"
        "assert pathlib.Path(json.loads(cfg['model_name_or_path']), 'config.json').exists()\n"
        "open(out / 'trainer_log.jsonl', 'w').writelines(json.dumps({'current_steps': i, 'loss': 4.0 / i}) + '\\n'"
        " for i in range(1, 9))\n"))
    argv = ["--device", "cpu", "--train", "--train-backend", "llamafactory", "--train-steps", "8", "--only", "train",
            "--json"]
    assert probe.main(argv, env) == 0
    (train,) = json.loads(capsys.readouterr().out)["checks"]
    assert train["data"]["backend"] == "llamafactory" and train["data"]["losses"][-1] == 0.5


def test_llamafactory_failure_names_the_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fake_llamafactory(tmp_path, (
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print(\"ModuleNotFoundError: No module named 'torchaudio'\", file=sys.stderr); sys.exit(1)\n"))
    argv = ["--device", "cpu", "--train", "--train-backend", "llamafactory", "--only", "train", "--json"]
    assert probe.main(argv, env) == 1
    (train,) = json.loads(capsys.readouterr().out)["checks"]
    assert train["status"] == "fail"
    assert train["evidence"].endswith("exited 1: ModuleNotFoundError: No module named 'torchaudio'")


# ----------------------------------------------------------------------------- flash-attn


def test_flash_attn_not_installed_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    probe.main(["--only", "flash_attn", "--json"])
    (fa,) = json.loads(capsys.readouterr().out)["checks"]
    assert fa["status"] == "skipped" and "not installed" in fa["evidence"]


def test_triton_build_without_its_variable_is_told_to_set_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "flash_attn/__init__.py", "")
    write(tmp_path / "flash_attn/flash_attn_interface.py", "import flash_attn_2_cuda\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flash_attn", "flash_attn.flash_attn_interface"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    out = probe.check_flash_attn(ctx_for(tmp_path, environ={}))
    assert out.status == "fail"
    assert "FLASH_ATTENTION_TRITON_AMD_ENABLE is not set" in out.evidence
    assert "export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE" in out.fix


# ----------------------------------------------------------------------------- the report


def test_json_report_schema_and_exit_code() -> None:
    proc = run_probe("--json")
    report = json.loads(proc.stdout)  # stdout holds the JSON and nothing else
    assert set(report) == {"schema", "probe", "version", "ok", "hostname", "rocm", "failed", "python", "prefix",
                           "expected", "checks"}
    assert (report["schema"], report["probe"], report["version"]) == (1, "rocm-env-check", probe.PROBE_VERSION)
    assert report["hostname"] == socket.gethostname()  # `rocmlock report` names the node by it
    for c in report["checks"]:
        assert set(c) == {"id", "title", "status", "evidence", "fix", "required", "seconds", "data"}
        assert c["status"] in probe.STATUSES and isinstance(c["required"], bool) and c["evidence"]
        if c["status"] == "fail":
            assert c["fix"]
    assert [c["id"] for c in report["checks"]] == [c.id for c in probe.CHECKS if not c.option]
    assert report["failed"] == [c["id"] for c in report["checks"] if c["required"] and c["status"] == "fail"]
    assert report["ok"] is False and proc.returncode == 1  # no GPU, CPU torch
    assert "STATUS   CHECK" in proc.stderr and proc.stderr.rstrip().splitlines()[-1].startswith("FAIL: ")


def test_generated_llamafactory_config_is_accepted_by_llamafactory(tmp_path: Path) -> None:
    """The YAML goes through LLaMA-Factory's own loader (OmegaConf) and argument parser, as `train` does."""
    from llamafactory.hparams import parser
    from omegaconf import OmegaConf

    ctx = ctx_for(tmp_path, device_mode="cpu", train_steps=12)
    config = probe._llamafactory_config(ctx, tmp_path)
    saved = dict(os.environ)  # TrainingArguments sets launch variables while parsing
    try:
        args = OmegaConf.to_container(OmegaConf.load(config))
        model, data, training, finetuning, _ = parser._parse_train_args(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert (model.model_name_or_path, data.dataset, data.template) == (str(tmp_path / "model"), ["probe"], "empty")
    assert (training.max_steps, str(training.save_strategy.value), training.bf16) == (12, "no", False)
    assert finetuning.finetuning_type == "lora" and "lm_head" in finetuning.lora_target


def test_triton_needs_a_c_compiler_at_run_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 13, finding 9: Triton compiles its launcher with $CC, gcc or clang at the first kernel launch
    # (triton/runtime/build.py). A stand-in triton package makes the check apply.
    ctx = ctx_for(tmp_path, environ={"PATH": str(tmp_path / "bin")})
    if not probe._importable("triton"):
        assert probe.check_triton_cc(ctx).status == "skipped"
        write(tmp_path / "site/triton/__init__.py")
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
    out = probe.check_triton_cc(ctx)
    assert out.status == "warn" and "Failed to find C compiler" in out.evidence
    write(tmp_path / "bin/gcc", "#!/bin/sh\n", mode=0o755)
    out = probe.check_triton_cc(ctx)
    assert out.status == "ok" and out.evidence == f"gcc at {tmp_path / 'bin/gcc'}"
    out = probe.check_triton_cc(ctx_for(tmp_path, environ={"PATH": str(tmp_path / "bin"), "CC": "icx"}))
    assert out.status == "warn" and out.evidence.startswith("CC=icx is not an executable on PATH")


def test_a_fake_root_names_its_node_by_its_etc_hostname(tmp_path: Path) -> None:
    write(tmp_path / "etc/hostname", "gpu-node-07\n")
    assert probe.node_name(ctx_for(tmp_path)) == "gpu-node-07"
    assert probe.node_name(ctx_for(tmp_path / "nothing")) == socket.gethostname()


def test_the_probes_aotriton_experimental_targets_are_the_gpu_tables() -> None:
    from rocmlock.gpu.targets import all_targets, aotriton_release

    for release, targets in probe.AOTRITON_EXPERIMENTAL.items():
        table = {t.gfx for t in all_targets().values() if t.aotriton_tier(release) == "experimental"}
        assert targets == table and table, release
    # Every release the GPU table records from the pinned one on, and the pinned one for its PyTorch series.
    assert {"0.11.2b", "0.12b", "0.13b"} <= set(probe.AOTRITON_EXPERIMENTAL)
    aot = tomllib.loads(resources.files("rocmlock").joinpath("data/aotriton.toml").read_text())
    assert aot["version"] == aotriton_release()
    assert {probe.AOTRITON_OF_TORCH[series] for series in aot["pytorch"]} == {aot["version"]}
    assert probe.AOTRITON_OF_TORCH == aot["pytorch_releases"]
    # AOTriton 0.12b took gfx1151 out of the experimental tier; gfx1100 is supported in every listed release.
    assert "gfx1151" in probe.AOTRITON_EXPERIMENTAL["0.11.2b"] and "gfx1151" not in probe.AOTRITON_EXPERIMENTAL["0.12b"]
    assert not any("gfx1100" in targets for targets in probe.AOTRITON_EXPERIMENTAL.values())


@pytest.mark.parametrize(("version", "release"), [
    ("2.12.1", "0.11.2b"), ("2.12.0+rocm7.14.0", "0.11.2b"), ("2.13.0", "0.12b"), ("2.14.1+rocm7.14", "0.12b"),
    ("2.11.0", None), ("nonsense", None),
])
def test_the_aotriton_release_of_a_torch(version: str, release: str | None) -> None:
    assert probe.aotriton_of_torch(version) == release


@pytest.mark.parametrize(("archs", "value", "expected"), [
    (["gfx942:sramecc+:xnack-"], None, ""),
    (["gfx1151"], None, ("; AOTriton 0.11.2b classes gfx1151 experimental and TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL "
                         "is not 1: SDPA ran the math kernel")),
    (["gfx1101"], "true", "is not 1: SDPA ran the math kernel"),  # PyTorch's check_env takes "1"
    (["gfx1151"], "1", ("; AOTriton 0.11.2b classes gfx1151 experimental, TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1: "
                        "AOTriton's kernels ran and are checked above")),
])
def test_the_sdpa_check_names_an_experimental_aotriton_tier(tmp_path: Path, archs: list[str], value: str | None,
                                                            expected: str) -> None:
    ctx = ctx_for(tmp_path)
    ctx.facts["torch"] = fake_torch("7.2.0", None, archs, ["gfx942", "gfx1101", "gfx1151"])
    if value is not None:
        ctx.environ["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"] = value
    note = probe._aotriton_tier(ctx)
    assert note.startswith(expected) if expected.startswith(";") else expected in note
    assert bool(note) == bool(expected)


@pytest.mark.parametrize(("torch_version", "arch", "expected"), [
    ("2.13.0", "gfx1151", ""),  # AOTriton 0.12b: supported, the fused SDPA serves it
    ("2.14.1+rocm7.14", "gfx1151", ""),
    ("2.14.1+rocm7.14", "gfx1100", ""),
    ("2.14.1+rocm7.14", "gfx1150", "; AOTriton 0.12b classes gfx1150 experimental and TORCH_ROCM_AOTRITON_ENABLE_"),
    ("2.12.1", "gfx1200", "; AOTriton 0.11.2b classes gfx1200 experimental and TORCH_ROCM_AOTRITON_ENABLE_"),
])
def test_the_tier_follows_the_aotriton_release_of_the_installed_torch(tmp_path: Path, torch_version: str, arch: str,
                                                                      expected: str) -> None:
    ctx = ctx_for(tmp_path)
    ctx.facts["torch"] = fake_torch("7.2.0", None, [arch], [arch])
    ctx.facts["torch"].__version__ = torch_version
    note = probe._aotriton_tier(ctx)
    assert note.startswith(expected) and bool(note) == bool(expected)


def test_wrong_experimental_aotriton_kernels_fail_the_sdpa_check_with_the_way_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDPA check's comparison runs for real (on the CPU); SDPA itself returns NaNs, as AOTriton's experimental
    # gfx1100 kernels did (ROCm/aotriton#123), on a GPU the tier note says ran them with the variable set.
    import torch

    ctx = ctx_for(tmp_path, device_mode="cpu", environ={"PATH": "", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"})
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, is_causal: (q + k + v) * float("nan"))
    monkeypatch.setattr(probe, "_aotriton_tier", lambda ctx: "; AOTriton 0.11.2b classes gfx1151 experimental")
    out = probe.check_sdpa(ctx)
    assert out.status == "fail" and out.evidence.endswith("; AOTriton 0.11.2b classes gfx1151 experimental")
    assert out.fix.startswith("AOTriton's experimental kernels are wrong here: unset TORCH_ROCM_AOTRITON_ENABLE_")
    ctx.environ.pop("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL")  # then the math kernel ran: a different fault
    assert probe.check_sdpa(ctx).fix.startswith("the attention kernels (AOTriton) are wrong")


def test_the_probes_aotriton_known_issues_are_rocmlocks() -> None:
    # The probe is standalone (stdlib only), so it keeps a copy of rocmlock's table of known AOTriton defects.
    from rocmlock.gpu.targets import AOTRITON_KNOWN_ISSUES

    assert probe.AOTRITON_KNOWN_ISSUES == AOTRITON_KNOWN_ISSUES
    assert "ROCm/TheRock#7696" in probe.AOTRITON_KNOWN_ISSUES[("0.13b", "gfx950")]


def _torch_with_aotriton(tmp_path: Path, archs: list[str], *sonames: str) -> SimpleNamespace:
    torch = fake_torch("7.14.0", None, archs, [gfx.split(":")[0] for gfx in archs])
    torch.__version__ = "2.15.0+rocm7.14"
    for name in sonames:
        write(tmp_path / "site" / "torch" / "lib" / name)
    torch.__file__ = str(tmp_path / "site" / "torch" / "__init__.py")
    return torch


@pytest.mark.parametrize(("archs", "sonames", "expected"), [
    # What torch really ships decides, read from the library's name (2.15 nightlies ship libaotriton_v2.so.0.13.0).
    (["gfx950:sramecc+:xnack-"], ["libaotriton_v2.so", "libaotriton_v2.so.0.13.0"],
     "; gfx950 with AOTriton 0.13b (torch/lib/libaotriton_v2.so.0.13.0): its flash-attention backward on gfx950"),
    (["gfx950"], ["libaotriton_v2.so.0.11.2"], ""),  # 0.11.2b: the release the issue compares against
    (["gfx950"], ["libaotriton_v2.so.0.14.2"], ""),
    (["gfx950"], [], ""),  # no bundled AOTriton: nothing is claimed
    (["gfx942:sramecc+:xnack-"], ["libaotriton_v2.so.0.13.0"], ""),  # 0.13b on MI300X: no known issue
])
def test_the_sdpa_check_names_the_gfx950_aotriton_013b_regression(tmp_path: Path, archs: list[str],
                                                                   sonames: list[str], expected: str) -> None:
    ctx = ctx_for(tmp_path)
    ctx.facts["torch"] = _torch_with_aotriton(tmp_path, archs, *sonames)
    note = probe._aotriton_issue(ctx)
    assert note.startswith(expected) and bool(note) == bool(expected), note
    if expected:
        assert "9-25 % lower training throughput (ROCm/TheRock#7696)" in note


def test_a_correct_sdpa_on_a_regressed_aotriton_is_a_warning_with_the_way_around(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The comparison runs for real on the CPU; the GPU and its AOTriton are what the note above says.
    ctx = ctx_for(tmp_path, device_mode="cpu")
    issue = "; gfx950 with AOTriton 0.13b (torch/lib/libaotriton_v2.so.0.13.0): its flash-attention backward ..."
    monkeypatch.setattr(probe, "_aotriton_issue", lambda ctx: issue)
    out = probe.check_sdpa(ctx)
    assert out.status == "warn" and out.evidence.endswith(issue)
    assert "flash_attn: fa2" in out.fix and "AOTriton 0.11.2b" in out.fix
    monkeypatch.setattr(probe, "_aotriton_issue", lambda ctx: "")
    assert probe.check_sdpa(ctx).status == "ok"


def test_strings_from_the_prefix_reach_the_table_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An amdgpu-target build and a rocm-version version come from the prefix's conda-meta, which the probe did not
    write: an escape sequence or a newline there cleared the screen and forged a PASS line in the table."""
    prefix = tmp_path / "env"
    conda_meta(prefix, "amdgpu-target", "1", "gfx942\x1b[2J\x1b[H\nPASS: every required check passed")
    conda_meta(prefix, "rocm-version", "7.2\x1b[32mGREEN\rX", "0")
    env = {"HIP_PATH": "/usr", "PATH": ""}
    probe.main(["--root", str(tmp_path), "--prefix", str(prefix), "--only", "rocm"], env)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out, out
    assert not any(line.startswith("PASS") for line in out.splitlines()), out
    assert "expected target: gfx942\\x1b[2j" in out and "7.2\\x1b[32mGREEN\\rX" in out, out
