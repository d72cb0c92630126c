"""Signed bundles: the metadata (which holds every member's sha256) signed with an OpenSSH key.

``pack --sign KEY`` runs ``ssh-keygen -Y sign -n rocmlock-bundle`` on the bytes of ``rocmlock-pack.json``
and puts the signature beside it in the bundle; ``unpack --trusted-signers FILE`` (an OpenSSH
``allowed_signers`` file, ssh-keygen(1) "ALLOWED SIGNERS") finds the signer with ``ssh-keygen -Y
find-principals`` and checks the signature with ``ssh-keygen -Y verify`` before anything else of the bundle is
read. OpenSSH is on every node (8.1+ signs; 8.2+ finds principals): no new Python dependency, and the
keys are the ones a platform team already deploys with. Both commands read files only: the data goes
through a file in the caller's scratch directory, given to ``ssh-keygen`` as its stdin.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.util.runner import CommandError, CommandResult, run_command
from rocmlock.util.text import escape

NAMESPACE = "rocmlock-bundle"
TIMEOUT_S = 60.0
SSH_KEYGEN = "ssh-keygen"


def _ssh_keygen() -> str:
    found = shutil.which(SSH_KEYGEN)
    if found is None:
        raise OperationError("ssh-keygen (OpenSSH) is not on PATH: it signs and verifies bundles",
                             hint="install OpenSSH's client tools (Debian/Ubuntu: openssh-client)")
    return found


def _run(argv: list[str], stdin: Path | None = None) -> CommandResult:
    try:
        return run_command(argv, timeout=TIMEOUT_S, check=False, stdin=stdin)
    except CommandError as exc:
        raise OperationError(str(exc)) from None


def sign_bytes(data: bytes, key: Path, scratch: Path) -> bytes:
    """The OpenSSH signature (armored text) of ``data`` by the private ``key`` (or a public key whose private
    half ssh-agent holds), namespace ``rocmlock-bundle``."""
    if not key.is_file():
        raise InputError(f"--sign {key}: no such file", hint="pass an OpenSSH private key (ssh-keygen -t ed25519)")
    with tempfile.TemporaryDirectory(dir=scratch, prefix="sign-") as tmp:
        payload = Path(tmp) / "metadata"
        payload.write_bytes(data)
        res = _run([_ssh_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(payload)])
        signature = payload.with_name("metadata.sig")
        if not res.ok or not signature.is_file():
            raise InputError(f"--sign {key}: ssh-keygen could not sign: {escape(res.last_error_line())}",
                             hint="pass an OpenSSH private key readable only by you (chmod 600), without a "
                                  "passphrase or loaded into ssh-agent")
        return signature.read_bytes()


def verify_bytes(data: bytes, signature: bytes | None, signers: Path, shown: Path, scratch: Path) -> str:
    """The principal of ``signers`` whose key signed ``data``; an InputError (exit 2) for a bundle without
    a signature, a signature of an unknown key, or one that does not match ``data``."""
    hint = "take bundles only from your build host: pack them there with `rocmlock pack --sign KEY`"
    if signature is None:
        raise InputError(f"{shown}: not signed, and --trusted-signers {signers} asks for a signature", hint=hint)
    if not signers.is_file():
        raise InputError(f"--trusted-signers {signers}: no such file",
                         hint="an OpenSSH allowed_signers file: one `<principal> namespaces=\"rocmlock-bundle\" "
                              "<key type> <public key>` line per build host")
    with tempfile.TemporaryDirectory(dir=scratch, prefix="verify-") as tmp:
        payload, sig = Path(tmp) / "metadata", Path(tmp) / "metadata.sig"
        payload.write_bytes(data)
        sig.write_bytes(signature)
        found = _run([_ssh_keygen(), "-Y", "find-principals", "-s", str(sig), "-f", str(signers)])
        principals = [line.strip() for line in found.stdout.splitlines() if line.strip()] if found.ok else []
        if not principals:
            raise InputError(f"{shown}: its signature is not by a key of {signers}", hint=hint)
        for principal in principals:
            res = _run([_ssh_keygen(), "-Y", "verify", "-f", str(signers), "-I", principal, "-n", NAMESPACE,
                        "-s", str(sig)], stdin=payload)
            if res.ok:
                return principal
    raise InputError(f"{shown}: bad signature: the metadata is not what {escape(principals[0])} signed",
                     hint=hint)
