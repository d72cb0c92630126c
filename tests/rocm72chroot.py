"""Run commands inside the Debian ROCm 7.2.4 chroot that tests/rocm72/make-chroot.sh makes (once, cached).

Each command runs in a private mount namespace (``unshare --mount``) that mounts /proc, binds this checkout's
``tools/`` on ``/mnt/rocmlock`` (first on PYTHONPATH, so ``/venv/bin/rocmlock`` runs the code under test, not
the copy installed when the chroot was made), optionally binds a host directory on ``/mnt/work``, and for the
AMD-layout cases binds ``/srv/rocmlock-amd/opt`` on ``/opt`` (so ``/opt/rocm -> rocm-7.2.4`` exists only
there). Nothing is left mounted when the command ends, and the cached chroot is never written to.

Where the chroot is missing (no root, no apt, not made yet) the tests skip with the reason, except in CI
(tests/ciskips.py, in_ci), where they fail: .ci/run makes it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml
from ciskips import in_ci

REPO = Path(__file__).resolve().parent.parent
MAKE = REPO / "tests/rocm72/make-chroot.sh"
PACKAGES = REPO / "tests/rocm72/packages.txt"
CHROOT = Path(os.environ.get("ROCMLOCK_ROCM72_CHROOT", "/var/cache/rocmlock-rocm72"))
STAMP = "etc/rocmlock-rocm72"
ROCM_VERSION = "7.2.4"
# Where the tests find the pinned source mirrors (../shared/mirrors next to the checkout, see its README).
MIRRORS = Path(os.environ.get("ROCMLOCK_MIRRORS", str(REPO.parent / "shared/mirrors")))
BASE_ENV = {"PATH": "/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
            "PYTHONPATH": "/mnt/rocmlock"}
# In the private namespace: mount /proc and the binds, then chroot. $1 root, $2 tools, $3 work ("" none),
# $4 1 for AMD's layout, $5 a host directory to bind on /opt instead ("" none); the command follows.
_MOUNT_AND_CHROOT = """set -e
r=$1 tools=$2 work=$3 amd=$4 opt=$5; shift 5
mount -t proc proc "$r/proc"
mount --bind -o ro "$tools" "$r/mnt/rocmlock" 2>/dev/null || mount --bind "$tools" "$r/mnt/rocmlock"
[ -z "$work" ] || mount --bind "$work" "$r/mnt/work"
[ "$amd" != 1 ] || mount --bind "$r/srv/rocmlock-amd/opt" "$r/opt"
[ -z "$opt" ] || mount --bind "$opt" "$r/opt"
exec chroot "$r" "$@"
"""


def fingerprint() -> str:
    """What make-chroot.sh writes into the chroot: the recipe that made it (script, package pins, rocmlock's deps)."""
    data = MAKE.read_bytes() + PACKAGES.read_bytes() + (REPO / "pyproject.toml").read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def unavailable_reason() -> str | None:
    """Why the chroot cannot be used here, or None when it can."""
    make = f"make it with `sudo {MAKE.relative_to(REPO)}` (needs root and apt; ~10 GB, minutes; .ci/run does it)"
    if os.geteuid() != 0:
        return f"the ROCm {ROCM_VERSION} chroot needs root (chroot, mount namespaces); {make}"
    stamp = CHROOT / STAMP
    if not stamp.is_file():
        return f"no ROCm {ROCM_VERSION} chroot at {CHROOT}: {make}"
    if stamp.read_text().strip() != fingerprint():
        return f"the chroot at {CHROOT} was made by another version of make-chroot.sh, packages.txt or pyproject.toml: {make}"
    return None


def require_chroot() -> Path:
    """The chroot's root; skip (fail in CI) with the reason where it is not there."""
    reason = unavailable_reason()
    if reason is not None:
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return CHROOT


def require_mirror(name: str) -> Path:
    """A pinned source mirror (``bitsandbytes.git``) under $ROCMLOCK_MIRRORS or ../shared/mirrors.

    The mirrors are data this machine is given beside the checkout (GitHub is out of reach and PyPI has no
    bitsandbytes sdist), not something .ci/run can install; CI has them (.ci/run stops early when it does not
    find them), so there a missing mirror fails; elsewhere the test skips and says so.
    """
    path = MIRRORS / name
    if not path.is_dir():
        reason = f"no source mirror {path}: set ROCMLOCK_MIRRORS to the directory holding {name}"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, amd_layout: bool = False,
        work: Path | None = None, opt: Path | None = None, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the chroot with a clean environment (BASE_ENV plus ``env``), capturing its output.

    ``opt``: a host directory bound on /opt (a layout of the test's own: its symlinks resolve inside the chroot,
    so ``amd_view(opt)`` makes AMD's view there to change). ``amd_layout`` binds the chroot's own view instead.
    """
    root = require_chroot()
    full_env = [f"{k}={v}" for k, v in {**BASE_ENV, **(env or {})}.items()]
    cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _MOUNT_AND_CHROOT, "sh",
           str(root), str(REPO / "tools"), str(work or ""), "1" if amd_layout else "0", str(opt or ""),
           "env", "-i", *full_env, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


# As _MOUNT_AND_CHROOT, but entered with pivot_root, the host's /dev bound and a private /tmp: Apptainer refuses
# to run in a chroot ("Running inside a weak chrooted environment, prefer pivot_root") and needs /dev/pts and
# /dev/fuse or loop devices. $1 root, $2 tools, $3 work, $4 a path under /tmp to bind work on as well ("" none:
# so paths the host printed work inside); the command follows (run as nobody: below).
_MOUNT_AND_PIVOT = """set -e
r=$1 tools=$2 work=$3 also=$4; shift 4
mount --bind "$r" "$r"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/tmp"
[ -z "$also" ] || { mkdir -p "$r$also" && mount --bind "$work" "$r$also"; }
mount --bind -o ro "$tools" "$r/mnt/rocmlock" 2>/dev/null || mount --bind "$tools" "$r/mnt/rocmlock"
mount --bind "$work" "$r/mnt/work"
mkdir "$r/tmp/.old"
cd "$r"
pivot_root . tmp/.old
cd /
umount -l /tmp/.old
rmdir /tmp/.old
exec "$@"
"""


def run_unprivileged(argv: Sequence[str], work: Path, *, env: Mapping[str, str] | None = None,
                     also_at: Path | None = None, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """``argv`` in the chroot as a user runs Apptainer: uid/gid 65534 (nobody), unprivileged user namespaces, no
    capability. (As root Apptainer asks for every capability, and a sandbox without CAP_SYS_RESOURCE refuses:
    "Requesting capability set ... while permitted capability set is ...".) ``work`` (bound on /mnt/work) must be
    writable by nobody; HOME and Apptainer's temporary and cache directories are under it."""
    root = require_chroot()
    full_env = [f"{k}={v}" for k, v in {**BASE_ENV, "HOME": "/mnt/work/home", "APPTAINER_TMPDIR": "/tmp",
                                        "APPTAINER_CACHEDIR": "/mnt/work/home/cache", **(env or {})}.items()]
    cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _MOUNT_AND_PIVOT, "sh",
           str(root), str(REPO / "tools"), str(work), str(also_at or ""), "setpriv", "--reuid=65534", "--regid=65534",
           "--clear-groups", "env", "-i", *full_env, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def amd_view(opt: Path, name: str = f"rocm-{ROCM_VERSION}") -> Path:
    """A copy of the chroot's AMD-layout view (``/srv/rocmlock-amd/opt/rocm-7.2.4``: symlinks into the chroot's
    ``/usr`` and a real ``.info/version``) at ``opt/name``, for a test to change; bind ``opt`` on /opt with
    ``run(..., opt=opt)``. Returns the copy's host path (``/opt/<name>`` inside the chroot)."""
    view = opt / name
    shutil.copytree(require_chroot() / f"srv/rocmlock-amd/opt/rocm-{ROCM_VERSION}", view, symlinks=True)
    return view


def build_bitsandbytes(work: Path, mirror: Path, gfx: str) -> subprocess.CompletedProcess[str]:
    """Run recipes/bitsandbytes-rocm/build.sh in the chroot as rattler-build would, for one target.

    ``work`` (bound on /mnt/work) gets the pinned commit's tree from ``mirror`` (src/), the recipe directory
    (recipes/, so build.sh finds ../rocm-build-env.sh) and the python prefix (a venv over Debian's
    scikit-build-core/setuptools/trove-classifiers: the recipe's host requirements).
    """
    variants = yaml.safe_load((REPO / "recipes/variants.yaml").read_text())
    version, rev = variants["bitsandbytes_version"][0], variants["bitsandbytes_git_rev"][0]
    (work / "src").mkdir()
    archive = subprocess.run(["git", "--git-dir", str(mirror), "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(work / "src")], input=archive.stdout, check=True)
    shutil.copytree(REPO / "recipes/bitsandbytes-rocm", work / "recipes/bitsandbytes-rocm")
    shutil.copy(REPO / "recipes/rocm-build-env.sh", work / "recipes/rocm-build-env.sh")
    # ../../tools/rocmlock/data from the recipe directory, as in the checkout (the component table).
    shutil.copytree(REPO / "tools/rocmlock/data", work / "tools/rocmlock/data")
    env = {
        "PATH": "/mnt/work/prefix/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": "",
        "RECIPE_DIR": "/mnt/work/recipes/bitsandbytes-rocm", "SRC_DIR": "/mnt/work/src",
        "PREFIX": "/mnt/work/prefix", "PKG_NAME": "bitsandbytes", "PKG_VERSION": version,
        "ROCMLOCK_ROCM_VERSION": "7.2", "ROCMLOCK_GPU_TARGET": gfx, "MAX_JOBS": str(len(os.sched_getaffinity(0))),
    }
    script = ("set -e\npython3 -m venv --system-site-packages /mnt/work/prefix\n"
              "cd /mnt/work/src\nbash /mnt/work/recipes/bitsandbytes-rocm/build.sh\n")
    return run(["sh", "-c", script], env=env, work=work, timeout=1800)
