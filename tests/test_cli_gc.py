"""`lock` and `export` run with Python's cyclic garbage collector off (issue 40: its gen-2 passes over the records
of a 30,000-record solve cost a fresh lock about 0.03 s) and put it back as they found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.lock import pipeline


@pytest.mark.parametrize(("command", "function"), [("lock", "lock_workspace"), ("export", "export_workspace")])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_while_the_command_runs(command: str, function: str, enabled: bool, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def fake(*args: object, **kwargs: object) -> None:
        seen.append(gc.isenabled())
        raise InputError("stop here")

    monkeypatch.setattr(pipeline, function, fake)
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "t"\nchannels = []\nplatforms = ["linux-64"]\n')
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert main([command, "--discard-lock" if command == "lock" else "--check",
                     "--manifest-path", str(tmp_path / "pixi.toml")]) == 2
        assert gc.isenabled() is enabled  # as it was before, after a failure too
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]
