"""The smaller things that cost a newcomer time (issue 44, item 5): each with the text the user now meets."""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from rocmlock.cli.main import main

REPO = Path(__file__).resolve().parent.parent
DATASET_NOTE = ("dataset alpaca_en_demo: a demo of LLaMA-Factory's, looked up in ./data (dataset_dir: its "
                "repository's data/): train from a checkout of LLaMA-Factory, or pass --dataset with an entry of "
                "your own data/dataset_info.json")


def test_the_presets_demo_dataset_says_where_llamafactory_looks_for_it(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # LLaMA-Factory 0.9.5's dataset_dir defaults to "data" (src/llamafactory/hparams/data_args.py), where its
    # repository's data/dataset_info.json names alpaca_en_demo; docs/qlora-deepspeed.md says the same.
    base = ["preset", "--manifest-path", str(REPO / "pixi.toml"), "-e", "mi300x", "--method", "lora"]
    assert main([*base, "-o", str(tmp_path / "demo.yaml")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert DATASET_NOTE in err
    assert f"# {DATASET_NOTE}" in (tmp_path / "demo.yaml").read_text().splitlines()
    assert main([*base, "-o", str(tmp_path / "own.yaml"), "--dataset", "my_data"]) == 0
    assert "dataset alpaca_en_demo" not in capsys.readouterr().err


def _quickstart() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quickstart_example", REPO / "examples" / "offline" / "quickstart.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replace_stops_the_server_serve_channel_sh_started(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`quickstart --workdir W --replace` deleted W while the server `sh W/serve-channel.sh &` had started kept
    serving on the old port; now it is stopped first, and the quickstart says so."""
    quickstart = _quickstart()
    work = tmp_path / "rl"
    work.mkdir(mode=0o700)
    (work / quickstart.MARKER).write_text("made by examples/offline/quickstart.py\n")
    (work / "channel").mkdir()
    (work / "auth").mkdir(mode=0o700)
    (work / "auth" / "credentials.json").write_text(
        json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "quickstart", "password": "pw"}}}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = quickstart.write_serve_script(work, f"http://127.0.0.1:{port}/rocmlock-example")
    server = subprocess.Popen(["sh", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith(f"serving http://127.0.0.1:{port}/")
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        # Started again (forgotten, or a second terminal): one line, no traceback, and the pid file still names
        # the server that listens, so --replace below stops it (the second start wrote its own pid over it).
        again = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
        assert again.stderr.splitlines()[0] == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
        assert again.stderr.splitlines()[1].startswith("hint: is this channel served already?")
        assert (work / quickstart.SERVER_PID).read_text().strip() == str(server.pid)
        capsys.readouterr()
        quickstart.prepare_workdir(work, replace=True)
        assert server.wait(timeout=10) is not None
        assert capsys.readouterr().err == (f"quickstart: stopped the earlier run's channel server (pid {server.pid}, "
                                           "started by serve-channel.sh)\n")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert sorted(p.name for p in work.iterdir()) == [quickstart.MARKER]  # afresh
    finally:
        server.kill()
        server.wait()


def test_replace_leaves_a_process_that_is_not_the_workdirs_server(tmp_path: Path) -> None:
    # The pid file names a process that is no channel server (a pid reused): it is not signalled.
    quickstart = _quickstart()
    work = tmp_path / "rl"
    work.mkdir(mode=0o700)
    (work / quickstart.MARKER).write_text("made by examples/offline/quickstart.py\n")
    other = subprocess.Popen(["sleep", "30"])
    try:
        (work / quickstart.SERVER_PID).write_text(f"{other.pid}\n")
        quickstart.prepare_workdir(work, replace=True)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_try_it_plans_in_the_kept_workspace_without_naming_the_checkout(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Try-it step 1 said `--recipes-dir /path/to/checkout/recipes`: the quickstart now links the workspace's
    recipes/ to the checkout's, so the step is pasted as written."""
    try_it = (REPO / "docs" / "try-it.md").read_text()
    step = try_it.split("## 1. Look at the plan", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert step == "rocmlock plan --channel ../channel\n"
    assert "/path/to" not in try_it
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "pixi.toml").write_text((REPO / "examples" / "offline" / "pixi.toml").read_text())
    link = _quickstart().link_recipes(workspace)
    assert link.resolve() == (REPO / "recipes").resolve()
    capsys.readouterr()
    assert main(["plan", "--manifest-path", str(workspace / "pixi.toml")]) == 0
    out = capsys.readouterr().out
    assert "rocm-env-check" in out and "amdgpu-target" in out


def test_readme_and_the_docs_home_say_the_same_about_ci() -> None:
    """The docs home named ROCMLOCK_CI_VENV and no mirrors, the README ROCMLOCK_CI_KEEP_VENV and the mirrors:
    both now name every variable .ci/run reads, and the mirrors; .ci/run checks them before installing anything."""
    ci_run = (REPO / ".ci" / "run").read_text()
    variables = set(re.findall(r"\b(ROCMLOCK_[A-Z_]+)\b", ci_run))
    assert variables == {"ROCMLOCK_CI_VENV", "ROCMLOCK_CI_KEEP_VENV", "ROCMLOCK_MIRRORS"}
    readme = (REPO / "README.md").read_text().split("**Command 2**", 1)[1].split("\n## ", 1)[0]
    home = (REPO / "docs" / "index.md").read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    for text in (" ".join(readme.split()), " ".join(home.split())):
        assert {v for v in variables if f"`{v}" in text} == variables
        assert "`../shared/mirrors`" in text and "stops at once, before installing anything" in text
    commands = [line for line in ci_run.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    first_install = next(i for i, line in enumerate(commands) if "apt-get" in line and "command -v" not in line)
    mirrors_check = next(i for i, line in enumerate(commands) if "no source mirrors" in line)
    assert mirrors_check < first_install


def test_install_names_no_placeholder_and_the_docs_commands_silence_materials_notice() -> None:
    install = (REPO / "docs" / "install.md").read_text()
    assert "<this repository>" not in install and "git clone" not in install
    # Material 9.8.2 (material/templates/__init__.py) prints its end-of-life notice when it is loaded by mkdocs
    # unless NO_MKDOCS_2_WARNING is set, before any hook of mkdocs.yml runs: every mkdocs command shown sets it.
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for found in re.finditer(r"(NO_MKDOCS_2_WARNING=1 )?mkdocs (serve|build)", page.read_text()):
            assert found.group(1) == "NO_MKDOCS_2_WARNING=1 ", (page.name, found.group(0))
    assert "NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict" in (REPO / ".ci" / "run").read_text()


def _torchless_python(tmp_path: Path) -> Path:
    """A venv of the base interpreter without site packages: a python with no torch, as the example's is."""
    venv = tmp_path / "notorch"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True, check=False).returncode == 1
    return python


def test_the_probe_says_an_environment_without_pytorch_has_none_on_purpose(tmp_path: Path) -> None:
    """The probe in the example's image failed torch.import as if torch were broken; the example has no torch
    on purpose. A conda environment without a pytorch package is now told apart from a broken torch."""
    python = _torchless_python(tmp_path)
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)

    def torch_import() -> dict[str, object]:
        proc = subprocess.run([str(python), str(REPO / "tools" / "verify_env.py"), "--prefix", str(prefix), "--only",
                               "torch", "--json"], capture_output=True, text=True, check=False)
        assert proc.returncode == 1, proc.stderr
        (check,) = [c for c in json.loads(proc.stdout)["checks"] if c["id"] == "torch.import"]
        return check

    check = torch_import()
    assert check["status"] == "fail"
    assert check["evidence"] == (
        "import torch failed: ModuleNotFoundError: No module named 'torch'; this environment has no pytorch package "
        "(conda-meta): it was not asked for one (rocmlock's offline example has none on purpose, so the torch, "
        "compute and train checks cannot pass there)")
    assert check["fix"] == (
        "add pytorch to the environment's dependencies (pixi.toml: pytorch from the rocmlock channel), lock and "
        "install it again; for an environment that is not meant to train, such as the offline example's, this "
        "failure is expected")
    # A pytorch package installed but torch not importable: broken, reinstall (as before).
    (prefix / "conda-meta" / "pytorch-2.12.1-rocm72_gfx942_py312_0.json").write_text(
        json.dumps({"name": "pytorch", "version": "2.12.1", "build": "rocm72_gfx942_py312_0"}))
    check = torch_import()
    assert check["evidence"] == "import torch failed: ModuleNotFoundError: No module named 'torch'"
    assert str(check["fix"]).startswith("install the ROCm build of pytorch for this GPU")


def test_without_workdir_the_summary_names_no_path_that_is_gone() -> None:
    """`quickstart --json` without --workdir printed the work, lock, prefix and image paths of the temporary
    directory it had just removed; they are null, and `kept` says why."""
    quickstart = _quickstart()
    summary = {"work": "/tmp/rocmlock-quickstart-x", "lock": "/tmp/rocmlock-quickstart-x/workspace/pixi.lock",
               "prefix": "p", "image": "i", "serve_again": "s", "channel_url": "http://127.0.0.1:1/c", "seconds": 4.0}
    gone = quickstart.kept_summary(summary, kept=False)
    assert gone["kept"] is False and all(gone[k] is None for k in ("work", "lock", "prefix", "image", "serve_again"))
    assert gone["channel_url"] == summary["channel_url"] and gone["seconds"] == 4.0
    assert quickstart.kept_summary(summary, kept=True) == {**summary, "kept": True}
