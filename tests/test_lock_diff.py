"""pixi's diff JSON from `rocmlock lock --json` and `rocmlock diff`, and the markdown of the real pixi-diff-to-markdown.

The shape is pixi's LockFileJsonDiff (prefix-dev/pixi crates/pixi_diff/src/lib.rs): {"version": 1, "environment":
{ENV: {PLATFORM: [{"name", "before", "after", "type", "explicit"?}]}}}, before/after the lock's package entries
(a changed one's only the keys that differ), sorted by name, unchanged platforms and environments left out.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lock_tools import tools_or_skip
from rocmlock.cli.main import main


@pytest.fixture(scope="module")
def tools() -> Path:
    return tools_or_skip()


def _pin_numpy(ws: Path) -> None:
    # numpy 2.1.* instead of the 2.2.0 locked: a downgrade where pytorch pulls it in, an addition in `default`
    text = (ws / "pixi.toml").read_text()
    (ws / "pixi.toml").write_text(text.replace('[dependencies]\n', '[dependencies]\nnumpy = "2.1.*"\n', 1))


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(args) == 0
    return dict(json.loads(capsys.readouterr().out))


def _lock_entries(lock: Path) -> dict[str, dict[str, Any]]:
    return {p["conda"]: p for p in yaml.safe_load(lock.read_text())["packages"]}


def test_lock_json_is_pixis_diff_beside_rocmlocks_keys(ws_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _lock_entries(ws_copy / "pixi.lock")
    _pin_numpy(ws_copy)
    data = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    after = _lock_entries(ws_copy / "pixi.lock")
    assert list(data)[:2] == ["version", "environment"] and data["version"] == 1
    assert {"changes", "stale", "solved", "written", "manifest"} <= set(data)  # rocmlock's, kept beside
    envs = data["environment"]
    assert sorted(envs) == ["default", "mi250", "mi300x"]
    assert sorted(envs["mi250"]) == ["linux-64-gfx90a"] and sorted(envs["mi300x"]) == ["linux-64-gfx942"]
    (numpy,) = envs["mi250"]["linux-64-gfx90a"]
    assert set(numpy) == {"name", "before", "after", "type", "explicit"}
    assert (numpy["name"], numpy["type"], numpy["explicit"]) == ("numpy", "conda", True)
    old_url = next(u for u in before if "/numpy-2.2.0-" in u)
    new_url = next(u for u in after if "/numpy-2.1.3-" in u)
    # only the keys that differ: the location and the hashes, not the equal depends/license/subdir/channel
    differing = {k for k in after[new_url] if after[new_url][k] != before[old_url].get(k)}
    assert set(numpy["after"]) == differing and "conda" in differing and "depends" not in differing
    assert numpy["before"] == {k: before[old_url][k] for k in differing}
    assert numpy["after"] == {k: after[new_url][k] for k in differing}
    added = envs["default"]["linux-64-gfx90a"]
    assert [(a["name"], a["before"], a["after"]) for a in added] == [("numpy", None, after[new_url])]


def test_lock_json_of_an_unchanged_lock_has_an_empty_environment(ws_copy: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    assert (data["version"], data["environment"]) == (1, {})
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--markdown"]) == 0
    assert capsys.readouterr().out == "No diff\n"


def test_diff_of_two_lock_files_is_the_same_diff_without_explicit(ws_copy: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.lock"
    old.write_bytes((ws_copy / "pixi.lock").read_bytes())
    _pin_numpy(ws_copy)
    locked = _json(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"], capsys)
    with_manifest = _json(["diff", str(old), str(ws_copy / "pixi.lock"), "--json", "--manifest-path",
                           str(ws_copy / "pixi.toml")], capsys)
    assert with_manifest == {"version": 1, "environment": locked["environment"]}
    diffed = _json(["diff", str(old), str(ws_copy / "pixi.lock"), "--json"], capsys)
    assert list(diffed) == ["version", "environment"]
    for plats in locked["environment"].values():  # no manifest: nothing is explicit
        for rows in plats.values():
            for row in rows:
                row.pop("explicit", None)
    assert diffed == {"version": 1, "environment": locked["environment"]}
    capsys.readouterr()
    assert main(["diff", str(old), str(ws_copy / "pixi.lock")]) == 0
    assert "mi250 [linux-64-gfx90a]\n  ~ numpy 2.2.0 py312h0_0 -> 2.1.3 py312h0_0" in capsys.readouterr().out


def test_diff_refuses_a_file_that_is_not_a_lock(ws_copy: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.lock"
    bad.write_text("just: some yaml\n")
    capsys.readouterr()
    assert main(["diff", str(bad), str(ws_copy / "pixi.lock"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and str(bad) in err and "Traceback" not in err
    assert main(["diff", str(tmp_path / "missing.lock"), str(ws_copy / "pixi.lock")]) == 2
    assert "missing.lock: no such file" in capsys.readouterr().err
    # A wrong argument to diff is not the workspace's lock: no "restore it, or --discard-lock (every pin dropped)",
    # no "remove it and run rocmlock lock" for a directory given by mistake; what diff takes, said once.
    (tmp_path / "garbage.lock").write_text("garbage: [\n")
    for wrong in (tmp_path / "garbage.lock", tmp_path):
        for args in ([str(wrong), str(ws_copy / "pixi.lock")], [str(ws_copy / "pixi.lock"), str(wrong)]):
            assert main(["diff", *args]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"error: {wrong}: ") and "--discard-lock" not in err and "remove it" not in err, err
            assert err.splitlines()[1].startswith("hint: rocmlock diff compares two pixi.lock files"), err


def test_diff_outside_a_workspace_needs_no_pixi_toml(ws_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`diff` reads a manifest only when --manifest-path names one: run where no pixi.toml is (a CI step comparing
    `git show` outputs), a missing OLD is named, not a manifest the user never asked for."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "missing.lock"), str(ws_copy / "pixi.lock")]) == 2
    err = capsys.readouterr().err
    assert "missing.lock: no such file" in err and "manifest" not in err, err
    assert main(["diff", str(ws_copy / "pixi.lock"), str(ws_copy / "pixi.lock")]) == 0
    assert capsys.readouterr().out.strip() == "no changes"


def _to_markdown(tools: Path, data: str, cwd: Path, *args: str) -> str:
    # Its settings come from pixi.toml/pyproject.toml in the working directory: an empty one here.
    proc = subprocess.run([str(tools / "pixi-diff-to-markdown"), *args], input=data, capture_output=True, text=True,
                          check=False, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pixi_diff_to_markdown_reads_lock_json_and_prints_our_markdown(tools: Path, ws_copy: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.lock"
    old.write_bytes((ws_copy / "pixi.lock").read_bytes())
    _pin_numpy(ws_copy)
    capsys.readouterr()
    assert main(["lock", "--manifest-path", str(ws_copy / "pixi.toml"), "--json"]) == 0
    data = capsys.readouterr().out
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    theirs = _to_markdown(tools, data, cwd, "--merge-dependencies", "no")
    assert "|**numpy**[^2]|2.2.0|2.1.3|Minor Downgrade|" in theirs
    # the same diff, written by rocmlock from two lock files: equal to the tool's output, byte for byte
    (ws_copy / "pixi.lock").rename(tmp_path / "new.lock")
    capsys.readouterr()
    assert main(["diff", str(old), str(tmp_path / "new.lock"), "--markdown"]) == 0
    ours = capsys.readouterr().out
    assert main(["diff", str(old), str(tmp_path / "new.lock"), "--json"]) == 0
    assert _to_markdown(tools, capsys.readouterr().out, cwd, "--merge-dependencies", "no") == ours
    assert ours == theirs.replace("**numpy**", "numpy")  # lock --json marks numpy explicit: pixi.toml names it
    # its default layout (tables merged across environments) takes the JSON too
    assert "Minor Downgrade" in _to_markdown(tools, data, cwd)


FORGE = "https://conda.anaconda.org/conda-forge/linux-64"
PYPI = "https://files.pythonhosted.org/packages/ab/cd"


def _lock_text(envs: dict[str, dict[str, list[tuple[str, str, str]]]]) -> str:
    """A pixi.lock v7 text: env -> platform -> (name, version, build); build "pypi" makes a wheel."""
    packages: dict[str, dict[str, Any]] = {}
    body: dict[str, Any] = {}
    for env, plats in envs.items():
        body[env] = {"channels": [{"url": "https://conda.anaconda.org/conda-forge/"}], "packages": {}}
        for plat, pkgs in plats.items():
            refs = []
            for name, version, build in pkgs:
                if build == "pypi":
                    url = f"{PYPI}/{name}-{version}-py3-none-any.whl"
                    packages[url] = {"pypi": url, "name": name, "version": version, "sha256": "0" * 64}
                    refs.append({"pypi": url})
                else:
                    url = f"{FORGE}/{name}-{version}-{build}.conda"
                    packages[url] = {"conda": url, "sha256": "1" * 64, "md5": "2" * 32, "license": "MIT"}
                    refs.append({"conda": url})
            body[env]["packages"][plat] = refs
    return yaml.safe_dump({"version": 7, "environments": body, "packages": list(packages.values())}, sort_keys=False)


def test_markdown_equals_pixi_diff_to_markdown_for_every_kind_of_change(tools: Path, tmp_path: Path) -> None:
    from rocmlock.lockdiff.diff import diff_json, diff_locks, diff_markdown, lock_packages

    many = [(f"lib{i:02d}", "1.0", "h0_0") for i in range(12)]  # more than 10 rows: the tables fold
    old = _lock_text({
        "gpu": {"linux-64": [("major", "1.2.3", "h0_0"), ("minor", "1.2.3", "h0_0"), ("patch", "1.2.3", "h0_0"),
                             ("build", "1.0", "h0_0"), ("gone", "1.0", "h0_0"), ("Wheel-Pkg", "1.0", "pypi"),
                             ("deep", "1.2.3.4", "h0_0")],
                "osx-64": [("only-here", "2.0", "h1_0")]},
        "old-env": {"linux-64": [("solo", "3.0", "h0_0")]},
        "big": {"linux-64": many}})
    new = _lock_text({
        "gpu": {"linux-64": [("major", "2.0.0", "h0_0"), ("minor", "1.1.0", "h0_0"), ("patch", "1.2.4", "h0_0"),
                             ("build", "1.0", "h1_1"), ("new", "0.1", "h0_0"), ("Wheel-Pkg", "1.1", "pypi"),
                             ("deep", "1.2.3.5", "h0_0")]},
        "big": {"linux-64": [(n, "1.1", b) for n, _, b in many]}})
    diff = diff_locks(lock_packages(old, "old"), lock_packages(new, "new"))
    data = diff_json(diff)
    assert list(data["environment"]) == ["gpu", "big", "old-env"]  # removed environments last, as pixi
    assert list(data["environment"]["gpu"]) == ["linux-64", "osx-64"]  # so is a removed platform
    wheel = next(r for r in data["environment"]["gpu"]["linux-64"] if r["type"] == "pypi")
    assert wheel["name"] == "wheel_pkg" and set(wheel["before"]) == {"pypi", "version"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    theirs = _to_markdown(tools, json.dumps(data), cwd, "--merge-dependencies", "no")
    assert theirs == diff_markdown(diff) + "\n"
    link = "(https://prefix.dev/channels/conda-forge/packages/{})".format
    for row in (f"|[major]{link('major')}|1.2.3|2.0.0|Major Upgrade|",
                f"|[minor]{link('minor')}[^2]|1.2.3|1.1.0|Minor Downgrade|",
                f"|[build]{link('build')}|h0_0|h1_1|Only build string|", f"|[deep]{link('deep')}|1.2.3.4|1.2.3.5|Other|",
                "|[wheel_pkg](https://pypi.org/project/wheel_pkg)|1.0|1.1|Minor Upgrade|", "|gone|1.0||Removed|",
                "<details>\n<summary>linux-64</summary>", "<details open>\n<summary>osx-64</summary>"):
        assert row in theirs


def test_a_secret_in_either_lock_never_reaches_the_diff() -> None:
    from rocmlock.lockdiff.diff import diff_json, diff_locks, diff_markdown, diff_text, lock_packages

    clean = _lock_text({"e": {"linux-64": [("a", "1.0", "h0_0"), ("w", "1.0", "pypi")]}})
    secret = (clean.replace("https://conda.anaconda.org/", "https://bot:Pw-s3cr3t-9@conda.anaconda.org/t/tk-s3cr3t-8/")
              .replace("-py3-none-any.whl", "-py3-none-any.whl?X-Amz-Signature=sig-s3cr3t-7"))
    changed = _lock_text({"e": {"linux-64": [("a", "2.0", "h0_0"), ("w", "2.0", "pypi")]}})
    # the conda package differs only by its credentials: no change (rocmlock writes the lock without them); the
    # wheel's URL differs by a query, which is masked, not dropped
    rows = diff_locks(lock_packages(secret, "old"), lock_packages(clean, "new"))["e"]["linux-64"]
    assert [r.package.name for r in rows] == ["w"]
    assert rows[0].before is not None and rows[0].before.location.endswith(".whl?***")
    for old, new in ((secret, changed), (changed, secret)):
        diff = diff_locks(lock_packages(old, "old"), lock_packages(new, "new"))
        assert len(diff["e"]["linux-64"]) == 2
        for text in (json.dumps(diff_json(diff)), diff_markdown(diff), "\n".join(diff_text(diff))):
            assert "s3cr3t" not in text


def test_a_changed_entry_keeps_the_keys_that_differ_and_nulls_those_it_lost() -> None:
    from rocmlock.lockdiff.diff import diff_json, diff_locks, lock_packages

    old = yaml.safe_load(_lock_text({"e": {"linux-64": [("a", "1.0", "h0_0"), ("b", "1.0", "h0_0")]}}))
    new = yaml.safe_load(_lock_text({"e": {"linux-64": [("a", "1.1", "h0_0"), ("b", "1.0", "h0_0")]}}))
    old["packages"][0]["license"], old["packages"][0]["depends"] = "BSD", ["python"]
    new["packages"][0].pop("license")
    new["packages"][0]["depends"], new["packages"][0]["size"] = ["python"], 7
    diff = diff_locks(lock_packages(yaml.safe_dump(old), "old"), lock_packages(yaml.safe_dump(new), "new"),
                      lambda env, plat, kind, name: name == "b")
    (row,) = diff_json(diff)["environment"]["e"]["linux-64"]  # b is unchanged: no row, explicit or not
    assert row == {"name": "a", "type": "conda",
                   "before": {"conda": f"{FORGE}/a-1.0-h0_0.conda", "license": "BSD"},
                   "after": {"conda": f"{FORGE}/a-1.1-h0_0.conda", "size": 7, "license": None}}
    assert list(row) == ["name", "before", "after", "type"]  # pixi's key order; no `explicit` when false


def test_a_hostile_locks_channel_and_build_strings_stay_inside_their_cells() -> None:
    """The markdown goes into a pull request comment: a prefix.dev URL whose channel segment holds `)`/`|` gets
    no link (it would end the link or the row), and a `|` in a build string is escaped in its cell."""
    from rocmlock.lockdiff.diff import diff_locks, diff_markdown, lock_packages

    old = _lock_text({"e": {"linux-64": [("a", "1.0", "h0_0"), ("b", "1.0", "h1_0")]}})
    new = _lock_text({"e": {"linux-64": [("a", "2.0", "h0_0"), ("b", "1.0", "h1|x_0")]}})
    new = new.replace(f"{FORGE}/a-2.0", "https://prefix.dev/evil)|[x](https://attacker.example/linux-64/a-2.0")
    table = diff_markdown(diff_locks(lock_packages(old, "old"), lock_packages(new, "new")))
    rows = [line for line in table.splitlines() if line.startswith("|") and not line.startswith(("|Dep", "|-"))]
    assert len(rows) == 2, table
    assert all(line.count("|") - line.count("\\|") == 5 for line in rows), rows
    assert "attacker" not in table and "](" not in rows[0], rows
    assert "h1&#124;x_0" in table, table
    # a well-formed prefix.dev channel still gets its link
    fine = new.replace("https://prefix.dev/evil)|[x](https://attacker.example/", "https://prefix.dev/my-chan/")
    assert "(https://prefix.dev/channels/my-chan/packages/a)" in diff_markdown(
        diff_locks(lock_packages(old, "old"), lock_packages(fine, "new")))


def test_a_name_the_terminal_cannot_show_is_escaped_not_a_traceback(ws_copy: Path, tmp_path: Path) -> None:
    """`LC_ALL=C` (no UTF-8 locale: Python writes stdout as ASCII) and a lock naming `rocm-versión`: `diff` and
    `diff --markdown` ended in a UnicodeEncodeError traceback; the name is written as Python writes it on stderr."""
    import os
    import sys

    old = ws_copy / "pixi.lock"
    new = tmp_path / "new.lock"
    text = old.read_text()
    assert "/llamafactory-0.9.4-" in text
    new.write_text(text.replace("/llamafactory-0.9.4-", "/rocm-versión-0.9.4-"))
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    for extra in ([], ["--markdown"]):
        proc = subprocess.run([sys.executable, "-m", "rocmlock", "diff", str(old), str(new), *extra], env=env,
                              capture_output=True, check=False, timeout=120)
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")[-2000:]
        assert b"rocm-versi\\xf3n" in proc.stdout, proc.stdout[-2000:]
