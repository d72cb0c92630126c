"""rocm-bootstrap (AMD's GPU table, which rocmlock.gpu.amd checks data/gpu_targets.toml against) missing, failing to
import or answering in another shape (issue 41, cause L): `plan`, `unpack` and `audit` say so in one line naming the
package and the pin to install, exit non-zero, and print no traceback.

Each case runs in a fresh interpreter, the package broken before rocmlock is imported: the import itself is what a
missing or broken install breaks. The answers rocm-bootstrap 0.3 documents (rocm_bootstrap/targets.py):
``lookup_target(name) -> GfxTarget`` raising ValueError for an unknown name, ``GfxTarget.xnack`` an ``XnackMode``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BREAK = {
    "missing": "sys.modules['rocm_bootstrap'] = None",
    "import-fails": "sys.path.insert(0, sys.argv[1])",  # a rocm_bootstrap whose __init__ raises
    "keyerror": "import rocm_bootstrap as rb\ndef lookup(name):\n    raise KeyError(name)\nrb.lookup_target = lookup",
    "none": "import rocm_bootstrap as rb\nrb.lookup_target = lambda name: None",
    "xnack-str": ("import dataclasses, rocm_bootstrap as rb\nreal = rb.lookup_target\n"
                  "rb.lookup_target = lambda name: dataclasses.replace(real(name), xnack=real(name).xnack.value)"),
}
SCRIPT = "import sys\n{setup}\nfrom rocmlock.cli.main import main\nsys.exit(main(sys.argv[2:]))\n"


def _bundle(path: Path) -> Path:
    """A bundle whose metadata names a GPU target: unpack checks it against the GPU table before anything else."""
    meta = json.dumps({"format": 2, "subdir": "linux-64", "gpu": {"target": "gfx942"}}).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("rocmlock-pack.json")
        info.size = len(meta)
        import io

        tar.addfile(info, io.BytesIO(meta))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("bootstrap")
    fake = root / "fake" / "rocm_bootstrap"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('half-installed: targets.py is missing')\n")
    prefix = root / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta/amdgpu-target-1-gfx942.json").write_text("{}")
    return {"fake": [str(root / "fake")],
            "plan": ["plan", "-e", "mi300x", "--manifest-path", str(REPO / "pixi.toml")],
            "audit": ["audit", "--prefix", str(prefix), "--target", "gfx942"],
            "unpack": ["unpack", str(_bundle(root / "b.tar")), "--prefix", str(root / "out")]}


@pytest.mark.parametrize("command", ["plan", "audit", "unpack"])
@pytest.mark.parametrize("case", list(BREAK))
def test_a_broken_rocm_bootstrap_is_one_line_naming_it(case: str, command: str, inputs: dict[str, list[str]],
                                                       tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tools"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(setup=BREAK[case]), *inputs["fake"], *inputs[command]],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    err = proc.stderr.splitlines()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(err) == 2, proc.stderr
    assert err[0].startswith("error: rocm-bootstrap (AMD's GPU table, which rocmlock checks its GPU targets "
                             "against) "), err
    assert err[1] == "hint: install rocmlock's dependency again: pip install 'rocm-bootstrap==0.3.*'"
    why = {"missing": "cannot be imported (ModuleNotFoundError: ",
           "import-fails": "cannot be imported (RuntimeError: half-installed: targets.py is missing)",
           "keyerror": "lookup_target raised KeyError: ",
           "none": "lookup_target gave None, not a target with a name and ISA numbers",
           "xnack-str": "lookup_target's xnack is 'supported', not an XnackMode"}[case]
    assert why in err[0], err
    if case not in ("missing", "import-fails"):
        assert "against) answered oddly for gfx" in err[0]
        assert err[0].endswith("(installed: 0.3.0; rocmlock reads rocm-bootstrap==0.3.*)"), err
    assert not (tmp_path / "out").exists()


def test_the_real_rocm_bootstrap_passes_the_same_commands(inputs: dict[str, list[str]], tmp_path: Path) -> None:
    # The same runs without breaking anything get past the table: the failures above are the breakage's.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tools"), os.environ.get("PYTHONPATH", "")])}
    for command, code in (("plan", 0), ("audit", 0), ("unpack", 2)):
        proc = subprocess.run([sys.executable, "-c", SCRIPT.format(setup=""), "unused", *inputs[command]],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
        assert proc.returncode == code and "rocm-bootstrap" not in proc.stderr, (command, proc.stderr)
