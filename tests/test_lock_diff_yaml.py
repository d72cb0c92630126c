"""The diff reads pixi.lock as rattler reads it (issue 41 I and J): strings stay strings where rattler's schema has
them, whatever YAML 1.1 would make of them, and a lock with YAML anchors or aliases is refused before any reader
expands them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import (
    LockedEnvironment,
    LockedPlatform,
    LockedWorkspace,
    read_lockfile,
    render_lockfile,
)

CHANNEL = "https://conda.example/forge"
REPO = Path(__file__).resolve().parents[1]


def _record(name: str, version: str = "1.0", depends: tuple[str, ...] = (), license: str = "MIT") -> RepoDataRecord:
    record = PackageRecord(name, version, BuildString("h0_0"), 0, "linux-64", depends=list(depends),
                           sha256=b"\x01" * 32, md5=b"\x02" * 16, license=license)
    file = f"{name}-{version}-h0_0.conda"
    return RepoDataRecord(record, file, f"{CHANNEL}/linux-64/{file}", CHANNEL)


def _lock(path: Path, env: str, records: list[RepoDataRecord], edit: dict[str, str] | None = None) -> Path:
    locked = LockedWorkspace({"linux-64": LockedPlatform("linux-64", "linux-64", ())},
                             {env: LockedEnvironment((CHANNEL,), {"linux-64": records})})
    text = render_lockfile(locked)
    for old, new in (edit or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)
    assert read_lockfile(path) is not None  # rattler reads it
    return path


def _diff_json(old: Path, new: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["diff", str(old), str(new), "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_plain_scalars_stay_the_strings_rattler_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """YAML 1.1 made `2024-01-01` a date (a TypeError), `1:20` the number 80, `on`/`yes` booleans; rattler reads
    each as the string written (its schema has strings there) and writes `on` and `yes` plain itself."""
    old = _lock(tmp_path / "old.lock", "on", [_record("a")])
    new = _lock(tmp_path / "new.lock", "on",
                [_record("a"), _record("b", depends=("on", "yes"), license="X-B"), _record("c", license="X-C")],
                {"license: X-B\n": "license: 1:20\n", "license: X-C\n": "license: 2024-01-01\n"})
    text = new.read_text()
    assert "\n  on:\n" in text and "\n  - on\n  - yes\n" in text and "license: 2024-01-01\n" in text
    data = _diff_json(old, new, capsys)
    assert list(data["environment"]) == ["on"]
    rows = {r["name"]: r["after"] for r in data["environment"]["on"]["linux-64"]}
    assert rows["b"]["license"] == "1:20" and rows["c"]["license"] == "2024-01-01"
    assert rows["b"]["depends"] == ["on", "yes"]
    capsys.readouterr()
    assert main(["diff", str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "on [linux-64]"


def test_the_environments_options_keep_an_environment_named_on(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "pixi.lock", "on", [_record("a")], {"    channels:\n": "    options:\n      strategy: "
                                                                  "highest\n    channels:\n"})
    locked = read_lockfile(lock)
    assert locked is not None and list(locked.environments) == ["on"]
    assert locked.environments["on"].options == {"strategy": "highest"}


def _aliased_lock(path: Path, packages: int = 5000) -> Path:
    """1.3 MB: ``packages`` packages whose depends are all one aliased list of as many items (25 million once
    expanded). rattler would accept it: YAML aliases are valid, and serde_yaml expands them."""
    url = f"{CHANNEL}/linux-64/p{{}}-1.0-h0_0.conda".format
    refs = "".join(f"      - conda: {url(i)}\n" for i in range(packages))
    deps = "".join(f"  - d{i}\n" for i in range(packages))
    entries = "".join(f"- conda: {url(i)}\n  sha256: '{'01' * 32}'\n  md5: '{'02' * 16}'\n"
                      + (f"  depends: &deps\n{deps}" if i == 0 else "  depends: *deps\n") for i in range(packages))
    path.write_text(f"version: 7\nplatforms:\n- name: linux-64\nenvironments:\n  default:\n    channels:\n"
                    f"    - url: {CHANNEL}\n    packages:\n      linux-64:\n{refs}packages:\n{entries}")
    return path


def _limited(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    env = {"PYTHONPATH": str(REPO / "tools"), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "rocmlock", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=limit, check=False)


def test_aliases_are_refused_before_any_reader_expands_them(tmp_path: Path) -> None:
    """Under 3 GB, rattler's reader died expanding the aliases (allocation failure, exit 134) in `diff` and
    `lock --check`; now both refuse the lock in one line, exit 2, before reading it."""
    lock = _aliased_lock(tmp_path / "pixi.lock")
    assert 1_000_000 < lock.stat().st_size < 1_500_000
    (tmp_path / "pixi.toml").write_text(f'[workspace]\nname = "a"\nchannels = ["{CHANNEL}"]\n'
                                        'platforms = ["linux-64"]\n')
    line = lock.read_text().splitlines().index("  depends: &deps") + 1
    for argv in (["diff", str(lock), str(lock)], ["lock", "--check"]):
        out = _limited(argv, tmp_path)
        assert out.returncode == 2, (argv, out.returncode, out.stderr[-2000:])
        first, *rest = out.stderr.splitlines()
        assert first == (f"error: {lock}: line {line}: a YAML anchor or alias, which pixi and rattler never write (each "
                         "alias is a full copy for a reader); not a lock to read"), out.stderr
        assert "Traceback" not in out.stderr and len(rest) <= 1


@pytest.mark.parametrize("text", ["license: BSD & MIT", "license: A&B", "license: '&x'"])
def test_an_ampersand_that_is_no_anchor_is_read(tmp_path: Path, text: str) -> None:
    from rocmlock.lockdiff.lockyaml import refuse_anchors

    lock = _lock(tmp_path / "pixi.lock", "default", [_record("a", license="X")], {"license: X": text})
    refuse_anchors(lock.read_bytes(), lock)
    assert read_lockfile(lock) is not None
