"""MAGMA as Debian ships it, inside the ROCm 7.2.4 chroot (tests/rocm72/make-chroot.sh installs libmagma-rocm-dev).

Debian's only libmagma-rocm-dev (sid's 2.9.0+ds-3) is built for ROCm 6: its libmagma.so.2 links libamdhip64.so.6, while
the chroot's ROCm 7.2.4 is libamdhip64.so.7. doctor must find it in Debian's layout and say it cannot be used, find
none in AMD's layout (no /opt/rocm/magma there), and the pytorch recipe's rocmlock_magma must refuse it when it is
named. Reading libmagma's dynamic section (a 1.2 GB file) is the slow part: a few seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import rocm72chroot

REPO = Path(__file__).resolve().parent.parent


def _magma_check(env: dict[str, str], amd: bool) -> dict[str, Any]:
    proc = rocm72chroot.run(["/venv/bin/rocmlock", "doctor", "--build", "--json"], env=env, amd_layout=amd)
    assert proc.stdout.strip(), proc.stderr
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["magma"]  # type: ignore[no-any-return]


def test_doctor_finds_debians_magma_and_refuses_it_for_rocm_7() -> None:
    check = _magma_check({}, False)
    assert check["status"] == "warn"
    assert check["message"] == ("MAGMA at /usr links libamdhip64.so.6 but the ROCm at /usr is libamdhip64.so.7: "
                                "built for another ROCm, pytorch cannot use it")
    assert "libmagma-rocm-dev" in check["fix"] and "ROCMLOCK_MAGMA_HOME=<its absolute prefix>" in check["fix"]
    # Named for the build it is a failure only when pytorch is known to be built; without a workspace a warning.
    assert _magma_check({"ROCMLOCK_MAGMA_HOME": "/usr"}, False)["status"] == "warn"


def test_doctor_finds_no_magma_in_amds_layout() -> None:
    check = _magma_check({}, True)
    assert check["status"] == "warn"
    assert check["message"].startswith("no MAGMA for the ROCm at /opt/rocm: pytorch builds without it")


def test_build_script_refuses_debians_magma(tmp_path: Path) -> None:
    # recipes/ and tools/ laid out as in the checkout, so ../../tools from the recipe directory resolves.
    shutil.copytree(REPO / "recipes/pytorch-rocm", tmp_path / "recipes/pytorch-rocm")
    shutil.copy(REPO / "recipes/rocm-build-env.sh", tmp_path / "recipes/rocm-build-env.sh")
    shutil.copytree(REPO / "tools/rocmlock", tmp_path / "tools/rocmlock")
    # The host prefix's python, as rattler-build gives build.sh (Debian has python3 only).
    env = {"RECIPE_DIR": "/mnt/work/recipes/pytorch-rocm", "ROCMLOCK_ROCM_VERSION": "7.2",
           "ROCMLOCK_GPU_TARGET": "gfx942", "PREFIX": "/mnt/work/prefix", "PYTHONPATH": "",
           "PATH": "/mnt/work/host/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert rocm72chroot.run(["python3", "-m", "venv", "/mnt/work/host"], work=tmp_path).returncode == 0
    script = ("set -euo pipefail\n. /mnt/work/recipes/rocm-build-env.sh\nrocmlock_rocm_env\nrocmlock_magma\n"
              'echo "USE_MAGMA=$USE_MAGMA"\n')
    off = rocm72chroot.run(["bash", "-c", script], env=env, work=tmp_path)
    # Debian's MAGMA sits in /usr, where FindMAGMA would find it: unset, the build says USE_MAGMA=0 all the same.
    assert off.returncode == 0 and off.stdout == "USE_MAGMA=0\n", off.stderr
    named = rocm72chroot.run(["bash", "-c", script], env={**env, "ROCMLOCK_MAGMA_HOME": "/usr"}, work=tmp_path)
    assert named.returncode == 1 and named.stdout == ""
    assert named.stderr.strip().splitlines()[-1] == (
        "rocmlock build: MAGMA at /usr (/usr/lib/x86_64-linux-gnu/libmagma.so) links libamdhip64.so.6 but the ROCm at "
        "/usr is libamdhip64.so.7: it was built for another ROCm; build MAGMA against ROCm 7.2 (PyTorch's "
        ".ci/docker/common/install_rocm_magma.sh) or unset ROCMLOCK_MAGMA_HOME")
    assert not (tmp_path / "prefix").exists()
