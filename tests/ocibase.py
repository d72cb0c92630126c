"""A minimal Debian base image for the image tests, made once with debootstrap and cached as an OCI layout.

``debootstrap --variant=minbase --include=python3 bookworm`` (the probe runs with the base's python3),
packed by umoci into ``~/.cache/rocmlock-tests/debian-base-<key>/layout`` (tag ``base``). A second session reuses
it; a half-made one is never used (it is renamed into place when complete). The mirror is
``ROCMLOCK_DEBIAN_MIRROR`` (as tests/rocm72/make-chroot.sh) or deb.debian.org.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = "bookworm"
KEY = f"{SUITE}-minbase-python3-v2"
CACHE = Path(os.environ.get("ROCMLOCK_TEST_CACHE", Path.home() / ".cache" / "rocmlock-tests"))


class BaseUnavailable(Exception):
    """debootstrap, umoci or the mirror is missing: the tests that need the base say so."""


def missing_tools() -> list[str]:
    return [t for t in ("debootstrap", "umoci", "skopeo", "docker-registry") if shutil.which(t) is None
            and not Path(f"/usr/sbin/{t}").exists()]


def debian_base() -> Path:
    """The cached OCI layout directory of the Debian base (made now when absent); ``oci:<it>:base``."""
    done = CACHE / f"debian-base-{KEY}"
    layout = done / "layout"
    if (done / "complete").is_file():
        return layout
    if os.geteuid() != 0:
        raise BaseUnavailable("making the Debian base needs root (debootstrap)")
    if missing := missing_tools():
        raise BaseUnavailable(f"missing {', '.join(missing)} (apt-get install skopeo umoci docker-registry debootstrap)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"debian-base-{KEY}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done / "complete").is_file():
            return layout
        work = CACHE / f"debian-base-{KEY}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        mirror = os.environ.get("ROCMLOCK_DEBIAN_MIRROR", "http://deb.debian.org/debian")
        rootfs = work / "bundle" / "rootfs"
        proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(rootfs),
                               mirror], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BaseUnavailable(f"debootstrap failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists").mkdir(parents=True)
        out = work / "layout"
        for cmd in (["umoci", "init", "--layout", str(out)], ["umoci", "new", "--image", f"{out}:base"],
                    ["umoci", "unpack", "--image", f"{out}:base", str(work / "empty")]):
            subprocess.run(cmd, check=True, capture_output=True)
        # umoci repack takes the bundle's rootfs as the new layer: move the debootstrapped tree in.
        shutil.rmtree(work / "empty" / "rootfs")
        rootfs.rename(work / "empty" / "rootfs")
        subprocess.run(["umoci", "repack", "--image", f"{out}:base", str(work / "empty")], check=True,
                       capture_output=True)
        subprocess.run(["umoci", "config", "--image", f"{out}:base", "--config.env",
                        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--config.cmd", "/bin/sh", "--os", "linux", "--architecture", "amd64"],
                       check=True, capture_output=True)
        subprocess.run(["umoci", "gc", "--layout", str(out)], check=True, capture_output=True)
        shutil.rmtree(work / "empty")
        shutil.rmtree(work / "bundle", ignore_errors=True)
        shutil.rmtree(done, ignore_errors=True)
        (work / "complete").write_text(KEY + "\n")
        work.rename(done)
    return layout


if __name__ == "__main__":
    print(debian_base())
    sys.exit(0)
