"""rocmlock doctor against Debian's real ROCm 5.2 hipcc (installed by .ci/run), plus a described host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from rocmlock.gpu.targets import get_target
from rocmlock.host import doctor, doctor_toolchain
from rocmlock.host import rocm as rocm_host
from rocmlock.host.doctor import Resources, max_jobs_for, run_doctor
from rocmlock.host.rocm import Host

GIB = 1024**3
PLENTY = Resources(cores=64, memory_bytes=512 * GIB, free_disk_bytes=500 * GIB)
WORKSPACE = """
[workspace]
name = "doctor-test"
channels = ["./channel"]
platforms = ["linux-64"]

[dependencies]
rocm-version = "{rocm}.*"

[feature.gfx90a.dependencies]
amdgpu-target = {{ version = "*", build = "gfx90a" }}

[feature.gfx942.dependencies]
amdgpu-target = {{ version = "*", build = "gfx942" }}

[environments]
mi250 = ["gfx90a"]
mi300x = ["gfx942"]
"""


def _hipcc() -> str:
    found = shutil.which("hipcc")
    assert found, "Debian's hipcc is required (apt-get install hipcc; .ci/run installs it)"
    return found


@pytest.fixture
def debian_rocm(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Debian's ROCm prefix (where hip_runtime.h lives), exported the way doctor's fix says."""
    prefix = Path(_hipcc()).resolve().parent.parent
    assert (prefix / "include/hip/hip_runtime.h").is_file()
    monkeypatch.setenv("HIP_PATH", str(prefix))
    monkeypatch.setenv("ROCM_PATH", str(prefix))
    monkeypatch.setenv("HIP_PLATFORM", "amd")
    return prefix


def _workspace(tmp_path: Path, rocm: str = "5.2") -> Path:
    path = tmp_path / "pixi.toml"
    path.write_text(WORKSPACE.format(rocm=rocm))
    return path


def _doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, dict[str, str]]]:
    code = main(["doctor", "--json", *argv])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]}


def test_real_hipcc_rejects_gfx942_as_too_old(tmp_path: Path, debian_rocm: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = _doctor_json(capsys, "--build", "-e", "mi300x", "--manifest-path", str(_workspace(tmp_path)))
    assert code == 1
    check = checks["offload-arch:gfx942"]
    assert check["status"] == "fail"
    assert "toolchain too old for gfx942, needs ROCm >= 6.0" in check["message"]
    assert "found ROCm 5.2" in check["message"]
    assert "ROCm >= 6.0" in check["fix"]
    assert checks["rocm-version"]["status"] == "ok"
    assert checks["hip-path"]["status"] == "ok"


def test_real_hipcc_compiles_gfx90a(tmp_path: Path, debian_rocm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = _doctor_json(capsys, "--build", "-e", "mi250", "--manifest-path", str(_workspace(tmp_path)))
    assert checks["offload-arch:gfx90a"]["status"] == "ok", checks["offload-arch:gfx90a"]
    assert "offload-arch:gfx942" not in checks
    assert checks["compiler"]["status"] == "ok" and "hipcc" in checks["compiler"]["message"]
    # With enough disk nothing else can fail here; warnings (ccache, jobs, no GPU) do not fail the doctor.
    failed = [c for c in checks.values() if c["status"] == "fail"]
    assert code == (1 if failed else 0)
    assert all(c["name"] == "disk" for c in failed)


def test_gfx90a_host_passes_with_resources(debian_rocm: Path) -> None:
    report = run_doctor([get_target("gfx90a")], build=True, rocm_wanted=("5.2",), resources=PLENTY)
    assert report.ok, report.failures
    assert report.max_jobs == 64
    assert report.rocm_version == "5.2"


def _fake_nvcc(tmp_path: Path) -> Path:
    bindir = tmp_path / "cuda-bin"
    bindir.mkdir()
    nvcc = bindir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho \"nvcc fatal   : Unknown option '$1'\" >&2\nexit 1\n")
    nvcc.chmod(0o755)
    return bindir


def test_hip_platform_trap_is_real_and_reported(tmp_path: Path, debian_rocm: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{_fake_nvcc(tmp_path)}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("HIP_PLATFORM")
    # The trap itself: Debian's hipcc hands the compile to nvcc when it sees one and HIP_PLATFORM is unset.
    src = tmp_path / "k.hip"
    src.write_text(doctor_toolchain.KERNEL)
    proc = subprocess.run([_hipcc(), "--offload-arch=gfx90a", "-c", str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, env=dict(os.environ), check=False)
    assert proc.returncode != 0 and "nvcc" in proc.stderr
    report = run_doctor([get_target("gfx90a")], build=True, resources=PLENTY)
    checks = {c.name: c for c in report.checks}
    assert checks["hip-platform"].status == "fail"
    assert "nvcc is on PATH" in checks["hip-platform"].message
    assert checks["hip-platform"].fix == "export HIP_PLATFORM=amd"
    # The per-target compile is judged as the fixed environment would run it.
    assert checks["offload-arch:gfx90a"].status == "ok"
    monkeypatch.setenv("HIP_PLATFORM", "amd")
    assert {c.name: c for c in run_doctor([], resources=PLENTY).checks}["hip-platform"].status == "ok"


def test_distro_rocm_in_usr_needs_no_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian's ROCm lives in /usr, where the compiler and CMake look anyway: unset variables are fine there,
    # and doctor does not advise exporting ROCM_PATH=/usr (which breaks ROCm 7's hipcc, tests/test_rocm72_doctor.py).
    prefix = Path(_hipcc()).resolve().parent.parent
    assert prefix == rocm_host.DISTRO_ROCM
    monkeypatch.setattr(rocm_host, "DEFAULT_ROCM", tmp_path / "no-opt-rocm")
    report = run_doctor([get_target("gfx90a")], build=True, resources=PLENTY)
    checks = {c.name: c for c in report.checks}
    assert checks["hip-path"].status == "ok", checks["hip-path"]
    assert "distribution's ROCm in /usr" in checks["hip-path"].message
    assert checks["device-libs"].status == "ok" and "links /usr/lib/x86_64-linux-gnu/amdgcn/bitcode" in \
        checks["device-libs"].message
    assert checks["offload-arch:gfx90a"].status == "ok", checks["offload-arch:gfx90a"]


def test_rocm_elsewhere_gets_the_exports_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ROCm in a non-default prefix that only hipconfig knows; its device libraries under lib/llvm (ROCm 5 layout).
    root = _fake_rocm(tmp_path, "7.2.0", 0)
    shutil.rmtree(root / "amdgcn")
    (root / "lib/llvm/amdgcn/bitcode").mkdir(parents=True)
    (root / "lib/llvm/amdgcn/bitcode/ocml.bc").write_text("")
    hipconfig = root / "bin/hipconfig"
    hipconfig.write_text(f"#!/bin/sh\n[ \"$1\" = --path ] && echo {root}\nexit 0\n")
    hipconfig.chmod(0o755)
    monkeypatch.setattr(rocm_host, "DEFAULT_ROCM", tmp_path / "no-opt-rocm")
    monkeypatch.setattr(rocm_host, "DISTRO_ROCM", tmp_path / "no-usr")
    host = Host(env={"PATH": str(root / "bin")}, kfd=tmp_path / "kfd")
    report = run_doctor([], build=True, host=host, resources=PLENTY)
    check = report.checks[0]
    assert check.name == "hip-path" and check.status == "fail"
    assert "hip_runtime.h not found" in check.message
    assert check.fix == (f"export HIP_PATH={root} ROCM_PATH={root} "
                         f"HIP_DEVICE_LIB_PATH={root}/lib/llvm/amdgcn/bitcode")
    # Without --build it is only a warning (a workstation's activation script sets the variables).
    assert run_doctor([], host=host).checks[0].status == "warn"


def test_hip_path_without_header_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HIP_PATH", str(tmp_path / "opt-rocm-7.2"))
    code, checks = _doctor_json(capsys, "--manifest-path", str(_workspace(tmp_path)))
    assert code == 1
    assert checks["hip-path"]["status"] == "fail"
    assert "does not hold include/hip/hip_runtime.h" in checks["hip-path"]["message"]


def _fake_rocm(tmp_path: Path, version: str, compiler_rc: int) -> Path:
    root = tmp_path / f"rocm-{version}"
    (root / "include/hip").mkdir(parents=True)
    (root / "include/hip/hip_runtime.h").write_text("")
    (root / ".info").mkdir()
    (root / ".info/version").write_text(f"{version}-48\n")
    (root / "amdgcn/bitcode").mkdir(parents=True)
    (root / "amdgcn/bitcode/ocml.bc").write_text("")
    (root / "bin").mkdir()
    hipcc = root / "bin/hipcc"
    hipcc.write_text(f"#!/bin/sh\necho \"$@\" >> {root}/calls\n"
                     f"[ \"$1\" = --version ] && echo 'HIP version: {version}' && exit 0\nexit {compiler_rc}\n")
    hipcc.chmod(0o755)
    return root


def test_described_rocm7_host_reads_info_version_and_compiles_each_target(tmp_path: Path) -> None:
    root = _fake_rocm(tmp_path, "7.2.0", 0)
    host = Host(env={"PATH": "/usr/bin:/bin", "ROCM_PATH": str(root), "HIP_PLATFORM": "amd"},
                which=lambda name, path: None, kfd=tmp_path / "kfd")
    report = run_doctor([get_target("gfx942"), get_target("gfx950")], build=True, rocm_wanted=("7.2",),
                        host=host, resources=PLENTY)
    assert report.ok, report.failures
    assert report.rocm_version == "7.2.0" and report.compiler == str(root / "bin/hipcc")
    calls = (root / "calls").read_text()
    assert "--offload-arch=gfx942" in calls and "--offload-arch=gfx950" in calls


def test_a_version_file_with_an_escape_sequence_is_no_version_and_nothing_reaches_the_terminal(
        tmp_path: Path) -> None:
    # The host's files and environment are not rocmlock's: .info/version's "7.2.0<ESC>[2J..." passed as 7.2 and
    # cleared the terminal, and a ROCM_PATH with an escape sequence was printed as it is (a break-it pass).
    from rocmlock.host.doctor_report import render_report

    root = _fake_rocm(tmp_path, "7.2.0", 0)
    (root / ".info/version").write_text("7.2.0\x1b[2J\x1b[31mEVIL-48\n")
    evil = tmp_path / "rocm\x1b[31m"
    root.rename(evil)
    host = Host(env={"PATH": "", "ROCM_PATH": str(evil), "HIP_PATH": str(evil)}, which=lambda name, path: None,
                kfd=tmp_path / "kfd")
    report = run_doctor([], build=True, rocm_wanted=("7.2",), host=host, resources=PLENTY)
    assert report.rocm_version != "7.2.0\x1b[2J\x1b[31mEVIL"
    text = render_report(report)
    assert "\x1b" not in text and "\\x1b" in text, text
    assert rocm_host.VERSION_TEXT.fullmatch("7.14.0rc20260930") and rocm_host.VERSION_TEXT.fullmatch("7.2.1")


def test_rocm_version_mismatch_with_the_plan_fails_build(tmp_path: Path) -> None:
    root = _fake_rocm(tmp_path, "6.4.1", 0)
    host = Host(env={"PATH": "", "ROCM_PATH": str(root)}, which=lambda name, path: None)
    checks = {c.name: c for c in run_doctor([], build=True, rocm_wanted=("7.2",), host=host,
                                            resources=PLENTY).checks}
    assert checks["rocm-version"].status == "fail"
    assert "rocm-version 7.2" in checks["rocm-version"].message


def test_no_compiler_fails_every_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rocm_host, "DISTRO_ROCM", tmp_path / "no-usr")  # this host's /usr has Debian's ROCm
    host = Host(env={"PATH": str(tmp_path)}, which=lambda name, path: None)
    checks = {c.name: c for c in run_doctor([get_target("gfx90a")], build=True, host=host,
                                            resources=PLENTY).checks}
    assert checks["compiler"].status == "fail"
    assert checks["offload-arch:gfx90a"].status == "fail"


def test_max_jobs_from_memory_and_cores() -> None:
    assert max_jobs_for(Resources(64, 256 * GIB, 0), {}) == 51
    assert max_jobs_for(Resources(8, 256 * GIB, 0), {}) == 8
    assert max_jobs_for(Resources(2, 3 * GIB, 0), {}) == 1
    assert max_jobs_for(Resources(64, 256 * GIB, 0), {"MAX_JOBS": "12"}) == 12


@pytest.mark.parametrize("value", ["0", "abc", "-1", "012", "1000", " 4", "4\n"])
def test_a_max_jobs_that_is_no_job_count_is_warned_of_and_the_build_computes_one(value: str, tmp_path: Path) -> None:
    """doctor said "MAX_JOBS=2 from 2 cores" for MAX_JOBS=0 while the recipes' rocmlock_max_jobs exported the 0 to
    ninja and setup.py. Both now read only 1-999, and agree on what the build uses."""
    from rocmlock.host.doctor import check_jobs

    resources = Resources(8, 64 * GIB, 0)
    check, jobs = check_jobs(resources, {"MAX_JOBS": value})
    assert check.status == "warn" and "is not a positive whole number" in check.message and jobs == 8
    env_sh = Path(__file__).resolve().parents[1] / "recipes/rocm-build-env.sh"
    script = f'. "{env_sh}"\nrocmlock_max_jobs\nprintf %s "$MAX_JOBS"'
    run = subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "MAX_JOBS": value},
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.isdigit() and int(run.stdout) >= 1, (run.stdout, run.stderr)
    assert "is not a positive whole number" in run.stderr
    good = subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "MAX_JOBS": "12"},
                          capture_output=True, text=True, check=False)
    assert good.stdout == "12" and max_jobs_for(resources, {"MAX_JOBS": "12"}) == 12


def test_low_disk_fails(debian_rocm: Path) -> None:
    report = run_doctor([], build=True, resources=Resources(64, 512 * GIB, 5 * GIB))
    assert [c.name for c in report.failures] == ["disk"]


def test_without_a_workspace_targets_come_from_flags(tmp_path: Path, debian_rocm: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no pixi.toml here
    code, checks = _doctor_json(capsys, "--build", "--target", "gfx90a", "--target", "gfx1201")
    assert checks["offload-arch:gfx90a"]["status"] == "ok"
    assert "toolchain too old for gfx1201, needs ROCm >= 6.4" in checks["offload-arch:gfx1201"]["message"]
    assert code == 1
    assert main(["doctor", "--target", "gfx9999"]) == 2


def test_rocm_components_of_the_packages_to_build(tmp_path: Path) -> None:
    # bitsandbytes compiles against hipBLAS, hipBLASLt, hipRAND, rocBLAS, hipCUB, rocPRIM from the host ROCm
    # (tools/rocmlock/data/rocm_components.toml): a ROCm without hipCUB fails before any build, naming it.
    root = _fake_rocm(tmp_path, "7.2.0", 0)
    headers = ("hipblas/hipblas.h", "hipblaslt/hipblaslt.h", "hiprand/hiprand.h", "rocblas/rocblas.h",
               "rocprim/rocprim.hpp")
    for header in headers:
        (root / "include" / header).parent.mkdir(parents=True, exist_ok=True)
        (root / "include" / header).write_text("")
    host = Host(env={"PATH": "", "ROCM_PATH": str(root)}, which=lambda name, path: None, kfd=tmp_path / "kfd")

    def components(packages: tuple[str, ...] | None) -> doctor.Check:
        checks = run_doctor([], build=True, host=host, resources=PLENTY, packages=packages).checks
        return {c.name: c for c in checks}["rocm-components"]

    check = components(("bitsandbytes",))
    assert check.status == "fail"
    assert check.message == f"missing under {root}/include: bitsandbytes needs hipCUB"
    assert check.fix == "apt-get install libhipcub-dev (Debian/Ubuntu), or AMD's hipcub-dev"
    # Without a workspace doctor does not know what will be built: a warning.
    assert components(None).status == "warn"
    (root / "include/hipcub").mkdir()
    (root / "include/hipcub/hipcub.hpp").write_text("")
    check = components(("bitsandbytes",))
    assert check.status == "ok" and check.message == (
        f"bitsandbytes: hipBLAS, hipBLASLt, hipRAND, rocBLAS, hipCUB, rocPRIM found under {root}/include")
    # Packages with nothing listed add no check.
    assert "rocm-components" not in {c.name for c in run_doctor([], build=True, host=host, resources=PLENTY,
                                                                  packages=("triton",)).checks}


# Every row of tools/rocmlock/data/rocm_components.toml (each cited there from upstream build files or a real build).
@pytest.mark.parametrize("package", sorted(rocm_host.component_table()))
def test_doctor_names_each_missing_component_of_every_row(tmp_path: Path, package: str) -> None:
    root = _fake_rocm(tmp_path, "7.2.0", 0)
    host = Host(env={"PATH": "", "ROCM_PATH": str(root)}, which=lambda name, path: None, kfd=tmp_path / "kfd")
    components = rocm_host.component_table()[package]
    assert components, f"{package}: an empty row"
    checks = {c.name: c for c in run_doctor([], build=True, host=host, resources=PLENTY, packages=(package,)).checks}
    check = checks["rocm-components"]
    assert check.status == "fail"
    assert check.message.startswith(f"missing under {root}/include: {package} needs ")
    assert check.message == f"missing under {root}/include: {package} needs {', '.join(c.name for c in components)}"
    assert check.fix == (f"apt-get install {' '.join(sorted({c.debian for c in components}))} (Debian/Ubuntu), "
                         f"or AMD's {' '.join(sorted({c.amd for c in components}))}")
    # All but the last present: only the last is named.
    for comp in components[:-1]:
        (root / "include" / comp.header).parent.mkdir(parents=True, exist_ok=True)
        (root / "include" / comp.header).write_text("")
    check = {c.name: c for c in run_doctor([], build=True, host=host, resources=PLENTY, packages=(package,)).checks}[
        "rocm-components"]
    assert check.message == f"missing under {root}/include: {package} needs {components[-1].name}"


def test_workspace_packages_are_the_environments_direct_dependencies(tmp_path: Path) -> None:
    from rocmlock.host.doctor import workspace_packages
    from rocmlock.workspace.manifest import load_workspace

    path = _workspace(tmp_path, "7.2")
    path.write_text(path.read_text().replace("[environments]", '[feature.qlora.dependencies]\nbitsandbytes = "*"\n\n'
                                             "[environments]\nmi300x-qlora = [\"gfx942\", \"qlora\"]"))
    ws = load_workspace(path)
    assert workspace_packages(ws, ["mi300x-qlora"]) == ("bitsandbytes",)
    assert workspace_packages(ws, ["mi300x"]) == ()


def test_flash_attn_components_only_where_its_ck_extension_is_built(tmp_path: Path) -> None:
    # flash-attn's CK extension includes torch's HIP headers (hipBLAS, hipBLASLt, hipSPARSE, hipSOLVER from the host
    # ROCm: rocm_components.toml); its Triton backend (gfx1100: flash_attn_ck = false) compiles nothing.
    from rocmlock.host.doctor import workspace_packages
    from rocmlock.workspace.manifest import load_workspace

    path = _workspace(tmp_path, "7.2")
    path.write_text(path.read_text().replace("[environments]", (
        '[feature.gfx1100.dependencies]\namdgpu-target = { version = "*", build = "gfx1100" }\n\n'
        '[feature.fa.dependencies]\nflash-attn = "*"\ntorchvision = "*"\n\n'
        '[environments]\nmi300x-fa = ["gfx942", "fa"]\nw7900-fa = ["gfx1100", "fa"]')))
    ws = load_workspace(path)
    assert workspace_packages(ws, ["mi300x-fa"]) == ("torchvision", "flash-attn")
    assert workspace_packages(ws, ["w7900-fa"]) == ("torchvision",)
    assert workspace_packages(ws, ["w7900-fa", "mi300x-fa"]) == ("torchvision", "flash-attn")
