"""Results on stdout, progress and errors on stderr (issue 44, item 2): `rocm-env-check > report.txt`,
`rocmlock verify --prefix ... | less` and `podman run ... /opt/rocmlock/check > out` captured 0 bytes.

Each command runs as a process (``python -m rocmlock``, its real file descriptors), and what each stream gets is
checked: the human result on stdout, nothing of it on stderr; with ``--json`` stdout is the JSON alone. The
probe's own split (and `verify`'s, which passes the probe's streams through) is tests/test_probe_cli.py's
``test_the_probes_table_is_the_result_on_stdout``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_report import probe_report

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "offline" / "pixi.toml"
FORGE = "https://conda.anaconda.org/conda-forge/linux-64"


def _rocmlock(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tools"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rocmlock", *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _lock(path: Path, packages: list[tuple[str, str]]) -> Path:
    urls = [f"{FORGE}/{name}-{version}-h0_0.conda" for name, version in packages]
    path.write_text(yaml.safe_dump({
        "version": 6,
        "environments": {"default": {"channels": [{"url": FORGE.rsplit("/", 1)[0] + "/"}],
                                     "packages": {"linux-64": [{"conda": u} for u in urls]}}},
        "packages": [{"conda": u, "sha256": "1" * 64, "md5": "2" * 32, "license": "MIT"} for u in urls]},
        sort_keys=False))
    return path


@pytest.mark.parametrize("case", ["plan", "doctor", "audit", "report", "diff", "variants"])
def test_a_commands_result_goes_to_stdout_and_nothing_of_it_to_stderr(case: str, tmp_path: Path) -> None:
    argv: list[str | Path]
    if case == "plan":
        argv, first = ["plan", "--manifest-path", EXAMPLE, "--recipes-dir", REPO / "recipes"], "#  package"
    elif case == "doctor":
        argv, first = ["doctor", "--target", "gfx942"], ""
    elif case == "audit":
        (tmp_path / "env" / "conda-meta").mkdir(parents=True)
        argv, first = ["audit", "--prefix", tmp_path / "env", "--target", "gfx942"], "device code in "
    elif case == "report":
        (tmp_path / "gpu01.json").write_text(json.dumps(probe_report("gpu01")))
        argv, first = ["report", tmp_path / "gpu01.json"], ""
    elif case == "diff":
        old = _lock(tmp_path / "old.lock", [("numpy", "2.2.0")])
        new = _lock(tmp_path / "new.lock", [("numpy", "2.2.1")])
        argv, first = ["diff", old, new], "default [linux-64]"
    else:
        argv, first = ["variants", "--recipes-dir", REPO / "recipes"], ""
    proc = _rocmlock(*argv, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    result = proc.stdout.strip().splitlines()
    assert len(result) >= 2 and result[0].startswith(first), proc.stdout
    # stderr holds no line of the result (at most warnings and progress of their own).
    assert not set(result) & set(proc.stderr.splitlines())
    if case in ("plan", "doctor", "audit", "report", "diff"):
        data = _rocmlock(*argv, "--json", cwd=tmp_path)
        assert data.returncode == proc.returncode, data.stderr
        json.loads(data.stdout)  # stdout is the JSON alone
    if case == "diff":
        assert "  ~ numpy 2.2.0 h0_0 -> 2.2.1 h0_0" in result


def test_the_images_check_runs_the_probe_with_its_streams(tmp_path: Path) -> None:
    """`podman run ... /opt/rocmlock/check > out`: the check execs the probe, so the probe's table is the
    container's stdout (what was 0 bytes was the probe's, now on stdout)."""
    from rocmlock.image.files import _CHECK

    assert _CHECK.rstrip().splitlines()[-1].startswith('exec "$py" {probe} --prefix {prefix} "$@"')
    assert ">&2" not in _CHECK and "2>" not in _CHECK and ">" not in _CHECK.replace("->", "")
