"""Apptainer: ``rocmlock image --sif FILE`` and ``rocmlock verify --image SIF``.

``apptainer build FILE oci:LAYOUT`` converts the OCI layout (Apptainer's ``oci`` build source,
internal/pkg/build/sources/conveyorPacker_oci.go) into a SIF. Apptainer 1.4.5 (Debian sid) takes the layout's
directory only: ``oci:DIR:TAG`` fails with "stat DIR:TAG/index.json: no such file or directory" (tried in the
test chroot), so the conversion reads the build's own one-image layout before any ``-o`` merge. The layers become one
squashfs; the image config's ``Env`` is kept for ``apptainer exec``, its entrypoint and command become the
SIF's runscript (``apptainer run``). ``apptainer exec`` does not run the entrypoint, so the check
activates itself (/opt/rocmlock/check sources activate.sh). ``--rocm`` binds the host's ROCm libraries and GPU
devices (``/etc/apptainer/rocmliblist.conf``); without a GPU it runs all the same, and the check fails at
``host.devices`` as it does outside. The SIF is written beside FILE and renamed into place when complete.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.fleet.verify import ProbeTarget, target_for_environment
from rocmlock.image.files import CHECK
from rocmlock.util.credentials import one_line

_FATAL = re.compile(r"(?:FATAL|ERROR):\s*(.*)")


def require_apptainer(flag: str) -> str:
    """The apptainer program, else one line naming how to get it."""
    found = shutil.which("apptainer")
    if found is None:
        raise OperationError(f"{flag}: apptainer is not installed",
                             hint="install it (Debian trixie/sid: apt-get install apptainer; or apptainer.org's "
                                  "packages), or build the SIF later from a one-image layout: apptainer build FILE oci:DIR")
    return found


def check_sif_path(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"--sif {path}: is a directory", hint="name the SIF file to write, e.g. --sif env.sif")
    if not path.parent.is_dir():
        raise InputError(f"--sif {path}: its directory {path.parent} does not exist", hint="create it first")


def build_sif(layout: Path, dest: Path) -> None:
    """``apptainer build`` of the one-image layout ``layout`` to ``dest`` (through a temporary file beside it)."""
    program = require_apptainer("--sif")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        # Named relative to its directory: apptainer reads oci:PATH up to a ':' (a TMPDIR or -o holding one).
        proc = subprocess.run([program, "--quiet", "build", str(tmp.resolve()), f"oci:{layout.name}"],
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                              cwd=layout.parent)
        if proc.returncode != 0 or not tmp.is_file():
            lines = (proc.stderr + proc.stdout).splitlines()
            why = next((m.group(1) for ln in reversed(lines) if (m := _FATAL.search(ln))),
                       lines[-1] if lines else f"exit {proc.returncode}")
            raise OperationError(f"--sif {dest}: apptainer build failed: {one_line(why)[:300]}",
                                 hint="run `apptainer build FILE oci:DIR` on a layout of this image to see all of it "
                                      "(apptainer needs unprivileged user namespaces, or root)")
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)


def require_image(sif: Path, prefix: Path | None, slurm: bool) -> list[str]:
    """``verify --image SIF``'s argv prefix: ``apptainer exec --rocm SIF /opt/rocmlock/check``. On Slurm the path
    must be one every node can open (absolute; a shared file system)."""
    if prefix is not None:
        raise InputError("verify: --image and --prefix together", hint="the environment is the image's: pass --image")
    if not sif.is_file():
        raise InputError(f"--image {sif}: no such file", hint="build one with rocmlock image --sif FILE")
    with sif.open("rb") as fh:
        head = fh.read(128)
    # SIF's global header: a launch script line, then the magic "SIF_MAGIC" at offset 32 (apptainer/sif, sif.go).
    if head[32:41] != b"SIF_MAGIC":
        raise InputError(f"--image {sif}: not a SIF file (no SIF_MAGIC)", hint="pass the FILE of rocmlock image --sif")
    if not slurm:
        require_apptainer("--image")
    return ["apptainer", "exec", "--rocm", str(sif.resolve()), CHECK]


def image_target(manifest: Path, environment: str | None, sif: Path) -> ProbeTarget:
    """What the probe expects: ``-e ENV``'s GPU target and ROCm (not installed here: it is in the image), else
    nothing to expect (the probe still checks what it finds)."""
    if environment:
        return target_for_environment(manifest, environment, installed=False)
    return ProbeTarget(f"image {sif}", Path("/"), None, None, None)
