"""The offline example (examples/offline) built by `rocmlock build`, published to a directory channel and locked from
it, as tests that run real tools on the example's own lock need it (about two seconds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rocmlock.cli.main import main
from shipped import RECIPES, ROOT

EXAMPLE = ROOT / "examples/offline"
# The served channel the example's files name; a test's workspace names its directory channel instead.
PLACEHOLDER = '"http://127.0.0.1:8000/rocmlock-example"'


def build_example(root: Path, files: tuple[str, ...] = ("pixi.toml",)) -> Path:
    """The locked example workspace under ``root``; ``files`` of examples/offline are copied with the channel
    placeholder replaced (pixi.toml first)."""
    assert main(["build", "--manifest-path", str(EXAMPLE / "pixi.toml"), "--recipes-dir", str(RECIPES),
                 "--output", str(root / "out"), "--skip-doctor"]) == 0
    spec = importlib.util.spec_from_file_location("quickstart", EXAMPLE / "quickstart.py")
    assert spec is not None and spec.loader is not None
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    quickstart.python_shim(root / "out")  # the example's host-python package, as the quickstart makes it
    assert main(["publish", "--from", str(root / "out"), "--to", str(root / "channel")]) == 0
    ws = root / "ws"
    ws.mkdir()
    channel = f'"{(root / "channel").as_uri()}"'
    for name in files:
        text = (EXAMPLE / name).read_text()
        assert PLACEHOLDER in text, name
        (ws / name).write_text(text.replace(PLACEHOLDER, channel))
    assert main(["lock", "--manifest-path", str(ws / "pixi.toml")]) == 0
    return ws
