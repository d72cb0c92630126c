"""What ``rocmlock image`` adds beside the environment, under ``/opt/rocmlock``: the activation script, the
entrypoint that sources it, the check (the post-install probe, activated) and the probe itself when the environment
does not ship one.

- ``/opt/rocmlock/activate.sh``: the environment's activation (:mod:`rocmlock.image.activation`);
- ``/opt/rocmlock/entrypoint``: sources it, then ``exec "$@"`` (pixi's container guidance: ``pixi shell-hook``
  output in an entrypoint ending in ``exec "$@"``);
- ``/opt/rocmlock/check``: sources it and runs the probe with the environment's python (else the base's python3),
  so it is activated however it is started (``docker run``, Kubernetes ``command:``, ``apptainer exec``);
- the probe: the environment's own (``<prefix>/share/rocm-env-check/verify_env.py``, from ``rocm-env-check``) or,
  without it, rocmlock's copy at ``/opt/rocmlock/verify_env.py``: one copy in the image either way;
- ``/opt/rocmlock/sbom.cdx.json``: the environment's CycloneDX SBOM (:mod:`rocmlock.image.sbom`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rocmlock.errors import InputError
from rocmlock.fleet.verify import PREFIX_PROBE, REPO_PROBE
from rocmlock.image.activation import ActivationInputs, render_activation

DEFAULT_PREFIX = "/opt/env"
TOOL_DIR = "/opt/rocmlock"
CHECK = f"{TOOL_DIR}/check"
ENTRYPOINT = f"{TOOL_DIR}/entrypoint"
ACTIVATE = f"{TOOL_DIR}/activate.sh"
SBOM = f"{TOOL_DIR}/sbom.cdx.json"
_PREFIX_CHARS = re.compile(r"/[A-Za-z0-9._+/-]{1,200}")
# Directories of the base's system a prefix must not replace or sit in (the layer would shadow them).
_SYSTEM = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
           "/tmp", "/usr", "/var", "/opt/rocm", TOOL_DIR)

_ENTRYPOINT = """#!/bin/sh
# rocmlock image: the environment activated (as `pixi shell-hook` makes it), then the command.
. {activate}
exec "$@"
"""
_CHECK = """#!/bin/sh
# rocmlock image: the environment's post-install probe, activated, with the environment's python (else the base's
# python3). Exit 0: the environment can use this container's GPU; 1: a check failed (see its report).
. {activate}
py={prefix}/bin/python
[ -x "$py" ] || py=python3
exec "$py" {probe} --prefix {prefix} "$@"
"""


@dataclass(frozen=True)
class ToolFiles:
    """Where the files went and the sha256 of the activation script and the SBOM (labels)."""

    probe: str
    activation_sha256: str
    sbom_sha256: str


def check_prefix(prefix: str) -> str:
    """``--prefix`` normalised; an InputError unless it is an absolute path of plain characters outside the system
    directories and rocmlock's own."""
    norm = str(PurePosixPath(prefix))
    if norm.startswith("//"):  # PurePosixPath keeps a leading "//" (POSIX leaves it to the system): one directory
        norm = "/" + norm.lstrip("/")
    parts = PurePosixPath(prefix).parts
    if not _PREFIX_CHARS.fullmatch(norm) or ".." in parts or "." in parts or norm == "/":
        raise InputError(f"--prefix {prefix[:120]!r}: not an absolute path of letters, digits and . _ + - /",
                         hint="e.g. --prefix /opt/env (the default) or /app/.pixi/envs/default (pixi's layout)")
    if any(norm == s or norm.startswith(s + "/") or s.startswith(norm + "/") for s in _SYSTEM):
        raise InputError(f"--prefix {norm}: inside or above a system directory of the image",
                         hint="choose a directory of its own, e.g. /opt/env or /app/.pixi/envs/<env>")
    return norm


def add_tool_files(stage: Path, prefix: str, inputs: ActivationInputs, sbom: bytes) -> ToolFiles:
    """Write the activation script, the entrypoint, the check, the SBOM and (when needed) the probe into
    ``stage``."""
    tools = stage / TOOL_DIR.lstrip("/")
    tools.mkdir(parents=True)
    activation = render_activation(inputs)
    for path, data in activation.files:
        (stage / path).parent.mkdir(parents=True, exist_ok=True)
        (stage / path).write_bytes(data)
    text = activation.script.encode()
    (tools / "activate.sh").write_bytes(text)
    if (stage / prefix.lstrip("/") / PREFIX_PROBE).is_file():
        probe = f"{prefix}/{PREFIX_PROBE.as_posix()}"
    else:
        probe = f"{TOOL_DIR}/verify_env.py"
        shutil.copyfile(REPO_PROBE, tools / "verify_env.py")
    for name, template in (("entrypoint", _ENTRYPOINT), ("check", _CHECK)):
        (tools / name).write_text(template.format(activate=ACTIVATE, prefix=prefix, probe=probe))
        (tools / name).chmod(0o755)
    (stage / SBOM.lstrip("/")).write_bytes(sbom)
    return ToolFiles(probe, hashlib.sha256(text).hexdigest(), hashlib.sha256(sbom).hexdigest())
