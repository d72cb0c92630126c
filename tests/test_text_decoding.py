"""Bytes that are not UTF-8 where rocmlock reads text it did not write (issue 33 item 1): a command's output (a
Latin-1 principal of an allowed_signers file, one node's stray byte in `srun` output) and an old pixi.lock that
`lock --discard-lock` replaces. Each was a UnicodeDecodeError traceback; now one line and exit 2, and one node's
garbage costs no other node's report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile
from rocmlock.util.runner import run_command
from test_pack import fake_node, pack, unpack
from test_report import probe_report


def test_a_commands_output_that_is_not_utf8_is_decoded_with_replacement() -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff\\n'); sys.stderr.buffer.write(b'bad \\xfe byte')"
    result = run_command([sys.executable, "-c", code])
    assert (result.stdout, result.stderr) == ("ok \ufffd\n", "bad \ufffd byte")


def test_a_signers_file_with_a_latin1_principal_is_one_line(locked_ws: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "build"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "build", "-f", str(key)], check=True)
    signed = tmp_path / "mi300x.tar"
    assert pack(locked_ws, signed, "--sign", str(key)) == 0
    signers = tmp_path / "allowed_signers"  # "jürgen@host" as Latin-1: ssh-keygen prints the principal's bytes
    signers.write_bytes(b'j\xfcrgen@host namespaces="rocmlock-bundle" ' + key.with_suffix(".pub").read_bytes())
    capsys.readouterr()
    code = unpack(signed, tmp_path / "env", fake_node(tmp_path / "host", [90402]), "--trusted-signers", str(signers))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(signed) in errors[0], err
    assert not (tmp_path / "env").exists()


FAKE_SRUN = """#!{python}
import sys
good = {good!r}
bad = {bad!r}
out = sys.stdout.buffer
for line in good.splitlines():
    out.write(b"0: " + line.encode() + b"\\n")
out.write(b"1: \\xff\\xfe a library's stray bytes on stdout\\n")
for line in bad.splitlines():
    out.write(b"1: " + line.encode() + b"\\n")
sys.stderr.buffer.write(b"0: PASS: every required check passed\\n1: caf\\xe9\\n")
"""


def test_one_nodes_stray_bytes_cost_only_its_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rocmlock.fleet.slurm_verify import SlurmOptions, verify_fleet

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    report = [json.dumps(probe_report(host, gemm=600.0), indent=2, sort_keys=True) for host in ("gpu-a", "gpu-b")]
    srun.write_text(FAKE_SRUN.format(python=sys.executable, good=report[0], bad=report[1]))
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    logged: list[str] = []
    fleet = verify_fleet(["probe"], SlurmOptions(), tmp_path / "reports", 0.5, logged.append)
    assert [row.report.node for row in fleet.rows] == ["gpu-a"]
    (unreadable,) = fleet.unreadable
    assert Path(unreadable.source).name == "gpu-b.json" and unreadable.reason.startswith("not JSON"), unreadable
    assert (tmp_path / "reports" / "gpu-b.log").read_text() == "caf\ufffd\n"


def test_discard_lock_replaces_a_lock_that_is_not_utf8(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = ws_copy / "pixi.lock"
    lock.write_bytes(b"version: 7\nenvironments:\n  default: \xff\xfe\n")
    assert main(["lock", "--manifest-path", str(ws_copy)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: {lock}: cannot read the lock file: not UTF-8 text (byte 36)", err
    assert main(["lock", "--discard-lock", "--manifest-path", str(ws_copy)]) == 0, capsys.readouterr().err
    assert "dropped the 0 pin(s)" in capsys.readouterr().err
    locked = read_lockfile(lock)
    assert locked is not None and "mi300x" in locked.environments
