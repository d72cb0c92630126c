"""Signed bundles: what unpack says of a signature it did not check, why ssh-keygen refused one, who signed,
and signing with a passphrase-protected key (issue 33, items 3-5).

Real ssh-keygen (OpenSSH 8.4+, for ``SSH_ASKPASS_REQUIRE``), real keys and allowed_signers files made here,
a real ssh-agent, and a real pseudo-terminal for the passphrase prompt.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import rocmlock
from test_pack import fake_node, pack, unpack
from test_pack_hostile import bundle, extracted, keys, refused, signed
from test_pack_robust import _one_error

__all__ = ["bundle", "keys", "signed"]  # module-scoped fixtures, made once for this module
TOOLS = Path(rocmlock.__file__).resolve().parent.parent  # the package under test, for child processes
NOT_CHECKED = "carries a signature (rocmlock-pack.json.sig) that was NOT checked: unpack checks it only with " \
              "--trusted-signers FILE"


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]  # "256 SHA256:... comment (ED25519)"


# ----------------------------------------------------------------------------- unpack: what is said


def test_a_signed_bundle_unpacked_without_trusted_signers_says_it_was_not_checked(
        signed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert unpack(signed, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--json") == 0
    out, err = capsys.readouterr()
    assert f"warning: {signed} {NOT_CHECKED}" in err.splitlines()[0], err
    report = json.loads(out)
    assert report["signature"] == "not checked" and report["signer"] is None


def test_a_garbage_signature_is_not_checked_without_trusted_signers_and_refused_with(
        signed: Path, keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(signed, tmp_path / "x")
    (x / "rocmlock-pack.json.sig").write_bytes(b"garbage\n")
    assert unpack(x, tmp_path / "env", fake_node(tmp_path / "host", [90402])) == 0
    assert f"warning: {x} {NOT_CHECKED}" in capsys.readouterr().err
    line = refused(tmp_path / "again", x, capsys, "--trusted-signers", str(keys["allowed"]))
    assert line == f"error: {x}: its signature is not an OpenSSH signature (ssh-keygen: Couldn't parse signature: " \
                   "missing header)", line


def test_a_verified_bundle_names_its_signer(signed: Path, keys: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    host = fake_node(tmp_path / "host", [90402])
    assert unpack(signed, tmp_path / "env", host, "--trusted-signers", str(keys["allowed"]), "--json") == 0
    out, err = capsys.readouterr()
    key = f"ED25519 key {_fingerprint(keys['build'].with_suffix('.pub'))}"
    assert f"signature ok: the metadata is signed by build@host ({key}), a key of {keys['allowed']}" in err, err
    assert json.loads(out)["signer"] == {"principal": "build@host", "key": key}
    assert json.loads(out)["signature"] == "verified"


RENEW = ("renew that line's valid-before/valid-after in {} (ssh-keygen(1), ALLOWED SIGNERS) if the key is still "
         "trusted, or take a bundle signed by a key valid now")


@pytest.mark.parametrize(("options", "cause", "hint"), [
    ('namespaces="rocmlock-bundle",valid-before="20200101"', "key has expired: verify time ", RENEW),
    ('namespaces="rocmlock-bundle",valid-after="20990101"', "key is not yet valid: verify time ", RENEW),
    ('namespaces="git,file"', 'key is not permitted for use in signature namespace "rocmlock-bundle"',
     ('add rocmlock-bundle to that line\'s namespaces="..." in {} (namespaces="git,rocmlock-bundle"), if that key '
      'is to sign bundles')),
])
def test_a_signers_line_that_refuses_the_key_is_named_with_its_cause(
        signed: Path, keys: dict[str, Path], tmp_path: Path, options: str, cause: str, hint: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    allowed = tmp_path / "allowed_signers"
    # A line ssh-keygen cannot read (it says "FILE:1: invalid key") is no refusal of the signer's key.
    allowed.write_text(f"not a line\nbuild@host {options} {keys['build'].with_suffix('.pub').read_text()}")
    line = refused(tmp_path / "run", signed, capsys, "--trusted-signers", str(allowed), hint=hint.format(allowed))
    assert line.startswith(f"error: {signed}: its signature is by a key of {allowed}, whose line refuses it: "
                           f"{allowed}:2: {cause}"), line
    assert "not by a key of" not in line and "is not what" not in line, line
    assert capsys.readouterr().err == ""  # refused() read it all


# ----------------------------------------------------------------------------- pack --sign: key problems


def test_a_sign_key_ssh_keygen_cannot_use_says_why(locked_ws: Path, keys: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notakey").write_text("not a key\n")
    (tmp_path / "notakey").chmod(0o600)
    (tmp_path / "adir").mkdir()
    (tmp_path / "open").write_bytes(keys["build"].read_bytes())
    (tmp_path / "open").chmod(0o644)
    (tmp_path / "lonely.pub").write_bytes(keys["other"].with_suffix(".pub").read_bytes())  # no private half
    cases = {"notakey": "not an OpenSSH key: ssh-keygen reads neither a private nor a public key from it",
             "adir": "a directory, not a key file",
             "open": "the key file is readable by others, and ssh-keygen will not use it",
             "lonely.pub": "a public key, and ssh-agent holds no private key for it"}
    for name, why in cases.items():
        assert pack(locked_ws, tmp_path / "out.tar", "--sign", str(tmp_path / name)) == 2
        line = _one_error(capsys.readouterr().err)
        assert line == f"error: --sign {tmp_path / name}: {why}", line
        assert not (tmp_path / "out.tar").exists()


# ----------------------------------------------------------------------------- pack --sign: passphrase


@pytest.fixture(scope="module")
def locked_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("pwkey") / "build"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "sesame", "-C", "pw", "-f", str(key)], check=True)
    return key


def _pack_argv(ws: Path, out: Path, key: Path) -> list[str]:
    script = ("import sys; import rocmlock.bundle.signing as s; s.TIMEOUT_S = s.PASSPHRASE_TIMEOUT_S = 3.0; "
              "from rocmlock.cli.main import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", script, "pack", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x", "-o",
            str(out), "--sign", str(key)]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "DISPLAY", "WAYLAND_DISPLAY",
                                                           "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE")}
    return {**env, "PYTHONPATH": str(TOOLS), **extra}


def test_a_passphrase_key_without_terminal_or_agent_fails_at_once(locked_ws: Path, locked_key: Path,
                                                                 tmp_path: Path) -> None:
    start = time.monotonic()
    run = subprocess.run(_pack_argv(locked_ws, tmp_path / "out.tar", locked_key), env=_env(), capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, start_new_session=True, check=False, timeout=120)
    assert run.returncode == 2, run.stderr
    assert _one_error(run.stderr) == f"error: --sign {locked_key}: the key has a passphrase, and there is no " \
                                     "terminal to type it at (and no ssh-agent holding the key)", run.stderr
    assert "hint: load the key into ssh-agent (`eval \"$(ssh-agent)\"; ssh-add KEY`)" in run.stderr
    assert time.monotonic() - start < 60 and not (tmp_path / "out.tar").exists()


@pytest.fixture
def agent(tmp_path: Path, locked_key: Path) -> Iterator[str]:
    """A real ssh-agent holding ``locked_key`` (added with its passphrase through an askpass script)."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        askpass = tmp_path / "askpass"
        askpass.write_text("#!/bin/sh\necho sesame\n")
        askpass.chmod(0o700)
        subprocess.run(["ssh-add", "-q", str(locked_key)], check=True, stdin=subprocess.DEVNULL, env=_env(
            SSH_AUTH_SOCK=str(sock), SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force"))
        yield str(sock)
    finally:
        proc.terminate()
        proc.wait()


@pytest.mark.parametrize("half", ["", ".pub"])
def test_a_passphrase_key_in_ssh_agent_signs_without_asking(locked_ws: Path, locked_key: Path, agent: str,
                                                            tmp_path: Path, half: str) -> None:
    key = locked_key.with_name(locked_key.name + half)
    run = subprocess.run(_pack_argv(locked_ws, tmp_path / "out.tar", key), env=_env(SSH_AUTH_SOCK=agent),
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                         check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.tar").is_file()


def _at_terminal(argv: list[str], answer: bytes | None) -> tuple[int, bytes, list[int]]:
    """Run ``argv`` with a pseudo-terminal as its controlling terminal; type ``answer`` at the passphrase
    prompt (None: type nothing). Returns the exit code, what the terminal showed, its settings afterwards."""
    pid, master = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin, stdout, stderr and /dev/tty
        try:
            os.execve(argv[0], argv, _env())
        finally:
            os._exit(127)
    shown, deadline = b"", time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child has gone
                break
            if not chunk:
                break
            if b"Enter passphrase" in chunk and answer is not None and b"Enter passphrase" not in shown:
                os.write(master, answer)
            shown += chunk
        attrs = termios.tcgetattr(master)
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(master)
    return os.waitstatus_to_exitcode(status), shown, attrs


def test_a_passphrase_typed_at_the_terminal_signs(locked_ws: Path, locked_key: Path, tmp_path: Path) -> None:
    code, shown, attrs = _at_terminal(_pack_argv(locked_ws, tmp_path / "out.tar", locked_key), b"sesame\n")
    assert code == 0, shown.decode(errors="replace")
    assert b"Enter passphrase" in shown and (tmp_path / "out.tar").is_file()
    assert attrs[3] & termios.ECHO


def test_no_passphrase_typed_leaves_the_terminal_as_it_was(locked_ws: Path, locked_key: Path,
                                                          tmp_path: Path) -> None:
    # ssh-keygen turns echo off to read the passphrase; killed at the time limit it cannot turn it back on.
    code, shown, attrs = _at_terminal(_pack_argv(locked_ws, tmp_path / "out.tar", locked_key), None)
    text = shown.decode(errors="replace")
    assert attrs[3] & termios.ECHO, "the terminal was left with echo off"
    assert code == 2, text
    assert f"error: --sign {locked_key}: no passphrase was typed within 3 s" in text, text
    assert not (tmp_path / "out.tar").exists()
