"""A warm re-solve against a channel that answers revalidations with a bare 304 (issue 23, item 7).

The failure seen once under load, "(304 Not Modified) when fetching .../repodata_shards.msgpack.zst", is rattler's
(conda/rattler#2719, closed as the server's fault): a 304 without the cached Last-Modified/ETag takes the
"modified" path and fails on its status. Whether a re-solve revalidates at all depends on the clock (heuristic
freshness, see rocmlock.lock.solve.BARE_304), which is why it was not seen on a quiet machine. tests/bare304.py
sends `Cache-Control: no-cache`, so every warm read revalidates: the failure is reproduced every time, with rattler
alone, and `rocmlock lock` must get past it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from lockhelpers import manifest
from rattler import Channel, Gateway, MatchSpec, Subdir, solve
from rattler.exceptions import GatewayError
from rocmlock.cli.main import main
from rocmlock.lock.lockfile import read_lockfile

TOKEN = "tk-0123456789abcdef"
HERE = Path(__file__).parent


@pytest.fixture
def served(channels: dict[str, Path], tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The private channel at http://127.0.0.1:<port>/t/<token>/private (plain directories, as a user serving a
    tree with `python -m http.server` has them), and the server's request log."""
    root = tmp_path / "www"
    shutil.copytree(channels["private"], root / "t" / TOKEN / "private")
    log = tmp_path / "requests.log"
    proc = subprocess.Popen([sys.executable, str(HERE / "bare304.py"), str(root), str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(20)
        assert ready and ready[0].startswith("serving "), ready
        yield f"{ready[0].split()[1]}/t/{TOKEN}/private", log
    finally:
        proc.terminate()
        proc.wait(10)


def _revalidations(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines()
            if "repodata_shards.msgpack.zst 304 conditional" in line]


def test_rattler_alone_fails_a_warm_read_of_a_bare_304_channel(served: tuple[str, Path], tmp_path: Path) -> None:
    """The reproduction: two concurrent solves (two platforms of one subdir) on a warm cache, every time.

    rattler coalesces the two solves' request for the same file: the one that made it reports the 304, the other
    "a coalesced request failed" (or the 304 itself, when it came second and asked again). Which of them finishes
    first is the scheduler's, so every outcome is collected, not the first exception alone (it failed once so on
    a fresh CI machine: the coalesced follower's error came first)."""
    url, log = served

    async def solve_twice(cache: Path) -> list[object]:
        gateway = Gateway(cache_dir=cache)
        return await asyncio.gather(*(solve([Channel(url)], [MatchSpec("amdgpu-target")], gateway=gateway,
                                            platforms=[Subdir("linux-64"), Subdir("noarch")]) for _ in range(2)),
                                    return_exceptions=True)

    cold = asyncio.run(solve_twice(tmp_path / "cache"))  # cold: plain GETs, 200
    assert not [r for r in cold if isinstance(r, BaseException)], cold
    assert not _revalidations(log)
    warm = asyncio.run(solve_twice(tmp_path / "cache"))
    assert all(isinstance(r, GatewayError) for r in warm), warm  # neither solve gets past the bare 304
    says = r"\(304 Not Modified\) when fetching .*/repodata_shards\.msgpack\.zst"
    assert any(re.search(says, str(r)) for r in warm), [str(r) for r in warm]
    assert _revalidations(log)


def test_a_warm_relock_gets_past_a_bare_304(served: tuple[str, Path], channels: dict[str, Path],
                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reported case: a locked two-GPU workspace over a /t/<token>/ channel, an environment added, re-solved."""
    url, log = served
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(url, channels["forge"].as_uri()))
    assert main(["lock", "--manifest-path", str(root)]) == 0
    assert not _revalidations(log)
    with (root / "pixi.toml").open("a") as f:
        f.write('mi300x-base = ["rocm72", "gfx942"]\n')
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(root)]) == 0, capsys.readouterr().err
    assert _revalidations(log)  # the bare 304 was met, and the solve fetched afresh after it
    locked = read_lockfile(root / "pixi.lock")
    assert locked is not None and "mi300x-base" in locked.environments
    assert TOKEN not in (root / "pixi.lock").read_text()
    assert main(["lock", "--check", "--manifest-path", str(root)]) == 0
