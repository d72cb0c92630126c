"""Signed bundles: the metadata (which holds every member's sha256) signed with an OpenSSH key.

``pack --sign KEY`` runs ``ssh-keygen -Y sign -n rocmlock-bundle`` on the bytes of ``rocmlock-pack.json``
and puts the signature beside it in the bundle; ``unpack --trusted-signers FILE`` (an OpenSSH
``allowed_signers`` file, ssh-keygen(1) "ALLOWED SIGNERS") finds the signer with ``ssh-keygen -Y
find-principals`` and checks the signature with ``ssh-keygen -Y verify`` before anything else of the bundle is
read. OpenSSH is on every node (8.1+ signs; 8.2+ finds principals): no new Python dependency, and the
keys are the ones a platform team already deploys with. Both commands read files only: the data goes
through a file in the caller's scratch directory, given to ``ssh-keygen`` as its stdin.

``-Y sign -f KEY`` signs with ssh-agent's copy of KEY when the agent (``SSH_AUTH_SOCK``) holds it (KEY may
then be the public half), else loads KEY itself and asks for a passphrase (ssh-keygen.c ``sig_sign``,
``load_sign_key``; readpass.c). rocmlock first signs with no way to ask (``SSH_ASKPASS_REQUIRE=force``, OpenSSH
8.4+, with an askpass that answers nothing): an agent's key or a key without a passphrase signs at once. Only a
key that needs its passphrase is signed again at the terminal (``/dev/tty``), whose settings are restored
afterwards whatever happens (ssh-keygen turns echo off and cannot restore it when killed); with no terminal
it is refused at once, saying to load the key into ssh-agent.

ssh-keygen says why it refuses a signature on stderr, naming the allowed_signers line (``FILE:N: key has
expired: ...``, ``FILE:N: key is not permitted for use in signature namespace ...``; sshsig.c, OpenSSH 9.2):
those lines are the message, so an expired or namespace-restricted signer is named as such.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmlock.errors import InputError, OperationError
from rocmlock.util.runner import CommandError, CommandResult, run_command
from rocmlock.util.text import escape

NAMESPACE = "rocmlock-bundle"
TIMEOUT_S = 60.0
# How long a person at the terminal has to type the key's passphrase.
PASSPHRASE_TIMEOUT_S = 300.0
SSH_KEYGEN = "ssh-keygen"
AGENT_HINT = ("load the key into ssh-agent (`eval \"$(ssh-agent)\"; ssh-add KEY`) and pack again with SSH_AUTH_SOCK "
              "set: ssh-keygen signs with the agent's copy (--sign may then name KEY.pub)")
_GOOD = re.compile(r'Good "[^"]*" signature for .* with (\S+ key \S+)')


@dataclass(frozen=True)
class Signer:
    """Who signed a bundle: the principal of the allowed_signers line and the key, as ssh-keygen names it."""

    principal: str
    key: str

    def __str__(self) -> str:
        return f"{escape(self.principal)} ({escape(self.key)})" if self.key else escape(self.principal)


def _ssh_keygen() -> str:
    found = shutil.which(SSH_KEYGEN)
    if found is None:
        raise OperationError("ssh-keygen (OpenSSH) is not on PATH: it signs and verifies bundles",
                             hint="install OpenSSH's client tools (Debian/Ubuntu: openssh-client)")
    return found


def _run(argv: list[str], stdin: Path | None = None, env: Mapping[str, str] | None = None,
         timeout: float = TIMEOUT_S) -> CommandResult:
    try:
        return run_command(argv, timeout=timeout, check=False, stdin=stdin, env=env)
    except CommandError as exc:
        raise OperationError(str(exc)) from None


# ----------------------------------------------------------------------------- sign


def sign_bytes(data: bytes, key: Path, scratch: Path) -> bytes:
    """The OpenSSH signature (armored text) of ``data`` by the private ``key`` (or a public key whose private
    half ssh-agent holds), namespace ``rocmlock-bundle``."""
    if key.is_dir() or not key.is_file():
        what = "a directory, not a key file" if key.is_dir() else "no such file"
        raise InputError(f"--sign {key}: {what}", hint="pass an OpenSSH private key (ssh-keygen -t ed25519)")
    if not os.access(key, os.R_OK):  # ssh-keygen would say "Couldn't load public key: No such file or directory"
        raise InputError(f"--sign {key}: cannot read it (permission denied)",
                         hint="sign as the key's owner, or pass a key you can read")
    # The terminal's settings are put back whatever ssh-keygen did to them (an OpenSSH before 8.4 ignores
    # SSH_ASKPASS_REQUIRE and may prompt there even on the first try).
    with tempfile.TemporaryDirectory(dir=scratch, prefix="sign-") as tmp, _terminal() as tty:
        payload = Path(tmp) / "metadata"
        payload.write_bytes(data)
        argv = [_ssh_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(payload)]
        # No way to ask: the passphrase prompt goes to an askpass that answers nothing (`false`, or none on
        # PATH: ssh-keygen then takes an empty answer too), so only an agent's key or one without passphrase signs.
        res = _run(argv, stdin=Path(os.devnull),
                   env={**os.environ, "SSH_ASKPASS_REQUIRE": "force", "SSH_ASKPASS": "false"})
        if not res.ok and "incorrect passphrase" in res.stderr:
            res = _sign_at_terminal(argv, key, tty)
        signature = payload.with_name("metadata.sig")
        if not res.ok or not signature.is_file():
            problem, hint = _sign_problem(res)
            raise InputError(f"--sign {key}: {problem}", hint=hint)
        return signature.read_bytes()


def _sign_at_terminal(argv: list[str], key: Path, tty: int | None) -> CommandResult:
    """``argv`` run again where ssh-keygen can ask for the passphrase at the terminal ``tty``; no terminal is an
    InputError at once."""
    if tty is None:
        raise InputError(f"--sign {key}: the key has a passphrase, and there is no terminal to type it at "
                         "(and no ssh-agent holding the key)", hint=AGENT_HINT)
    try:
        return run_command(argv, timeout=PASSPHRASE_TIMEOUT_S, check=False)
    except CommandError:
        os.write(tty, b"\n")
        raise InputError(f"--sign {key}: no passphrase was typed within {PASSPHRASE_TIMEOUT_S:.0f} s",
                         hint=AGENT_HINT) from None


@contextlib.contextmanager
def _terminal() -> Iterator[int | None]:
    """The controlling terminal (None without one), its settings restored when the block ends."""
    import termios

    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        yield None
        return
    try:
        saved = termios.tcgetattr(tty)
    except termios.error:
        saved = None
    try:
        yield tty
    finally:
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(tty, termios.TCSANOW, saved)
        os.close(tty)


def _sign_problem(res: CommandResult) -> tuple[str, str]:
    """What ssh-keygen's refusal to sign means, and the fix."""
    err = res.stderr
    plain = "pass an OpenSSH private key (ssh-keygen -t ed25519), readable only by you"
    if "are too open" in err:
        return "the key file is readable by others, and ssh-keygen will not use it", "chmod 600 the key file"
    if "No private key found for public key" in err:
        return "a public key, and ssh-agent holds no private key for it", AGENT_HINT
    if "Couldn't load public key" in err:
        return "not an OpenSSH key: ssh-keygen reads neither a private nor a public key from it", plain
    if "incorrect passphrase" in err:
        return "the passphrase typed is not the key's", AGENT_HINT
    return f"ssh-keygen could not sign: {escape(res.last_error_line())}", plain


# ----------------------------------------------------------------------------- verify


def verify_bytes(data: bytes, signature: bytes | None, signers: Path, shown: Path, scratch: Path) -> Signer:
    """Who of ``signers`` signed ``data``; an InputError (exit 2) for a bundle without a signature, a
    signature of an unknown key or of a key its line does not allow now, or one that does not match ``data``."""
    hint = "take bundles only from your build host: pack them there with `rocmlock pack --sign KEY`"
    if signature is None:
        raise InputError(f"{shown}: not signed, and --trusted-signers {signers} asks for a signature", hint=hint)
    if not signers.is_file():
        raise InputError(f"--trusted-signers {signers}: " + ("a directory, not an allowed_signers file"
                                                              if signers.is_dir() else "no such file"),
                         hint="an OpenSSH allowed_signers file: one `<principal> namespaces=\"rocmlock-bundle\" "
                              "<key type> <public key>` line per build host")
    with tempfile.TemporaryDirectory(dir=scratch, prefix="verify-") as tmp:
        payload, sig = Path(tmp) / "metadata", Path(tmp) / "metadata.sig"
        payload.write_bytes(data)
        sig.write_bytes(signature)
        found = _run([_ssh_keygen(), "-Y", "find-principals", "-s", str(sig), "-f", str(signers)])
        principals = [line.strip() for line in found.stdout.splitlines() if line.strip()] if found.ok else []
        if not principals:
            raise _not_found(found, signers, shown, hint)
        refusals: list[str] = []
        for principal in principals:
            res = _run([_ssh_keygen(), "-Y", "verify", "-f", str(signers), "-I", principal, "-n", NAMESPACE,
                        "-s", str(sig)], stdin=payload)
            if res.ok:
                good = _GOOD.search(res.stdout)
                return Signer(principal, good.group(1) if good else "")
            refusals += _line_causes(res, signers)
    if refusals:
        raise InputError(f"{shown}: its signature is by a key of {signers}, whose line refuses it: {refusals[0]}",
                         hint=_line_hint(refusals[0], signers))
    raise InputError(f"{shown}: bad signature: the metadata is not what {escape(principals[0])} signed",
                     hint=hint)


# What ssh-keygen says of a line that names the key but does not allow it now (sshsig.c; as OpenSSH 9.2 says it).
_REFUSALS = ("key has expired", "key is not yet valid", "not permitted for use in signature namespace")


def _line_causes(res: CommandResult, signers: Path) -> list[str]:
    """ssh-keygen's refusals by lines of ``signers`` (``FILE:N: why``), escaped; not its complaints about
    lines it cannot read (``FILE:1: invalid key``), which name no signer."""
    return [escape(line.strip()) for line in res.stderr.splitlines()
            if line.startswith(f"{signers}:") and any(r in line for r in _REFUSALS)]


def _line_hint(cause: str, signers: Path) -> str:
    if "signature namespace" in cause:
        return (f"add {NAMESPACE} to that line's namespaces=\"...\" in {signers} (namespaces=\"git,{NAMESPACE}\"), "
                "if that key is to sign bundles")
    return (f"renew that line's valid-before/valid-after in {signers} (ssh-keygen(1), ALLOWED SIGNERS) if the key "
            "is still trusted, or take a bundle signed by a key valid now")


def _not_found(found: CommandResult, signers: Path, shown: Path, hint: str) -> InputError:
    """Why ``find-principals`` found no signer: a line of ``signers`` that refuses the key now (expired, not
    yet valid), a signature that is not one, or a key no line names."""
    causes = _line_causes(found, signers)
    if causes:
        return InputError(f"{shown}: its signature is by a key of {signers}, whose line refuses it: {causes[0]}",
                          hint=_line_hint(causes[0], signers))
    if "Couldn't parse signature" in found.stderr or "Couldn't verify signature" in found.stderr:
        return InputError(f"{shown}: its signature is not an OpenSSH signature (ssh-keygen: "
                          f"{escape(_first(found.stderr))})", hint=hint)
    return InputError(f"{shown}: its signature is not by a key of {signers}", hint=hint)


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
