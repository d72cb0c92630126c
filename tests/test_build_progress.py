"""`rocmlock build` in a log that is no terminal (issue 35, item 6): a line when a variant starts, naming its log,
a line every interval while it builds, and one when it finishes; rich draws nothing there."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from rocmlock.cli.build import PlainProgress
from rocmlock.cli.main import main
from shipped import RECIPES
from test_build import WORKSPACE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_says_what_builds_where_it_logs_and_how_long(tmp_path: Path) -> None:
    lines: list[str] = []
    clock = Clock()
    progress = PlainProgress(tmp_path, 3600.0, lines.append, clock)  # the thread's own wait never ends here
    try:
        progress.start(SimpleNamespace(id="pytorch-x"), 2, 5)
        log = tmp_path / "logs" / "pytorch-x.log"
        assert lines == [f"[2/5] building pytorch-x (log: {log})"]
        progress.tick()  # not due yet
        clock.now += 65 * 60
        progress.tick()
        assert lines[-1] == f"still building pytorch-x: 1h 05m so far (log: {log}, not written yet)"
        log.parent.mkdir()
        log.write_text("a\nb\nc\n")
        progress.tick()  # just written: the next one is an interval away
        assert len(lines) == 2
        clock.now += 3600
        progress.tick()
        assert lines[-1] == f"still building pytorch-x: 2h 05m so far (log: {log}, 3 lines)"
        progress.finish(SimpleNamespace(id="pytorch-x", status="built", reason="", seconds=7500.4))
        clock.now += 7200
        progress.tick()  # nothing builds: nothing to say
        assert lines[-1] == "built    pytorch-x in 7500s"
    finally:
        progress.close()


def test_the_progress_thread_writes_while_a_variant_builds(tmp_path: Path) -> None:
    seen = threading.Event()
    lines: list[str] = []

    def write(line: str) -> None:
        lines.append(line)
        if line.startswith("still building"):
            seen.set()

    progress = PlainProgress(tmp_path, 0.01, write)
    try:
        progress.start(SimpleNamespace(id="v"), 1, 1)
        assert seen.wait(60), lines  # a guard against a hang, not a measured time
    finally:
        progress.close()


def test_build_piped_names_each_variant_and_its_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pixi.toml").write_text(WORKSPACE)
    out = tmp_path / "out"
    assert main(["build", "--manifest-path", str(tmp_path / "ws" / "pixi.toml"), "--recipes-dir", str(RECIPES),
                 "--output", str(out), "-e", "mi250", "--skip-doctor"]) == 0
    err = capsys.readouterr().err.splitlines()
    starts = [line for line in err if " building " in line]
    assert starts and all(line.startswith(f"[{i}/{len(starts)}] building ") for i, line in enumerate(starts, 1))
    for line in starts:
        variant = line.split(" building ", 1)[1].split(" (log: ", 1)[0]
        assert line.endswith(f"(log: {out.resolve() / 'logs' / f'{variant}.log'})")
        assert (out / "logs" / f"{variant}.log").is_file()
        assert any(done.startswith("built") and f" {variant} in " in done for done in err)


def test_packs_download_bar_shows_the_time_left() -> None:
    from rich.progress import TimeRemainingColumn
    from rocmlock.cli.env import _DownloadProgress

    assert any(isinstance(c, TimeRemainingColumn) for c in _DownloadProgress().progress.columns)


def test_a_password_in_rattler_builds_error_never_reaches_the_outcome(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """The progress line and the log were redacted, but the outcome's reason (the summary table, `build --json`)
    carried rattler-build's "failed to fetch https://bob:SECRETGIT@..." as it came."""
    from rocmlock.build import builder, recipes

    class Rendered:
        def run_build(self, output_dir: str, channels: list[str], progress_callback: object) -> None:
            event = SimpleNamespace(level="error", message="failed to fetch https://bob:SECRETGIT@127.0.0.1:9/bnb.git")
            progress_callback.on_log(event)  # type: ignore[attr-defined]
            raise RuntimeError("Error fetching Git repository: https://bob:SECRETGIT@127.0.0.1:9/bnb.git")

    monkeypatch.setattr(recipes, "render_exact", lambda *a: Rendered())
    plan = SimpleNamespace(recipe_path=lambda v: tmp_path / "recipe.yaml")
    variant = SimpleNamespace(recipe="bnb", variant={}, subdir="linux-64", build_string="b")
    with pytest.raises(builder.BuildFailed) as caught:
        builder.rattler_build_variant(plan, variant, tmp_path, [], lambda line: None)  # type: ignore[arg-type]
    assert "SECRETGIT" not in str(caught.value) and "https://127.0.0.1:9/bnb.git" in str(caught.value)
