"""The smaller things that cost a newcomer time (issue 44, item 5): each with the text the user now meets."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
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
