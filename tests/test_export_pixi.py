"""`rocmlock export` from a pixi.lock that pixi wrote: PyPI packages, source packages, and pip accepting the result.

Costs about 10 s: one small solve, four `pip install --dry-run` runs against an index on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pixilock import Wheel, build_index, pypi_entry, serve, write_pixi_lock
from rattler.explicit_environment import ExplicitEnvironmentSpec
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import LockedPlatform, read_lockfile

WHEELS = [Wheel("rlk-alpha", "1.0", ("rlk-beta>=2",)), Wheel("rlk-beta", "2.0"),
          Wheel("rlk-gamma", "1.0"), Wheel("rlk-gamma", "1.1")]
LOCKED = ["rlk-alpha", "rlk-beta", "rlk-gamma"]  # rlk-gamma pinned at 1.0 although the index has 1.1
LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The PEP 503 index of WHEELS, served for the module: (base URL, wheel file -> sha256)."""
    root = tmp_path_factory.mktemp("index")
    hashes = build_index(root, WHEELS)
    with serve(root) as base:
        yield base, hashes


def _manifest(forge: Path, base: str, extra: str = "") -> str:
    return (f'[workspace]\nname = "pypi-ws"\nchannels = ["{forge.as_uri()}"]\nplatforms = ["linux-64"]\n\n'
            f'[dependencies]\npython = "3.12.*"\n\n[pypi-dependencies]\nrlk-alpha = "==1.0"\nrlk-gamma = "<1.1"\n\n'
            f'[pypi-options]\nindex-url = "{base}/simple"\n{extra}')


def _pypi_entries(base: str, hashes: dict[str, str]) -> list[dict[str, Any]]:
    return [pypi_entry(base, w, hashes[w.filename]) for w in WHEELS if (w.name, w.version) != ("rlk-gamma", "1.1")]


def _workspace(root: Path, channels: dict[str, Path], index: tuple[str, dict[str, str]],
               extra_manifest: str = "", extra_packages: list[dict[str, Any]] = ()) -> Path:
    base, hashes = index
    root.mkdir(parents=True, exist_ok=True)
    (root / "pixi.toml").write_text(_manifest(channels["forge"], base, extra_manifest))
    write_pixi_lock(root / "pixi.lock", channels["forge"], "default", LINUX, ["python 3.12.*"],
                    _pypi_entries(base, hashes), [f"{base}/simple"], list(extra_packages))
    return root


@pytest.fixture
def pypi_ws(tmp_path: Path, channels: dict[str, Path], index: tuple[str, dict[str, str]]) -> Path:
    return _workspace(tmp_path / "ws", channels, index)


def _pip_dry_run(requirements: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """pip resolving ``requirements`` with nothing from this machine's pip configuration or site-packages."""
    report = requirements.parent / "pip-report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check",
           "--dry-run", "--ignore-installed", "--report", str(report), *extra, "-r", str(requirements)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=requirements.parent, check=False)


def _report(requirements: Path) -> dict[str, tuple[str, str]]:
    data = json.loads((requirements.parent / "pip-report.json").read_text())
    return {item["metadata"]["name"]: (item["metadata"]["version"], item["download_info"]["url"])
            for item in data["install"]}


def test_lock_fixture_is_what_pixi_writes(pypi_ws: Path) -> None:
    text = (pypi_ws / "pixi.lock").read_text()
    assert text.startswith("version: 7\n") and "    indexes:\n    - http://127.0.0.1:" in text
    assert "- pypi: http://127.0.0.1:" in text and "  sha256: " in text and "  requires_dist:\n  - rlk-beta>=2" in text
    locked = read_lockfile(pypi_ws / "pixi.lock")
    assert locked is not None
    assert [p.name for p in locked.environments["default"].pypi["linux-64"]] == LOCKED


def test_export_writes_pip_pins_and_a_hash_checked_requirements_file(
        pypi_ws: Path, index: tuple[str, dict[str, str]]) -> None:
    base, hashes = index
    assert main(["export", "--manifest-path", str(pypi_ws / "pixi.toml")]) == 0
    out = pypi_ws / "envs" / "default"
    assert sorted(p.name for p in out.iterdir()) == ["conda-linux-64.lock", "conda-lock.yml", "environment.yml",
                                                      "requirements-linux-64.txt"]
    # conda-lock.yml holds the conda packages only; its header sends pip to the requirements file
    assert "requirements-<platform>.txt (linux-64)" in (out / "conda-lock.yml").read_text()
    env = yaml.safe_load((out / "environment.yml").read_text())
    conda, pip = env["dependencies"][:-1], env["dependencies"][-1]["pip"]
    # conda/env/env.py adds an unpinned `pip` to a pip: section's environment that lists none: said in the file.
    assert "no conda `pip` is locked: conda adds an unpinned `pip`" in (out / "environment.yml").read_text()
    assert "python=3.12.7=h0_0_cpython" in conda
    assert pip == [f"--index-url {base}/simple", "rlk-alpha==1.0", "rlk-beta==2.0", "rlk-gamma==1.0"]
    req = (out / "requirements-linux-64.txt").read_text()
    for wheel in WHEELS[:3]:
        assert f"{wheel.name}=={wheel.version} \\\n    --hash=sha256:{hashes[wheel.filename]}\n" in req
    assert "requirements-linux-64.txt" in (out / "conda-linux-64.lock").read_text()
    assert str(ExplicitEnvironmentSpec.from_path(out / "conda-linux-64.lock").platform) == "linux-64"


def test_pip_installs_exactly_the_locked_files_with_require_hashes(
        pypi_ws: Path, index: tuple[str, dict[str, str]]) -> None:
    base, _ = index
    assert main(["export", "--manifest-path", str(pypi_ws / "pixi.toml")]) == 0
    req = pypi_ws / "envs" / "default" / "requirements-linux-64.txt"
    result = _pip_dry_run(req, "--require-hashes")
    assert result.returncode == 0, result.stderr
    assert _report(req) == {w.name: (w.version, f"{base}/files/{w.filename}") for w in WHEELS[:3]}
    # The hashes are checked: one wrong digest and pip refuses the whole install.
    tampered = req.read_text().splitlines()
    tampered[next(i for i, line in enumerate(tampered) if "--hash=" in line)] = "    --hash=sha256:" + "0" * 64
    req.write_text("\n".join(tampered) + "\n")
    bad = _pip_dry_run(req, "--require-hashes")
    assert bad.returncode != 0 and "DO NOT MATCH THE HASHES" in bad.stdout + bad.stderr


def test_environment_yml_pip_section_is_what_conda_hands_to_pip(
        pypi_ws: Path, index: tuple[str, dict[str, str]]) -> None:
    # conda writes the pip: list into a requirements file and runs `python -m pip install -U -r` on it
    # (conda/env/installers/pip.py); the same list must resolve to exactly the locked versions. (``index``
    # serves the wheels; the pip: section names the index itself.)
    assert main(["export", "--manifest-path", str(pypi_ws / "pixi.toml")]) == 0
    env = yaml.safe_load((pypi_ws / "envs" / "default" / "environment.yml").read_text())
    conda_req = pypi_ws / "condaenv.requirements.txt"
    conda_req.write_text("\n".join(env["dependencies"][-1]["pip"]))
    result = _pip_dry_run(conda_req)
    assert result.returncode == 0, result.stderr
    assert {n: v for n, (v, _) in _report(conda_req).items()} == {w.name: w.version for w in WHEELS[:3]}


# The manifest side of SOURCES: a pixi-build package and two PyPI sources (pixi_spec toml.rs, pixi_pypi_spec).
SOURCE_DEPS = """
[feature.src.dependencies]
rlk-native = { path = "native" }

[feature.src.pypi-dependencies]
rlk-local = { path = "./rlk-local", editable = true }
rlk-delta = { git = "https://example.invalid/rlk/delta.git", rev = "0123456789abcdef0123456789abcdef01234567" }

[environments]
default = ["src"]
"""
SOURCES = [
    {"conda_source": "rlk-native[38d076cf] @ native", "variants": {"target_platform": "linux-64"},
     "depends": ["python >=3.12"]},
    {"pypi": "./rlk-local", "name": "rlk-local"},
    {"pypi": "git+https://example.invalid/rlk/delta.git#0123456789abcdef0123456789abcdef01234567",
     "name": "rlk-delta", "version": "0.3.0"},
]


def test_source_packages_are_refused_in_one_line(
        tmp_path: Path, channels: dict[str, Path], index: tuple[str, dict[str, str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    ws = _workspace(tmp_path / "ws", channels, index, SOURCE_DEPS, SOURCES)
    assert main(["export", "--manifest-path", str(ws / "pixi.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and "packages that no export can pin (built from source, without a hash, " \
        "or a URL that may hold a secret)" in err[0]
    for name, why in (("rlk-native", "conda, built from source"), ("rlk-local", "pypi, a local path"),
                      ("rlk-delta", "pypi, a git checkout")):
        assert f"{name} ({why})" in err[0]
    assert err[1].startswith("hint: ") and "--skip-source" in err[1] and len(err) == 2
    assert not (ws / "envs").exists()


def test_skip_source_exports_the_rest_and_names_what_it_left_out(
        tmp_path: Path, channels: dict[str, Path], index: tuple[str, dict[str, str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    ws = _workspace(tmp_path / "ws", channels, index, SOURCE_DEPS, SOURCES)
    assert main(["export", "--manifest-path", str(ws / "pixi.toml"), "--skip-source"]) == 0
    err = capsys.readouterr().err
    assert "warning: environment 'default' [linux-64]: left out source package(s) rlk-delta" in err
    out = ws / "envs" / "default"
    for name in ("environment.yml", "conda-linux-64.lock"):
        assert "# not exported (--skip-source" in (out / name).read_text()
        assert "rlk-native (conda, built from source)" in (out / name).read_text()
    req = (out / "requirements-linux-64.txt").read_text()
    assert "rlk-local" not in req and "rlk-delta" not in req and "rlk-alpha==1.0" in req
    first = (out / "requirements-linux-64.txt").read_bytes()
    assert main(["export", "--manifest-path", str(ws / "pixi.toml"), "--skip-source", "--check"]) == 0
    assert (out / "requirements-linux-64.txt").read_bytes() == first


def test_install_says_what_of_a_pixi_lock_it_leaves_to_pip(
        pypi_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "prefix"
    assert main(["install", "--manifest-path", str(pypi_ws / "pixi.toml"), "-e", "default",
                 "--prefix", str(prefix), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["left_out"] == ["rlk-alpha==1.0 (pypi)", "rlk-beta==2.0 (pypi)",
                                               "rlk-gamma==1.0 (pypi)"]
    assert "warning: 3 package(s) of pixi.lock are not conda packages and are not installed" in out.err
    assert "envs/default/requirements-linux-64.txt" in out.err
    assert (prefix / "conda-meta").is_dir()


def test_pack_bundles_the_locks_wheels_as_pixi_pack_lays_them_out(
        pypi_ws: Path, index: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # pixi-pack 0.7.10 (src/pack.rs): each wheel under pypi/<file name>, environment.yml's pip section from there
    # only; pixi-unpack (src/unpack.rs) installs every file of pypi/. tests/test_pack_pypi.py installs them.
    import tarfile

    out = tmp_path / "b.tar"
    assert main(["pack", "--manifest-path", str(pypi_ws / "pixi.toml"), "-e", "default", "-o", str(out)]) == 0
    assert "packed 1 package(s) and 3 PyPI wheel(s) of 'default'" in capsys.readouterr().err
    _, hashes = index
    with tarfile.open(out) as tar:
        wheels = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.name.startswith("pypi/")  # type: ignore[union-attr]
                  and m.isfile()}
        yml = tar.extractfile("environment.yml").read().decode()  # type: ignore[union-attr]
        meta = json.loads(tar.extractfile("rocmlock-pack.json").read())  # type: ignore[union-attr]
    expected = {f"pypi/{w.filename}": hashes[w.filename] for w in WHEELS if (w.name, w.version) != ("rlk-gamma", "1.1")}
    assert {m: hashlib.sha256(b).hexdigest() for m, b in wheels.items()} == expected
    assert {m: meta["files"][m] for m in expected} == expected
    assert yml.split("  - pip:\n")[1] == ("    - --no-index\n    - --find-links ./pypi\n    - rlk-alpha==1.0\n"
                                          "    - rlk-beta==2.0\n    - rlk-gamma==1.0\n")


def test_pack_refuses_source_packages_unless_told_to_leave_them_out(
        tmp_path: Path, channels: dict[str, Path], index: tuple[str, dict[str, str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    ws = _workspace(tmp_path / "ws", channels, index, SOURCE_DEPS, SOURCES)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", "default", "-o", str(out / "b.tar")]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {ws / 'pixi.lock'}: environment 'default' [linux-64]: package(s) that are not "
                             "wheels or conda binaries") and len(err) == 2, err
    for name in ("rlk-native (conda, built from source)", "rlk-local (pypi, a local path)",
                 "rlk-delta (pypi, a git checkout)"):
        assert name in err[0]
    assert "--ignore-pypi-non-wheel" in err[1] and not list(out.iterdir())
    assert main([*argv, "--ignore-pypi-non-wheel"]) == 0
    err2 = capsys.readouterr().err
    assert "warning: --ignore-pypi-non-wheel: 3 package(s) of pixi.lock are not conda packages" in err2
    assert "rlk-delta (pypi, a git checkout)" in err2 and "and 3 PyPI wheel(s)" in err2
