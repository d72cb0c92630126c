"""The probe's host checks (tools/verify_env.py) against ROCm 7.2.4's real amd-smi, rocm-smi and rocminfo in the
Debian chroot (tests/rocm72/make-chroot.sh), on this GPU-less host: each says plainly that no driver is loaded,
whatever the tool's exit code, and rocm.path knows both ROCm layouts. Cost: about 5 s per run; ~20 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rocm72chroot


def _probe(env: dict[str, str], amd: bool = False, work: Path | None = None) -> dict[str, dict[str, Any]]:
    argv = ["/venv/bin/python", "/mnt/rocmlock/verify_env.py", "--only", "tools,rocm", "--json"]
    proc = rocm72chroot.run(argv, env=env, amd_layout=amd, work=work)
    assert proc.returncode == 1, proc.stderr  # no driver: required checks fail
    assert "Traceback" not in proc.stderr
    return {c["id"]: c for c in json.loads(proc.stdout)["checks"]}


def test_amd_smi_and_rocminfo_say_no_driver() -> None:
    checks = _probe({})
    smi, rocminfo = checks["tools.smi"], checks["tools.rocminfo"]
    # amd-smi 7.2 exits 255 with "Drivers not loaded (...)"; rocminfo exits 1 with "ROCk module is NOT loaded".
    assert smi["status"] == "fail"
    assert smi["evidence"].startswith('no AMD GPU driver loaded: /usr/bin/amd-smi says "')
    assert "Drivers not loaded" in smi["evidence"] and smi["evidence"].endswith("(exit 255)")
    assert rocminfo["status"] == "fail"
    assert rocminfo["evidence"].startswith('no AMD GPU driver loaded: /usr/bin/rocminfo says "ROCk module is NOT')
    for check in (smi, rocminfo):
        assert "modprobe amdgpu" in check["fix"] and "does not match the driver" not in check["fix"]


def test_rocm_smi_exit_0_still_says_no_driver(tmp_path: Path) -> None:
    # Without amd-smi the probe falls back to rocm-smi, which logs the missing driver and exits 0. A PATH holding
    # only rocm-smi (sid's /bin is /usr/bin, where amd-smi is).
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/rocm-smi").symlink_to("/usr/bin/rocm-smi")
    (tmp_path / "bin/python3").symlink_to("/usr/bin/python3")  # rocm-smi's `#!/usr/bin/env python3`
    checks = _probe({"PATH": "/mnt/work/bin"}, work=tmp_path)
    smi = checks["tools.smi"]
    assert smi["status"] == "fail", smi
    assert 'rocm-smi says "' in smi["evidence"] and smi["evidence"].endswith("(exit 0)")


def test_rocm_path_knows_the_debian_layout() -> None:
    path = _probe({})["rocm.path"]
    assert path["status"] == "warn"
    assert path["evidence"] == ("HIP_PATH and ROCM_PATH are unset; a distribution's ROCm 7.2.4 is in /usr "
                                "(include/rocm-core/rocm_version.h)")
    path = _probe({"ROCM_PATH": "/usr"})["rocm.path"]
    assert path["status"] == "ok"
    assert path["evidence"] == "ROCM_PATH=/usr: ROCm 7.2.4 (include/rocm-core/rocm_version.h)"


def test_rocm_path_knows_the_amd_layout() -> None:
    path = _probe({}, amd=True)["rocm.path"]
    assert path["status"] == "warn" and path["evidence"] == "HIP_PATH and ROCM_PATH are unset; /opt/rocm exists"
    path = _probe({"ROCM_PATH": "/opt/rocm-7.2.4"}, amd=True)["rocm.path"]
    assert path["status"] == "ok"
    assert path["evidence"] == "ROCM_PATH=/opt/rocm-7.2.4: ROCm 7.2.4 (.info/version)"


def test_a_leftover_opt_rocm_without_rocm_does_not_hide_the_version(tmp_path: Path) -> None:
    # AMD's ROCm removed, a /opt/rocm directory left behind (no include/hip), Debian's ROCm in /usr: rocm.path
    # found /usr, but rocm.version read /opt/rocm (any directory), knew no version and skipped the comparison.
    opt = tmp_path / "opt"
    (opt / "rocm/share").mkdir(parents=True)
    argv = ["/venv/bin/python", "/mnt/rocmlock/verify_env.py", "--only", "rocm", "--expect-rocm", "6.4", "--json"]
    proc = rocm72chroot.run(argv, opt=opt)
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert "a distribution's ROCm 7.2.4 is in /usr" in checks["rocm.path"]["evidence"]
    assert checks["rocm.version"]["status"] == "fail"
    assert checks["rocm.version"]["evidence"] == ("host ROCm 7.2.4 at /usr; the environment is built for ROCm 6.4 "
                                                  "(--expect-rocm)")


def test_rocm_version_reads_the_rocm_path_the_activation_and_build_use() -> None:
    # HIP_PATH and ROCM_PATH naming two installs is a warning of rocm.path; the version compared is ROCM_PATH's, as
    # rocm-build-env.sh, the rocm-version activation and doctor take it.
    argv = ["/venv/bin/python", "/mnt/rocmlock/verify_env.py", "--only", "rocm", "--expect-rocm", "6.4", "--json"]
    proc = rocm72chroot.run(argv, env={"HIP_PATH": "/opt/rocm-7.2.4", "ROCM_PATH": "/usr"}, amd_layout=True)
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["rocm.path"]["status"] == "warn"
    assert checks["rocm.version"]["evidence"].startswith("host ROCm 7.2.4 at /usr;")
