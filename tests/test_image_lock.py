"""``rocmlock image`` reads pixi.lock once (issue 43): the records it installs, the packages it reports as left
out and the lock sha256 of its labels all come from the same bytes, whatever replaces the lock meanwhile."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlock.cli.main import main
from test_image import ENV

WHEEL = "http://127.0.0.1:9/files/rlk_extra-1.0-py3-none-any.whl"


def _replace_with_a_pypi_pin(lock: Path) -> None:
    """pixi.lock replaced (a rename, as pixi and rocmlock write it) by one whose environment also has a wheel."""
    data: Any = yaml.safe_load(lock.read_text())
    for refs in data["environments"][ENV]["packages"].values():
        refs.append({"pypi": WHEEL})
    data["packages"].append({"pypi": WHEEL, "name": "rlk-extra", "version": "1.0", "sha256": "0" * 64,
                             "index": "http://127.0.0.1:9/simple"})
    new = lock.with_name("new.lock")
    new.write_text(yaml.safe_dump(data, sort_keys=False))
    os.replace(new, lock)


def test_a_lock_replaced_during_the_build_gives_an_image_of_the_first_lock_only(
        ws_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rocmlock.image import builder
    from rocmlock.prefix.install import read_selected

    lock = ws_copy / "pixi.lock"
    first = hashlib.sha256(lock.read_bytes()).hexdigest()
    real = builder.read_selected

    def then_replaced(*args: Any) -> Any:
        got = real(*args)
        _replace_with_a_pypi_pin(lock)  # after the read: the build that follows must not look again
        return got

    monkeypatch.setattr(builder, "read_selected", then_replaced)
    result = builder.build_image(lock, ENV, output=tmp_path / "layout", no_base=True, manifest=ws_copy / "pixi.toml")
    # The replacing lock is one whose wheel an image of it would report as left out: reading it again would show.
    assert read_selected(lock, ENV, None, "image")[0].left_out == ("rlk-extra==1.0 (pypi)",)
    assert result.left_out == ()
    assert result.labels["io.rocmlock.lock.sha256"] == first


def test_a_lock_replaced_between_its_hash_and_its_records_is_an_error_not_an_image(
        ws_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from rocmlock.prefix import install

    real = install.select_environment

    def replaced_meanwhile(lock_path: Path, *args: Any) -> Any:
        _replace_with_a_pypi_pin(lock_path)
        return real(lock_path, *args)

    monkeypatch.setattr(install, "select_environment", replaced_meanwhile)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["image", "--manifest-path", str(ws_copy / "pixi.toml"), "-e", ENV, "--no-base",
                 "-o", str(out / "layout")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"error: {ws_copy / 'pixi.lock'}: changed while image read it" in err
    assert "Traceback" not in err and not list(out.iterdir())
