"""A bundle's PyPI wheels against hostile wheels and hostile nodes (issue 33, items 6-8).

Real pip installs real wheels built here into the environment's real python (test_pack_pypi's bundle):
pip's refusal of a wheel is shown in pip's own words; a prefix whose path holds a ``#`` or a `` -`` installs;
a ``PYTHONPATH`` on the node (HPC modules set one) cannot make pip skip a wheel, and a wheel pip skipped for
a copy outside the prefix is an error, never "installed".
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from pixilock import wheel_bytes
from rocmlock.cli.main import main
from test_pack_hostile import extracted, rehash, snapshot
from test_pack_pypi import PY, WHEELS, bundle
from test_pack_robust import _one_error

__all__ = ["bundle"]  # the module-scoped fixture, packed once for this module
BETA = WHEELS[1]


def _wheel(files: dict[str, str]) -> bytes:
    """rlk-beta 2.0 as a wheel whose RECORD lists ``files`` too (pip checks paths, not only digests)."""
    dist = f"rlk_beta-{BETA.version}.dist-info"
    files = {"rlk_beta/__init__.py": "VERSION = '2.0'\n", f"{dist}/METADATA": "Metadata-Version: 2.1\nName: "
             "rlk-beta\nVersion: 2.0\n", f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n", **files}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return buf.getvalue()


def _sdist() -> bytes:
    """An sdist (a gzipped tar with a setup.py) under a wheel's name."""
    buf = io.BytesIO()
    data = b"from setuptools import setup\nsetup(name='rlk-beta', version='2.0')\n"
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("rlk_beta-2.0/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


HOSTILE = {
    "record-traversal": (_wheel({"../../../../escaped.txt": "x\n"}), "trying to install outside the target directory"),
    "data-traversal": (_wheel({"rlk_beta-2.0.data/../../../../escaped.txt": "x\n"}), "Unknown scheme key used in"),
    "sdist": (_sdist(), "Wheel 'rlk-beta' located at "),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_wheel_pip_refuses_is_shown_in_pips_words(bundle: Path, tmp_path: Path, case: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # The metadata rewritten to match, as an unsigned bundle allows: pip itself is what refuses the wheel.
    data, says = HOSTILE[case]
    x = extracted(bundle, tmp_path / "x")
    (x / "pypi" / BETA.filename).write_bytes(data)
    rehash(x)
    before = snapshot(tmp_path)
    assert main(["unpack", str(x), "--prefix", str(tmp_path / "work" / "env")]) == 1
    err = capsys.readouterr().err
    line = _one_error(err, after_log=True)
    assert line.startswith(f"error: installing the PyPI wheels into {tmp_path / 'work' / 'env'} failed: pip says: "
                           "ERROR: "), line
    assert says in line and "Installing collected packages" not in line, line
    assert err.strip().splitlines()[-1].startswith("hint: pip refuses a wheel of the bundle: do not install it"), err
    assert "pip >= 22.3" not in err
    # Nothing escaped, and the prefix made for this unpack is gone.
    assert snapshot(tmp_path) - before <= {"work"}, snapshot(tmp_path) - before
    assert not list(Path("/").glob("escaped.txt")) and not (tmp_path / "work" / "env").exists()


@pytest.mark.parametrize("parent", ["exp #3", "run -1"])
def test_a_prefix_path_with_a_hash_or_a_dash_installs_the_wheels(bundle: Path, tmp_path: Path, parent: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / parent / "env"
    assert main(["unpack", str(bundle), "--prefix", str(prefix)]) == 0, capsys.readouterr().err
    assert "and 2 PyPI wheel(s) into" in capsys.readouterr().err
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    assert sorted(p.name for p in site.glob("*.dist-info")) == ["rlk_alpha-1.0.dist-info", "rlk_beta-2.0.dist-info"]


def _elsewhere(root: Path) -> Path:
    """rlk-beta 2.0 installed outside any prefix (a wheel unpacked is an installed distribution)."""
    with zipfile.ZipFile(io.BytesIO(wheel_bytes(BETA))) as zf:
        zf.extractall(root)
    return root


def test_pythonpath_on_the_node_cannot_make_pip_skip_a_wheel(bundle: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_elsewhere(tmp_path / "module-tree")))
    prefix = tmp_path / "env"
    assert main(["unpack", str(bundle), "--prefix", str(prefix)]) == 0, capsys.readouterr().err
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    assert sorted(p.name for p in site.glob("*.dist-info")) == ["rlk_alpha-1.0.dist-info", "rlk_beta-2.0.dist-info"]
    run = subprocess.run([str(prefix / "bin" / "python"), "-c", "import rlk_beta; print(rlk_beta.__file__)"],
                         capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert run.stdout.strip() == str(site / "rlk_beta" / "__init__.py"), run.stderr


def test_a_wheel_pip_takes_from_outside_the_prefix_is_an_error(bundle: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # An environment being updated (pip may uninstall there, so no --ignore-installed) whose site-packages
    # holds a .pth naming a directory outside with rlk-beta 2.0: pip calls it satisfied and installs nothing.
    prefix = tmp_path / "env"
    assert main(["unpack", str(bundle), "--prefix", str(prefix), "--no-verify"]) == 0
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    for path in [*site.glob("rlk_beta*")]:
        subprocess.run(["rm", "-r", str(path)], check=True)
    (site / "outside.pth").write_text(f"{_elsewhere(tmp_path / 'outside')}\n")
    capsys.readouterr()
    assert main(["unpack", str(bundle), "--prefix", str(prefix), "--no-verify"]) == 1
    line = _one_error(capsys.readouterr().err, after_log=True)
    assert line == (f"error: installing the PyPI wheels into {prefix}: pip finished, and 1 wheel(s) are not in the "
                    f"environment: pypi/{BETA.filename}"), line
