"""The no-op stamp's stat path (issue 40): a no-op lock answers from each file's settled (size, mtime, ctime, inode)
without reading the outputs, and still sees every change: a write changes the ctime, which no one can set back,
and a file written in the stamp's own clock tick is checked by its bytes until it has settled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rocmlock.lock import stamp


def _unchanged(cache: Path, manifest: Path) -> list[Path] | None:
    """The outputs :func:`rocmlock.lock.stamp.stamped` finds unchanged, else None."""
    found = stamp.stamped(cache, manifest)
    return None if found is None else found[0]

def _files(root: Path) -> tuple[Path, list[Path]]:
    manifest = root / "pixi.toml"
    manifest.write_text('[workspace]\nname = "s"\n')
    outs = [root / "pixi.lock", root / "env.yml"]
    for i, path in enumerate(outs):
        path.write_text(f"output {i}\n")
    return manifest, outs


def _same_size_edit(path: Path) -> None:
    """Change one byte of ``path`` and put its mtime back: only the ctime (and the bytes) tell."""
    st = path.stat()
    data = path.read_bytes()
    with path.open("r+b") as fh:  # in place: same inode
        fh.write(b"X" + data[1:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _unreadable(*args: object) -> None:
    raise AssertionError("the stat path must not read the outputs")


def test_settled_files_are_answered_from_their_stat_and_a_write_is_still_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest, outs = _files(tmp_path)
    cache = tmp_path / "cache"
    stamp.record(cache, manifest, outs)
    monkeypatch.setattr(stamp, "SETTLED_NS", 0)  # as if the files were written long ago
    assert _unchanged(cache, manifest) == sorted(outs)  # by the digest; the stat is recorded
    (stamp_file,) = (cache / "stamps").iterdir()
    assert sorted(json.loads(stamp_file.read_text())["stats"]) == sorted(str(p) for p in (manifest, *outs))
    with monkeypatch.context() as m:
        m.setattr(stamp, "digest", _unreadable)
        assert _unchanged(cache, manifest) == sorted(outs)
    for path in (manifest, *outs):
        good = path.read_bytes()
        _same_size_edit(path)
        assert _unchanged(cache, manifest) is None, path
        path.write_bytes(good)  # back to the stamped bytes: unchanged again, by the digest
        assert _unchanged(cache, manifest) == sorted(outs)
    monkeypatch.setattr(stamp, "__version__", "0.0.0-other")
    assert _unchanged(cache, manifest) is None


def test_a_file_written_as_the_stamp_was_taken_is_checked_by_its_bytes(tmp_path: Path) -> None:
    """Written within SETTLED_NS of the stamp, a file's times could survive a change made in the same clock tick:
    no stat is recorded for it, so a same-size change with the times put back is still found."""
    manifest, outs = _files(tmp_path)
    cache = tmp_path / "cache"
    stamp.record(cache, manifest, outs)
    assert _unchanged(cache, manifest) == sorted(outs)
    (stamp_file,) = (cache / "stamps").iterdir()
    assert "stats" not in json.loads(stamp_file.read_text())
    _same_size_edit(outs[0])
    assert _unchanged(cache, manifest) is None
