"""Exports at the edges: an environment without packages, and a local find-links directory.

Costs about 3 s (one small solve, two `pip install --dry-run` runs with no index).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pixilock import Wheel, build_index, pypi_entry, write_pixi_lock
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import LockedPlatform

LINUX = LockedPlatform("linux-64", "linux-64", ("__unix=0=0", "__linux=4.18", "__glibc=2.28"))
WHEELS = [Wheel("rlk-alpha", "1.0", ("rlk-beta>=2",)), Wheel("rlk-beta", "2.0")]


def test_an_environment_without_packages_has_an_empty_dependency_list(tmp_path: Path, channels: dict[str, Path]) -> None:
    # conda 26.7.1 conda/env/env.py (dependencies_validation, via get_schema_errors) requires `dependencies` to
    # be a list: the CEP 24 loader (conda/env/specs/cep_24.py) refuses `dependencies:` with nothing under it
    # (YAML null), and from_yaml warns that such files will be rejected. pixi's docs have such workspaces
    # (docs/source_files/pixi_workspaces/introduction/init: channels and platforms, no dependencies).
    (tmp_path / "pixi.toml").write_text(f'[workspace]\nname = "empty"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                        'platforms = ["linux-64"]\n')
    assert main(["lock", "--manifest-path", str(tmp_path)]) == 0
    env = yaml.safe_load((tmp_path / "envs" / "default" / "environment.yml").read_text())
    assert env["dependencies"] == [] and env["name"] == "default"



def _envs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "envs").rglob("*")) if p.is_file()}


@pytest.mark.parametrize("deps", ["", '[target.linux-64-gfx942.dependencies]\npython = "3.12.*"\n'],
                         ids=["no-packages", "packages-on-one-platform"])
def test_lock_and_export_agree_on_a_platform_without_packages(tmp_path: Path, channels: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch, deps: str) -> None:
    # pixi.lock has no entry for an environment x platform without packages (rattler writes `packages: {}`), and
    # pixi reads that as an empty list: pixi 0.77 crates/pixi_core/src/lock_file/outdated.rs
    # (find_unsatisfiable_targets) re-solves an environment only when it is missing from the lock or unsatisfied,
    # and satisfiability/platform.rs (verify_platform_satisfiability) takes a platform's packages as
    # `lock_platform.and_then(|p| locked_environment.packages(p))`, flattened: absent is empty, satisfied when the
    # manifest asks for nothing there, and `pixi install` makes an empty prefix.
    # So the exports of such a platform exist (an empty environment is one conda can create) whichever command
    # wrote them, and a re-lock does not solve it again.
    from lockhelpers import PLATFORMS
    from rocmlock.lock.pipeline import lock_workspace

    monkeypatch.setenv("ROCMLOCK_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(f'[workspace]\nname = "e"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                    f'{PLATFORMS}\n{deps}')
    assert main(["lock", "--manifest-path", str(root)]) == 0
    by_lock = _envs(root)
    # conda-lock.yml has one solution per subdir: written when both linux-64 platforms lock the same (none)
    same = ["envs/default/conda-lock.yml"] if not deps else []
    assert sorted(by_lock) == ["envs/default/conda-linux-64-gfx90a.lock", "envs/default/conda-linux-64-gfx942.lock",
                               *same, "envs/default/environment.yml"]
    assert main(["export", "--check", "--manifest-path", str(root)]) == 0
    shutil.rmtree(root / "envs")
    assert main(["export", "--manifest-path", str(root)]) == 0
    assert _envs(root) == by_lock
    assert main(["lock", "--check", "--manifest-path", str(root)]) == 0
    shutil.rmtree(tmp_path / "cache")  # no stamp: the lock itself must read as complete and satisfied
    result = lock_workspace(root)
    assert result.solved == () and result.not_locked == () and result.up_to_date
    # ... and `rocmlock install` (pixi install --locked's stand-in) makes the empty prefix pixi would.
    prefix = tmp_path / "prefix"
    assert main(["install", "-e", "default", "-p", "linux-64-gfx90a", "--prefix", str(prefix),
                 "--manifest-path", str(root)]) == 0
    assert prefix.is_dir() and not [p for p in prefix.rglob("*") if p.is_file() and p.suffix == ".json"
                                    and p.parent.name == "conda-meta" and p.name != "history"]


def _find_links_workspace(root: Path, forge: Path) -> Path:
    """pixi's examples/pypi-find-links shape: ``find-links = [{ path = "./links" }]`` and the wheels there."""
    hashes = build_index(root / "index", WHEELS)
    (root / "links").mkdir(parents=True)
    for wheel in WHEELS:
        shutil.copy2(root / "index" / "files" / wheel.filename, root / "links" / wheel.filename)
    (root / "pixi.toml").write_text(
        f'[workspace]\nname = "links"\nchannels = ["{forge.as_uri()}"]\nplatforms = ["linux-64"]\n\n'
        '[workspace.pypi-options]\nfind-links = [{ path = "./links" }]\n\n'
        '[dependencies]\npython = "3.12.*"\n\n[pypi-dependencies]\nrlk-alpha = "==1.0"\n')
    base = "https://files.example.invalid"
    write_pixi_lock(root / "pixi.lock", forge, "default", LINUX, ["python 3.12.*"],
                    [pypi_entry(base, w, hashes[w.filename]) for w in WHEELS], ["https://pypi.org/simple"])
    return root


def _pip_no_index(requirements: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--no-cache-dir", "--dry-run",
           "--ignore-installed", "--disable-pip-version-check", "-r", str(requirements)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def test_a_local_find_links_directory_is_written_relative_so_exports_do_not_depend_on_the_checkout(
        tmp_path: Path, channels: dict[str, Path]) -> None:
    # The same workspace in two checkouts must export byte-identical files (else `export --check` fails in
    # every CI checkout but the author's). pip reads a relative --find-links of a requirements file against
    # that file's directory (pip/_internal/req/req_file.py, handle_option_line: relative_to_reqs_file), and
    # conda writes an environment.yml's pip: section to a file in the environment.yml's directory and runs
    # pip there (conda/env/installers/pip.py, workdir from get_pip_workdir; conda_env/installers/pip.py
    # before 24.x): a path relative to envs/<env>/ serves both.
    one = _find_links_workspace(tmp_path / "one", channels["forge"])
    assert main(["export", "--manifest-path", str(one)]) == 0
    two = tmp_path / "elsewhere" / "two"
    shutil.copytree(one, two, ignore=shutil.ignore_patterns("envs", ".rocmlock"))
    assert main(["export", "--manifest-path", str(two)]) == 0
    for name in ("environment.yml", "requirements-linux-64.txt", "conda-linux-64.lock"):
        a = (one / "envs" / "default" / name).read_bytes()
        assert a == (two / "envs" / "default" / name).read_bytes(), name
        assert str(tmp_path).encode() not in a or name.startswith("conda-"), name  # conda URLs name the channel
    assert main(["export", "--check", "--manifest-path", str(two)]) == 0
    out = two / "envs" / "default"
    assert "--find-links ../../links\n" in (out / "requirements-linux-64.txt").read_text()
    # pip finds the wheels from anywhere, with the hashes checked.
    result = _pip_no_index(out / "requirements-linux-64.txt", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Would install rlk-alpha-1.0 rlk-beta-2.0" in result.stdout
    # The pip: section as conda hands it to pip: a file beside environment.yml, pip run in that directory.
    env = yaml.safe_load((out / "environment.yml").read_text())
    conda_req = out / "condaenv.tmp.requirements.txt"
    conda_req.write_text("\n".join(env["dependencies"][-1]["pip"]))
    result = _pip_no_index(conda_req, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Would install rlk-alpha-1.0 rlk-beta-2.0" in result.stdout


def test_an_unreadable_lock_gets_a_hint_that_keeps_it(tmp_path: Path, channels: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # A lock that only pixi can write (PyPI or source packages) must not be answered with "delete it": the
    # hint names what to do instead. A newer format than py-rattler reads is named as such.
    (tmp_path / "pixi.toml").write_text(f'[workspace]\nname = "w"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                        'platforms = ["linux-64"]\n')
    for text, expected in (("version: 99\n", "newer"), ("version: 7\nplatforms: [\n", "git")):
        (tmp_path / "pixi.lock").write_text(text)
        assert main(["export", "--manifest-path", str(tmp_path)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"error: {tmp_path / 'pixi.lock'}: cannot read the lock file") and len(err) == 2
        assert "delete" not in err[1] and expected in err[1], err


@pytest.mark.parametrize(("options", "key"), [
    ('index-url = "not a url"', "pypi-options.index-url"),
    ('extra-index-urls = ["pypi.example/simple"]', "pypi-options.extra-index-urls[0]"),
    ('find-links = [{ url = "wheels here" }]', "pypi-options.find-links[0].url"),
    # url::Url::parse refuses these too: an unclosed IPv6 host, a port past 65535.
    ('index-url = "https://[::1/simple"', "pypi-options.index-url"),
    ('extra-index-urls = ["https://pypi.example:99999/simple"]', "pypi-options.extra-index-urls[0]"),
])
def test_pypi_options_urls_must_be_urls(tmp_path: Path, channels: dict[str, Path], options: str, key: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # pixi_manifest/src/pypi/pypi_options.rs: index-url, extra-index-urls and find-links `url` are `Url`s
    # (an absolute URL with a scheme); pixi refuses the manifest otherwise, and pip would fail only at install.
    (tmp_path / "pixi.toml").write_text(f'[workspace]\nname = "w"\nchannels = ["{channels["forge"].as_uri()}"]\n'
                                        f'platforms = ["linux-64"]\n\n[pypi-options]\n{options}\n')
    assert main(["export", "--manifest-path", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {tmp_path / 'pixi.toml'}: key '{key}' ") and "URL" in err[0], err


def test_a_direct_url_pypi_package_is_pinned_by_url_and_hash(tmp_path: Path, channels: dict[str, Path]) -> None:
    # pixi records a `{ url = ... }` PyPI dependency as `pypi: direct+<url>` (pixi_core/src/lock_file/resolve/
    # pypi.rs; read back in satisfiability/pypi.rs by stripping `direct+`); pip takes `name @ <url>` with its hash.
    from pixilock import serve

    hashes = build_index(tmp_path / "index", WHEELS)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pixi.toml").write_text(
        f'[workspace]\nname = "d"\nchannels = ["{channels["forge"].as_uri()}"]\nplatforms = ["linux-64"]\n\n'
        '[dependencies]\npython = "3.12.*"\n')
    with serve(tmp_path / "index") as base:
        entries = [pypi_entry(base, w, hashes[w.filename]) for w in WHEELS]
        entries[1]["pypi"] = "direct+" + entries[1]["pypi"]
        del entries[1]["index"]
        write_pixi_lock(tmp_path / "ws" / "pixi.lock", channels["forge"], "default", LINUX, ["python 3.12.*"],
                        entries, [f"{base}/simple"])
        assert "direct+http://127.0.0.1" in (tmp_path / "ws" / "pixi.lock").read_text()
        assert main(["export", "--manifest-path", str(tmp_path / "ws")]) == 0
        req = tmp_path / "ws" / "envs" / "default" / "requirements-linux-64.txt"
        text = req.read_text()
        assert f"rlk-beta @ {base}/files/{WHEELS[1].filename} \\\n    --hash=sha256:{hashes[WHEELS[1].filename]}\n" \
            in text and "direct+" not in text
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--dry-run", "--ignore-installed",
               "--disable-pip-version-check", "--index-url", f"{base}/simple", "--require-hashes", "-r", str(req)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Would install rlk-alpha-1.0 rlk-beta-2.0" in result.stdout
