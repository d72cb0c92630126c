"""The shared pieces: GPU table, atomic writes, credential redaction, the test channels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rocmlock.errors import InputError
from rocmlock.gpu.targets import all_targets, get_target, target_for_isa
from rocmlock.util import fs as fsutil
from rocmlock.util.credentials import redact_text, redact_url


def test_target_table_has_required_targets() -> None:
    for gfx in ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1151", "gfx1201"):
        assert get_target(gfx).gfx == gfx
    assert get_target("gfx942:sramecc+:xnack-").isa == "9.4.2"
    assert target_for_isa("9.0.10").gfx == "gfx90a"
    assert len({t.isa for t in all_targets().values()}) == len(all_targets())


def test_unknown_target_suggests_nearest() -> None:
    with pytest.raises(InputError, match="did you mean 'gfx942'"):
        get_target("gfx943")
    with pytest.raises(InputError, match="did you mean '9.4.2'"):
        target_for_isa("9.4.3")


def test_rocm_support_rules() -> None:
    assert not get_target("gfx950").supports_rocm("6.4")
    assert get_target("gfx950").supports_rocm("7.2")
    assert get_target("gfx942").supports_rocm("6.0")


def test_write_set_atomic_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "sub" / "b.txt"
    fsutil.write_set_atomic({a: "1", b: "1"})
    calls = {"n": 0}
    real_replace = fsutil.os.replace

    def flaky(src: str, dst: str) -> None:
        if str(dst).endswith("b.txt") and not calls["n"]:
            calls["n"] += 1
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", flaky)
    with pytest.raises(OSError):
        fsutil.write_set_atomic({a: "2", b: "2"})
    monkeypatch.undo()
    assert a.read_text() == "1" and b.read_text() == "1"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.txt", "b.txt"]


def test_redact_url() -> None:
    assert redact_url("https://bob:s3cret@repo.example.com/t/tok123/private") == "https://repo.example.com/private"
    assert redact_url("https://prefix.dev/t/abc/conda-forge/linux-64") == "https://prefix.dev/conda-forge/linux-64"
    assert redact_url("file:///srv/channel") == "file:///srv/channel"
    text = redact_text("failed: https://u:pw@h.example/x and token pw2", secrets=["pw2"])
    assert "pw" not in text.replace("pw2", "")
    assert "***" in text


def test_channels_fixture_builds_indexed_channels(channels: dict[str, Path]) -> None:
    repodata = json.loads((channels["private"] / "linux-64" / "repodata.json").read_text())
    names = {r["name"] for r in repodata["packages.conda"].values()}
    assert {"pytorch", "flash-attn"} <= names
    noarch = json.loads((channels["private"] / "noarch" / "repodata.json").read_text())
    builds = {r["build"] for r in noarch["packages.conda"].values() if r["name"] == "amdgpu-target"}
    assert builds == {"gfx90a", "gfx942"}
