"""Unusual but legitimate ROCm layouts and settings, in the Debian ROCm 7.2.4 chroot (tests/rocm72/make-chroot.sh):
a ROCM_PATH, HIP_PATH or HIP_DEVICE_LIB_PATH that names nothing, HIP_PATH and ROCM_PATH naming two installs, /opt/rocm
beside an explicit ROCM_PATH, a dangling /opt/rocm, a path with a space, two clang resource directories, the ways
AMD's .info/version is written, and a ROCm whose version nothing says. Each case runs the rocm-version activation,
the recipes' rocm-build-env.sh and `rocmlock doctor` on the same host, and asks that all three agree, say what is
wrong in one line, and never export a path that does not hold ROCm.

Each layout is a directory of the test's own bound on /opt (rocm72chroot.run(opt=...)): a copy of the chroot's AMD
view (symlinks into its /usr) changed as the case needs; the chroot itself is only read.
Cost: about 1 s per shell or doctor run, 3 s per compile; ~45 s for the module.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import rocm72chroot

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DEBIAN_LIBS = "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"
KERNEL = "#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
SHOW = 'echo "ROCM_PATH=${ROCM_PATH-unset} HIP_PATH=${HIP_PATH-unset} HIP_DEVICE_LIB_PATH=${HIP_DEVICE_LIB_PATH-unset}"'
COMPILE = "HIP_PLATFORM=amd hipcc --offload-arch=gfx942 -c /mnt/work/k.hip -o /tmp/k.o && echo compiled"
# Activation in a subshell (it must not change what the build script sees), then the build script in bash as
# build.sh runs it; each part's stderr goes to stdout between markers so the test can tell whose line it is.
ACTIVATE_THEN_BUILD = f"""( . /mnt/work/activate-7.2.sh 2>&1; echo "act-rc=$?"; {SHOW} ) | sed 's/^/act: /'
bash -c 'set -euo pipefail; . /mnt/work/rocm-build-env.sh; rocmlock_rocm_env 2>&1; {SHOW}' 2>&1 | sed 's/^/build: /'
"""
BUILD_VARS = {"ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": "gfx942"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/mnt/work: the kernel, the build script, the activation for 7.2, and a PATH without hipconfig."""
    rocm72chroot.require_chroot()
    work = tmp_path_factory.mktemp("work")
    (work / "k.hip").write_text(KERNEL)
    shutil.copy(RECIPES / "rocm-build-env.sh", work / "rocm-build-env.sh")
    (work / "activate-7.2.sh").write_text(
        (RECIPES / "rocm-version/activate.sh").read_text().replace("@ROCM_VERSION@", "7.2"))
    (work / "bin").mkdir()
    for name in os.listdir(rocm72chroot.CHROOT / "usr/bin"):
        if name != "hipconfig":
            (work / "bin" / name).symlink_to(f"/usr/bin/{name}")
    return work


def _opt(tmp_path: Path) -> Path:
    opt = tmp_path / "opt"
    opt.mkdir()
    return opt


def _split(out: str) -> tuple[list[str], list[str]]:
    act = [line[5:] for line in out.splitlines() if line.startswith("act: ")]
    build = [line[7:] for line in out.splitlines() if line.startswith("build: ")]
    return act, build


def _activate_and_build(env: dict[str, str], work: Path, opt: Path | None = None,
                        amd: bool = False) -> tuple[list[str], list[str]]:
    proc = rocm72chroot.run(["sh", "-c", ACTIVATE_THEN_BUILD], env={**env, **BUILD_VARS}, work=work, opt=opt,
                            amd_layout=amd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return _split(proc.stdout)


def _doctor(env: dict[str, str], opt: Path | None = None, amd: bool = False,
            build: bool = True) -> tuple[int, dict[str, Any], dict[str, dict[str, str]]]:
    argv = ["/venv/bin/rocmlock", "doctor", "--json", *(["--build", "--target", "gfx942"] if build else [])]
    proc = rocm72chroot.run(argv, env=env, opt=opt, amd_layout=amd)
    assert proc.stdout.strip(), proc.stderr
    report = json.loads(proc.stdout)
    return proc.returncode, report, {c["name"]: c for c in report["checks"]}


# ----------------------------------------------------------------------------- a variable that names nothing

BAD = {
    # variable set: (environment, the one line activation says, the one line the build dies with)
    "rocm-path-missing": (
        {"ROCM_PATH": "/opt/rocm-7.2.9"},
        ("rocm-version: ROCM_PATH=/opt/rocm-7.2.9 does not exist; nothing exported: point ROCM_PATH at the host's "
        "ROCm 7.2, or unset it"),
        ("rocmlock build: ROCM_PATH=/opt/rocm-7.2.9 does not exist; point it at a ROCm 7.2 install, or unset it to "
        "use /opt/rocm or /usr")),
    "hip-path-missing": (
        {"HIP_PATH": "/opt/rocm-7.2.9", "ROCM_PATH": "/usr"},
        ("rocm-version: HIP_PATH=/opt/rocm-7.2.9 does not exist (hipcc takes HIP from it): point HIP_PATH at the "
        "ROCm in ROCM_PATH=/usr, or unset it"),
        ("rocmlock build: HIP_PATH=/opt/rocm-7.2.9 is not the ROCm at ROCM_PATH=/usr (hipcc would take HIP from "
        "one and the rest from the other); unset HIP_PATH or set it to /usr")),
    "device-lib-path-empty-dir": (
        {"HIP_DEVICE_LIB_PATH": "/tmp"},
        None,
        ("rocmlock build: HIP_DEVICE_LIB_PATH=/tmp holds no ocml.bc (ROCm's device libraries); point it at ROCm's "
        "amdgcn/bitcode directory, or unset it")),
}


@pytest.mark.parametrize("case", BAD)
def test_a_variable_naming_nothing_is_one_line_and_never_exported(case: str, work: Path) -> None:
    env, said, died = BAD[case]
    act, build = _activate_and_build(env, work)
    if said is not None:
        assert act[0] == said
    assert act[-2] == "act-rc=0"  # sourced into the user's shell: it warns, never fails
    # Nothing that activation exports names a path without ROCm.
    if case == "rocm-path-missing":
        assert act[-1] == "ROCM_PATH=/opt/rocm-7.2.9 HIP_PATH=unset HIP_DEVICE_LIB_PATH=unset"
    # The build stops before anything compiles, in one line.
    assert build == [died]


def test_doctor_fixes_a_missing_rocm_path_completely() -> None:
    # Debian's hipconfig answers for $ROCM_PATH: asked with ROCM_PATH=/opt/rocm-7.2.9 it names a clang under it, and
    # doctor said 'install rocm-device-libs' and left HIP_DEVICE_LIB_PATH out of the fix. The search ignores a
    # variable that holds no ROCm.
    code, report, checks = _doctor({"ROCM_PATH": "/opt/rocm-7.2.9"}, build=False)
    assert code == 1 and checks["hip-path"]["status"] == "fail"
    assert checks["hip-path"]["message"].startswith("ROCM_PATH=/opt/rocm-7.2.9 does not hold include/hip/")
    assert checks["hip-path"]["fix"] == f"export HIP_PATH=/usr ROCM_PATH=/usr HIP_DEVICE_LIB_PATH={DEBIAN_LIBS}"
    assert checks["device-libs"]["status"] == "ok", checks["device-libs"]
    assert report["device_libs"] == DEBIAN_LIBS


# ----------------------------------------------------------------------------- two ROCm installs at once


def test_hip_path_and_rocm_path_naming_two_installs_are_refused_everywhere(work: Path) -> None:
    env = {"HIP_PATH": "/opt/rocm-7.2.4", "ROCM_PATH": "/usr"}
    act, build = _activate_and_build(env, work, amd=True)
    assert act[0] == ("rocm-version: HIP_PATH=/opt/rocm-7.2.4 and ROCM_PATH=/usr are different ROCm installs "
                      "(hipcc takes HIP from HIP_PATH, the rest from ROCM_PATH): point both at one")
    assert build == [("rocmlock build: HIP_PATH=/opt/rocm-7.2.4 is not the ROCm at ROCM_PATH=/usr (hipcc would take "
                     "HIP from one and the rest from the other); unset HIP_PATH or set it to /usr")]
    # Doctor checks the ROCm the build uses (ROCM_PATH, as rocm-build-env.sh and the activation) and says why not.
    _code, report, checks = _doctor(env, amd=True, build=False)
    assert report["hip_path"] == "/usr" and report["rocm_version"] == "7.2.4"
    assert checks["hip-path"]["status"] == "warn"
    assert checks["hip-path"]["message"] == (
        "HIP_PATH=/opt/rocm-7.2.4 and ROCM_PATH=/usr are different ROCm installs: hipcc takes HIP from HIP_PATH "
        "and the rest from ROCM_PATH (rocm-build-env.sh refuses this)")
    assert checks["hip-path"]["fix"] == "export HIP_PATH=/usr (or unset HIP_PATH)"
    # The same directory under two names is one install.
    _, _, checks = _doctor({"HIP_PATH": "/opt/rocm", "ROCM_PATH": "/opt/rocm-7.2.4"}, amd=True, build=False)
    assert checks["hip-path"]["status"] == "ok"


def test_an_explicit_rocm_path_wins_over_opt_rocm_and_doctor_says_so(work: Path) -> None:
    act, build = _activate_and_build({"ROCM_PATH": "/usr"}, work, amd=True)
    assert act == ["act-rc=0", f"ROCM_PATH=/usr HIP_PATH=/usr HIP_DEVICE_LIB_PATH={DEBIAN_LIBS}"]
    assert build[0] == f"rocmlock build: ROCm 7.2.4 at /usr, device libraries in {DEBIAN_LIBS}"
    _code, report, checks = _doctor({"ROCM_PATH": "/usr"}, amd=True, build=False)
    assert report["hip_path"] == "/usr" and checks["hip-path"]["status"] == "ok"
    assert checks["hip-path"]["message"] == ("ROCM_PATH=/usr: include/hip/hip_runtime.h found (ROCM_PATH wins: "
                                             "the ROCm at /opt/rocm -> /opt/rocm-7.2.4 is not used)")


def test_two_names_of_one_install_are_one_rocm(work: Path) -> None:
    # A trailing slash, and /opt/rocm beside the /opt/rocm-7.2.4 it links to: no warning, nothing refused.
    act, build = _activate_and_build({"ROCM_PATH": "/usr/"}, work)
    assert act == ["act-rc=0", f"ROCM_PATH=/usr/ HIP_PATH=/usr/ HIP_DEVICE_LIB_PATH={DEBIAN_LIBS}"]
    assert build[0] == f"rocmlock build: ROCm 7.2.4 at /usr, device libraries in {DEBIAN_LIBS}"
    act, build = _activate_and_build({"HIP_PATH": "/opt/rocm", "ROCM_PATH": "/opt/rocm-7.2.4/"}, work, amd=True)
    assert act == ["act-rc=0", "ROCM_PATH=/opt/rocm-7.2.4/ HIP_PATH=/opt/rocm HIP_DEVICE_LIB_PATH=unset"]
    assert build[0] == ("rocmlock build: ROCm 7.2.4 at /opt/rocm-7.2.4, device libraries in "
                        "/opt/rocm-7.2.4/amdgcn/bitcode")


def test_a_dangling_opt_rocm_is_passed_over(work: Path, tmp_path: Path) -> None:
    opt = _opt(tmp_path)
    (opt / "rocm").symlink_to("rocm-7.2.4")  # AMD's ROCm uninstalled, its link left behind
    act, build = _activate_and_build({}, work, opt=opt)
    assert act == ["act-rc=0", f"ROCM_PATH=/usr HIP_PATH=/usr HIP_DEVICE_LIB_PATH={DEBIAN_LIBS}"]
    assert build[0] == f"rocmlock build: ROCm 7.2.4 at /usr, device libraries in {DEBIAN_LIBS}"
    _, report, checks = _doctor({}, opt=opt, build=False)
    assert report["hip_path"] == "/usr" and checks["hip-path"]["status"] == "ok"


# ----------------------------------------------------------------------------- paths hipcc cannot use


def test_a_rocm_path_with_a_space_is_said_before_hipcc_fails(work: Path, tmp_path: Path) -> None:
    # ROCm 7.2's hipcc runs clang through `sh -c` unquoted: with ROCM_PATH='/opt/my rocm' every compile ends in
    # "sh: 1: /opt/my: not found". A link without the space works (/opt/rocm -> 'my rocm', ROCM_PATH unset).
    opt = _opt(tmp_path)
    rocm72chroot.amd_view(opt, "my rocm")
    env = {"ROCM_PATH": "/opt/my rocm"}
    act, build = _activate_and_build(env, work, opt=opt)
    assert act[0] == ("rocm-version: ROCM_PATH=/opt/my rocm has a space, which hipcc cannot run clang from: link "
                      "it from a path without one and point ROCM_PATH there")
    assert build == [("rocmlock build: ROCM_PATH=/opt/my rocm has a space, which hipcc cannot run clang from; link "
                     "it from a path without one (ln -s '/opt/my rocm' /opt/rocm-7.2) and point ROCM_PATH there")]
    code, _, checks = _doctor(env, opt=opt)
    assert code == 1
    assert checks["hip-path"]["status"] == "fail"
    assert checks["hip-path"]["message"] == ("ROCM_PATH=/opt/my rocm has a space, which hipcc cannot run clang "
                                             "from (every compile fails with '/opt/my: not found')")
    assert checks["hip-path"]["fix"] == ("link it from a path without one (ln -s '/opt/my rocm' /opt/rocm-7.2.4) "
                                         "and point HIP_PATH/ROCM_PATH there")
    # The compile itself shows the shell's line, not only hipcc's "failed to execute".
    assert checks["offload-arch:gfx942"]["message"] == "cannot compile for gfx942: sh: 1: /opt/my: not found"
    (opt / "rocm").symlink_to("my rocm")
    proc = rocm72chroot.run(["sh", "-c", f". /mnt/work/activate-7.2.sh\n{COMPILE}"], work=work, opt=opt)
    assert proc.stdout.strip() == "compiled" and proc.stderr == ""


def test_two_clang_resource_dirs_pick_the_one_hipcc_uses(work: Path, tmp_path: Path) -> None:
    # A ROCm whose lib/llvm/lib/clang holds a stale 21 beside the 22 its clang is: the first match of the glob
    # (21) was exported as HIP_DEVICE_LIB_PATH, and a setup hipcc compiles with on its own stopped compiling.
    opt = _opt(tmp_path)
    view = rocm72chroot.amd_view(opt)
    (opt / "rocm").symlink_to("rocm-7.2.4")
    (view / "amdgcn/bitcode").unlink()
    (view / "lib/llvm").unlink()
    (view / "lib/llvm/lib/clang/21/amdgcn/bitcode").mkdir(parents=True)
    (view / "lib/llvm/lib/clang/21/amdgcn/bitcode/ocml.bc").write_bytes(b"BC\xc0\xde stale")
    (view / "lib/llvm/bin").symlink_to("/usr/lib/llvm-22/bin")
    (view / "lib/llvm/lib/clang/22").symlink_to("/usr/lib/llvm-22/lib/clang/22")
    script = f". /mnt/work/activate-7.2.sh\n{SHOW}\n{COMPILE}\n"
    proc = rocm72chroot.run(["sh", "-c", script], work=work, opt=opt)
    assert proc.stdout == f"ROCM_PATH=/opt/rocm HIP_PATH=/opt/rocm HIP_DEVICE_LIB_PATH={DEBIAN_LIBS}\ncompiled\n", \
        proc.stderr
    script = f"set -euo pipefail\n. /mnt/work/rocm-build-env.sh\nrocmlock_rocm_env\n{COMPILE}\n"
    proc = rocm72chroot.run(["bash", "-c", script], env=BUILD_VARS, work=work, opt=opt)
    assert proc.stdout == "compiled\n", proc.stderr
    assert f"device libraries in {DEBIAN_LIBS}" in proc.stderr
    _code, report, checks = _doctor({}, opt=opt)
    assert report["device_libs"] == DEBIAN_LIBS
    assert checks["offload-arch:gfx942"]["status"] == "ok", checks["offload-arch:gfx942"]


# ----------------------------------------------------------------------------- the version


INFO_VERSIONS = {
    "build-suffix": "7.2.4-123\n",  # AMD writes the build number after a dash
    "trailing-blanks": "7.2.4  \n",
    "leading-blank": " 7.2.4\n",
    "blank-first-line": "\n7.2.4\n",
    "crlf": "7.2.4\r\n",
}


@pytest.mark.parametrize("case", INFO_VERSIONS)
def test_info_version_as_written_reads_7_2_4_everywhere(case: str, work: Path, tmp_path: Path) -> None:
    opt = _opt(tmp_path)
    (rocm72chroot.amd_view(opt) / ".info/version").write_text(INFO_VERSIONS[case])
    (opt / "rocm").symlink_to("rocm-7.2.4")
    act, build = _activate_and_build({}, work, opt=opt)
    assert act == ["act-rc=0", "ROCM_PATH=/opt/rocm HIP_PATH=/opt/rocm HIP_DEVICE_LIB_PATH=unset"]  # no warning
    assert build[0] == "rocmlock build: ROCm 7.2.4 at /opt/rocm, device libraries in /opt/rocm/amdgcn/bitcode"
    _, report, _ = _doctor({}, opt=opt, build=False)
    assert report["rocm_version"] == "7.2.4"


def test_a_rocm_whose_version_nothing_says_is_said(work: Path, tmp_path: Path) -> None:
    # No .info/version, no rocm-core header, no hipconfig (PATH without it, none in <rocm>/bin).
    opt = _opt(tmp_path)
    view = rocm72chroot.amd_view(opt)
    (opt / "rocm").symlink_to("rocm-7.2.4")
    shutil.rmtree(view / ".info")
    (view / "bin/hipconfig").unlink()
    (view / "include").unlink()
    (view / "include").mkdir()
    for name in os.listdir(rocm72chroot.CHROOT / "usr/include"):
        if name != "rocm-core":
            (view / "include" / name).symlink_to(f"/usr/include/{name}")
    act, build = _activate_and_build({"PATH": "/mnt/work/bin"}, work, opt=opt)
    assert act[0] == ("rocm-version: cannot tell which ROCm is at /opt/rocm (no .info/version, "
                      "include/rocm-core/rocm_version.h or hipconfig); this environment needs ROCm 7.2")
    assert build == [("rocmlock build: cannot tell which ROCm is at /opt/rocm (no .info/version, "
                     "include/rocm-core/rocm_version.h or hipconfig); point ROCM_PATH at a ROCm 7.2 install")]
