"""The export renderers, line by line, on hand-made records (issue 29: what mutation testing left unjudged).

The other export tests render what a real solve locked: every record there has a sha256, two platforms at most,
channels written without a trailing slash. Here the renderers get the cases those never produce: a record with
only an md5 (an older channel's repodata) or no hash, three platforms, a channel URL with a slash or
credentials, an environment with PyPI pins and no conda packages. Pure functions: no solve, no files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rattler import PackageRecord, RepoDataRecord
from rocmlock.errors import InputError
from rocmlock.lock.exports import (
    PIP_NOTES,
    render_environment_yml,
    render_explicit,
    render_exports,
    render_requirements_file,
)
from rocmlock.lock.lockfile import UNSAFE_HINT, LockedPlatform
from rocmlock.workspace.pypi import DEFAULT_INDEXES, PypiPin

CHANNEL = "https://conda.example/rocm"
SHA = bytes(range(32))
MD5 = bytes(range(16))


def _record(name: str, depends: tuple[str, ...] = (), *, sha256: bytes | None = SHA, md5: bytes | None = MD5,
            subdir: str = "linux-64") -> RepoDataRecord:
    from rattler import BuildString

    record = PackageRecord(name, "1.0", BuildString("h0_0"), 0, subdir, depends=list(depends), sha256=sha256,
                           md5=md5)
    file = f"{name}-1.0-h0_0.conda"
    return RepoDataRecord(record, file, f"{CHANNEL}/{subdir}/{file}", CHANNEL)


PLATFORM = LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu_arch=9.4.2",))


def _explicit_lines(records: list[RepoDataRecord]) -> list[str]:
    text = render_explicit("mi300x", PLATFORM, records)
    return text.split("@EXPLICIT\n", 1)[1].splitlines()


def test_explicit_lines_carry_sha256_else_md5_else_nothing() -> None:
    # conda's explicit format: `<url>#<md5>` is the classic suffix, `#sha256:<hex>` the one conda 24.9+ reads
    # (conda/misc.py url_pat); a record with neither hash is written as a bare URL.
    lines = _explicit_lines([_record("a"), _record("b", sha256=None), _record("c", sha256=None, md5=None)])
    # (Independent records: rattler's topological sort picks their order; dependencies are the next test's.)
    assert sorted(lines) == [f"{CHANNEL}/linux-64/a-1.0-h0_0.conda#sha256:{SHA.hex()}",
                             f"{CHANNEL}/linux-64/b-1.0-h0_0.conda#{MD5.hex()}",
                             f"{CHANNEL}/linux-64/c-1.0-h0_0.conda"]


def test_explicit_puts_dependencies_first_whatever_their_names() -> None:
    names = [line.rsplit("/", 1)[1].split("-", 1)[0]
             for line in _explicit_lines([_record("a", ("m",)), _record("m", ("z",)), _record("z"), _record("b")])]
    assert names.index("z") < names.index("m") < names.index("a"), names
    assert sorted(names) == ["a", "b", "m", "z"]


def test_explicit_header_names_the_requirements_file_and_the_platform() -> None:
    text = render_explicit("mi300x", PLATFORM, [_record("a")], pypi_file="requirements-linux-64-gfx942.txt")
    head = text.split("@EXPLICIT\n", 1)[0].splitlines()
    assert head[1:5] == ["# environment: mi300x", "# platform: linux-64", "# rocmlock platform: linux-64-gfx942",
                         "# virtual packages: __amdgpu_arch=9.4.2"]
    assert ("# PyPI packages: then `python -m pip install --require-hashes -r requirements-linux-64-gfx942.txt`"
            in head)
    assert not any("PyPI" in line for line in render_explicit("mi300x", PLATFORM, [_record("a")]).splitlines())


def test_environment_yml_channels_lose_a_trailing_slash_and_their_secrets() -> None:
    text = render_environment_yml("mi300x", [f"{CHANNEL}/", "https://bot:pw-9@conda.example/t/tk-1/privateX/"],
                                  PLATFORM, [_record("a")])
    assert yaml.safe_load(text)["channels"] == [CHANNEL, "https://conda.example/privateX"]
    assert "pw-9" not in text and "tk-1" not in text


def test_environment_yml_lists_every_other_platform() -> None:
    text = render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("a")],
                                  other_platforms=["linux-64-gfx90a", "linux-64-gfx1100"])
    assert "# other platforms: linux-64-gfx90a, linux-64-gfx1100 (see conda-<platform>.lock)" in text.splitlines()
    assert not any(line.startswith("# other platforms")
                   for line in render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("a")]).splitlines())


PIN = PypiPin("tqdm", "4.67.1", "a" * 64)


def test_environment_yml_dependencies_are_a_list_in_every_combination() -> None:
    # conda 26.7 wants a list (conda/env/env.py, dependencies_validation): `dependencies:` alone is null.
    cases = {
        "conda only": ([_record("a")], [], ["a=1.0=h0_0"]),
        "pypi only": ([], [PIN], [{"pip": ["tqdm==4.67.1"]}]),
        "both": ([_record("pip"), _record("a")], [PIN], ["a=1.0=h0_0", "pip=1.0=h0_0", {"pip": ["tqdm==4.67.1"]}]),
        "neither": ([], [], []),
    }
    for case, (records, pins, deps) in cases.items():
        text = render_environment_yml("mi300x", [CHANNEL], PLATFORM, records, pins=pins)
        assert yaml.safe_load(text)["dependencies"] == deps, case


def test_the_pip_section_says_when_conda_adds_an_unpinned_pip() -> None:
    without = render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("python")], pins=[PIN])
    with_pip = render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("python"), _record("pip")], pins=[PIN])
    note = "  # no conda `pip` is locked: conda adds an unpinned `pip` from the channels to run this section"
    assert note in without.splitlines() and note not in with_pip
    # python without pip and no PyPI pins: the notes on add_pip_as_python_dependency; with pip or pins, not.
    assert all(line in render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("python")]).splitlines()
               for line in PIP_NOTES)
    for text in (with_pip, without,
                 render_environment_yml("mi300x", [CHANNEL], PLATFORM, [_record("python"), _record("pip")])):
        assert PIP_NOTES[0] not in text


def test_render_exports_takes_the_first_platform_the_lock_has_and_names_the_others(tmp_path: Path) -> None:
    platforms = [LockedPlatform(n, "linux-64", ()) for n in ("linux-64-gfx90a", "linux-64-gfx942", "linux-64-gfx1100",
                                                              "linux-64-gfx950")]
    records = {p.name: [_record("a")] for p in platforms[1:]}  # the first is not in the lock
    out = render_exports(tmp_path, "mi300x", [CHANNEL], platforms, records,
                         pypi={"linux-64-gfx1100": [PIN]}, indexes=DEFAULT_INDEXES)
    names = sorted(p.name for p in out)
    # three GPU platforms of one subdir locking the same packages: one conda-lock.yml solution for linux-64
    assert names == ["conda-linux-64-gfx1100.lock", "conda-linux-64-gfx942.lock", "conda-linux-64-gfx950.lock",
                     "conda-lock.yml", "environment.yml", "requirements-linux-64-gfx1100.txt"]
    assert {p.parent for p in out} == {tmp_path / "mi300x"}
    yml = out[tmp_path / "mi300x" / "environment.yml"].splitlines()
    assert "# platform: linux-64-gfx942 (linux-64)" in yml
    assert "# other platforms: linux-64-gfx1100, linux-64-gfx950 (see conda-<platform>.lock)" in yml
    assert "requirements-linux-64-gfx1100.txt" in out[tmp_path / "mi300x" / "conda-linux-64-gfx1100.lock"]
    assert "requirements-" not in out[tmp_path / "mi300x" / "conda-linux-64-gfx950.lock"]
    assert render_exports(tmp_path, "mi300x", [CHANNEL], platforms[:1], records) == {}


def test_comments_list_every_gpu_virtual_package_and_every_skipped_source() -> None:
    from rocmlock.workspace.pypi import SourcePackage

    two = LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu=0", "__amdgpu_arch=9.4.2", "__glibc=2.28"))
    skipped = [SourcePackage("pypi", "mylib", "./mylib", "a local path"),
               SourcePackage("conda", "tool", "../tool", "a source build")]
    text = render_explicit("mi300x", two, [_record("a")], skipped=skipped).splitlines()
    assert "# virtual packages: __amdgpu=0, __amdgpu_arch=9.4.2" in text  # the GPU ones only, all of them
    assert ("# not exported (--skip-source; install them yourself): mylib (pypi, a local path), "
            "tool (conda, a source build)") in text
    cpu = LockedPlatform("linux-64", "linux-64", ("__glibc=2.28",))
    assert not any("virtual packages" in line for line in render_explicit("cpu", cpu, [_record("a")]).splitlines())


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"env": "mi#300x"}, "environment 'mi#300x': the environment name 'mi#300x' holds a '#'"),
    ({"env": "mi300x\n"}, "environment 'mi300x\\n': the environment name 'mi300x\\n' holds the control character \\n"),
    ({"channels": ["https://h/c\n@EXPLICIT"]}, "the channel 'https://h/c\\n@EXPLICIT' holds the control character"),
    ({"other_platforms": ["linux-64-gfx950\n@EXPLICIT"]},
     "the platform 'linux-64-gfx950\\n@EXPLICIT' holds the control character \\n"),
    ({"platform": LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu_arch=9.4.2\nx",))},
     "the platform '__amdgpu_arch=9.4.2\\nx' holds the control character \\n"),
])
def test_environment_yml_refuses_a_name_channel_or_platform_that_would_add_a_line(
        kwargs: dict[str, Any], says: str) -> None:
    args: dict[str, Any] = {"env": "mi300x", "channels": [CHANNEL], "platform": PLATFORM, "records": [_record("a")],
                            **kwargs}
    with pytest.raises(InputError) as err:
        render_environment_yml(**args)
    assert says in str(err.value) and str(err.value).endswith("; no export written"), str(err.value)
    assert err.value.hint == UNSAFE_HINT


def test_a_hash_is_harmless_in_a_platform_comment_only() -> None:
    # Platform texts go into comments, where a '#' changes nothing; a name or channel is YAML data.
    hashed = LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu_arch=9.4.2#x",))
    assert "# virtual packages: __amdgpu_arch=9.4.2#x" in render_environment_yml(
        "mi300x", [CHANNEL], hashed, [_record("a")], other_platforms=["p#2"]).splitlines()


def test_the_explicit_file_and_the_requirements_file_refuse_what_would_add_a_line() -> None:
    bad = LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu_arch=9.4.2\n@EXPLICIT",))
    with pytest.raises(InputError, match=r"the platform '__amdgpu_arch=9.4.2\\n@EXPLICIT' holds the control"):
        render_explicit("mi300x", bad, [_record("a")])
    with pytest.raises(InputError, match=r"tqdm"):
        render_requirements_file("mi300x", PLATFORM, [PypiPin("tqdm", "4.67.1\n--index-url x", "a" * 64)],
                                 DEFAULT_INDEXES)


def test_the_requirements_header_names_the_files_of_its_platform() -> None:
    head = render_requirements_file("mi300x", PLATFORM, [PIN], DEFAULT_INDEXES).splitlines()
    assert head[1:5] == ["# environment: mi300x", "# platform: linux-64-gfx942 (linux-64)",
                         "# after the conda packages (conda-linux-64-gfx942.lock), in that environment:",
                         "#   python -m pip install --require-hashes -r requirements-linux-64-gfx942.txt"]
