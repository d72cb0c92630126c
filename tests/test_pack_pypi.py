"""A bundle's PyPI wheels installed by unpack, offline and hash-checked (issue 22; pixi-pack's ``pypi/``).

The environment's python is a real interpreter: a conda package holding a copy of this machine's base
``python3.X`` and a ``pyvenv.cfg`` (what ``python -m venv --copies`` makes), so pip really installs into the
prefix. The index serving the wheels is stopped before unpack runs: nothing comes from a network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import rattler_build as rb
from channels import FIXED_TIME, build_channel
from pixilock import Wheel, build_index, pypi_entry, serve, write_pixi_lock
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import LockedPlatform
from test_pack_hostile import extracted, rehash, retar, snapshot
from test_pack_robust import _one_error

LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))
WHEELS = [Wheel("rlk-alpha", "1.0", ("rlk-beta>=2",)), Wheel("rlk-beta", "2.0")]
PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _python_package(channel: Path) -> None:
    """``python`` as a conda package: this machine's base interpreter, copied, with a pyvenv.cfg beside it."""
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    files = channel.parent / "python-files"
    (files / "bin").mkdir(parents=True)
    (files / "bin" / f"python{PY}").write_bytes(base.read_bytes())
    (files / "bin" / f"python{PY}").chmod(0o755)
    (files / "bin" / "python").symlink_to(f"python{PY}")
    (files / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n"
                                      f"version = {sys.version.split()[0]}\n")
    rb.assemble_package(name="python", version=sys.version.split()[0], target_platform="linux-64",
                        build_string="0", output_dir=str(channel / "linux-64"), files_dir=str(files),
                        timestamp=FIXED_TIME, license="PSF-2.0", summary="this machine's python, copied")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pypi")
    channel = root / "channel"
    (channel / "linux-64").mkdir(parents=True)
    _python_package(channel)
    build_channel(channel, [])
    hashes = build_index(root / "index", WHEELS)
    ws = root / "ws"
    ws.mkdir()
    with serve(root / "index") as base:
        (ws / "pixi.toml").write_text(
            f'[workspace]\nname = "w"\nchannels = ["{channel.as_uri()}"]\nplatforms = ["linux-64"]\n\n'
            f'[dependencies]\npython = "*"\n\n[pypi-dependencies]\nrlk-alpha = "==1.0"\n\n'
            f'[pypi-options]\nindex-url = "{base}/simple"\n')
        write_pixi_lock(ws / "pixi.lock", channel, "default", LINUX, ["python"],
                        [pypi_entry(base, w, hashes[w.filename]) for w in WHEELS], [f"{base}/simple"])
        out = root / "b.tar"
        assert main(["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", "default", "-o", str(out)]) == 0
    return out  # the index is gone from here on


def test_unpack_installs_the_bundles_wheels_offline(bundle: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "env"
    assert main(["unpack", str(bundle), "--prefix", str(prefix), "--json"]) == 0
    err = capsys.readouterr().err
    assert "installed 1 packages and 2 PyPI wheel(s) into" in err
    # issue 35: each long step is announced before it runs, in order.
    steps = ["bundle ok:", f"installing 1 packages into {prefix}", "installed 1 packages"]
    at = [err.index(step) for step in steps]
    assert at == sorted(at), err
    run = subprocess.run([str(prefix / "bin" / "python"), "-c",
                          "import rlk_alpha, rlk_beta, sys; print(sys.prefix, rlk_alpha.VERSION, rlk_beta.VERSION)"],
                         capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert run.stdout.split() == [str(prefix), "1.0", "2.0"], run.stderr
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    assert sorted(p.name for p in site.glob("*.dist-info")) == ["rlk_alpha-1.0.dist-info", "rlk_beta-2.0.dist-info"]
    assert not list(tmp_path.glob(".rocmlock-unpack-*"))
    # Nothing in the prefix names the temporary extraction (pip records a wheel given by path in direct_url.json,
    # PEP 610): the same bundle gives the same prefix.
    assert not [p for p in prefix.rglob("*") if p.is_file() and b".rocmlock-unpack" in p.read_bytes()]


def test_a_damaged_wheel_is_refused_before_anything_is_installed(bundle: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    wheel = x / "pypi" / WHEELS[1].filename
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    bad = retar(x, tmp_path / "bad.tar")
    assert main(["unpack", str(bad), "--prefix", str(tmp_path / "env")]) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"pypi/{WHEELS[1].filename}: sha256 " in line and "differs from the bundle's metadata" in line
    assert not (tmp_path / "env").exists()


def test_a_wheel_pip_cannot_install_leaves_no_half_prefix(bundle: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The metadata rewritten to match (as an unsigned bundle allows): the conda packages install, then pip
    # refuses the wheel; the prefix made for this unpack goes, so nothing half-installed passes for an environment.
    x = extracted(bundle, tmp_path / "x")
    (x / "pypi" / WHEELS[1].filename).write_bytes(b"not a zip file")
    rehash(x)
    bad = retar(x, tmp_path / "bad.tar")
    before = snapshot(tmp_path)
    assert main(["unpack", str(bad), "--prefix", str(tmp_path / "env")]) == 1
    line = _one_error(capsys.readouterr().err, after_log=True)
    assert line.startswith(f"error: installing the PyPI wheels into {tmp_path / 'env'} failed: "), line
    assert not (tmp_path / "env").exists() and snapshot(tmp_path) == before


def test_an_undeclared_file_in_pypi_is_refused(bundle: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    x = extracted(bundle, tmp_path / "x")
    (x / "pypi" / "evil-1.0-py3-none-any.whl").write_bytes((x / "pypi" / WHEELS[1].filename).read_bytes())
    assert main(["unpack", str(x), "--prefix", str(tmp_path / "env")]) == 2
    assert "member 'pypi/evil-1.0-py3-none-any.whl' is not in the bundle's metadata" in \
        _one_error(capsys.readouterr().err)
    meta = json.loads((x / "rocmlock-pack.json").read_text())
    assert sorted(m for m in meta["files"] if m.startswith("pypi/")) == sorted(f"pypi/{w.filename}" for w in WHEELS)
    with tarfile.open(bundle) as tar:
        assert json.loads(tar.extractfile("pixi-pack.json").read())["pixi-pack-version"] == "0.7.10"  # type: ignore[union-attr]
