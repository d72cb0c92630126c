"""envs/<env>/conda-lock.yml as rendered (issue 36): conda-lock's v1 layout, one solution per conda subdir, the GPU
target in custom_metadata; none where the format cannot hold the environment. conda-lock 4.0.3 and conda-lockfiles
0.2.2 install the real file in tests/test_conda_real.py."""

from __future__ import annotations

import pytest
import yaml
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.lock.condalock import render_conda_lock
from rocmlock.lock.generated import HEADER
from rocmlock.lock.lockfile import LockedPlatform

CHANNEL = "https://conda.example/rocm"
GFX90A = LockedPlatform("linux-64-gfx90a", "linux-64", ("__amdgpu=0", "__amdgpu_arch=9.0.10", "__glibc=2.28"))
GFX942 = LockedPlatform("linux-64-gfx942", "linux-64", ("__amdgpu=0", "__amdgpu_arch=9.4.2", "__glibc=2.28"))
ARM = LockedPlatform("linux-aarch64", "linux-aarch64", ())


def _record(name: str, build: str = "h0_0", depends: tuple[str, ...] = (), subdir: str = "linux-64",
            md5: bytes | None = b"\x02" * 16, url: str = CHANNEL) -> RepoDataRecord:
    record = PackageRecord(name, "1.0", BuildString(build), 0, subdir, depends=list(depends), sha256=b"\x01" * 32,
                           md5=md5)
    file = f"{name}-1.0-{build}.conda"
    return RepoDataRecord(record, file, f"{url}/{subdir}/{file}", url)


def test_one_gpu_platform_is_one_linux_64_solution_with_its_target_recorded() -> None:
    torch = _record("pytorch", "rocm72_gfx942_py312_h1_0", ("python >=3.12,<3.13", "amdgpu-target * gfx942"))
    text = render_conda_lock("mi300x", [CHANNEL + "/"], [GFX942], {GFX942.name: [torch, _record("python")]}, "gfx942")
    assert text is not None and text.splitlines()[:3] == [
        HEADER, "# environment: mi300x, GPU target gfx942; conda-lock v1 format, one solution per conda subdir:",
        "#   conda-lock install -p <prefix> conda-lock.yml"]
    # conda-lock's own layout: its key order, block style, one line per value however long
    assert "\nversion: 1\nmetadata:\n  content_hash:\n    linux-64: " in text
    assert "\n  dependencies:\n    python: '>=3.12,<3.13'\n    amdgpu-target: '* gfx942'\n  url: " in text
    data = yaml.safe_load(text)
    assert data["version"] == 1
    meta = data["metadata"]
    assert meta["platforms"] == ["linux-64"] and meta["sources"] == []
    assert meta["channels"] == [{"url": CHANNEL, "used_env_vars": []}]
    assert meta["custom_metadata"] == {"created_by": "rocmlock", "amdgpu-target": "gfx942",
                                       "rocmlock-platforms.linux-64": "linux-64-gfx942",
                                       "virtual-packages.linux-64": "__amdgpu=0, __amdgpu_arch=9.4.2"}
    assert [p["name"] for p in data["package"]] == ["python", "pytorch"]
    pkg = data["package"][1]
    assert pkg == {"name": "pytorch", "version": "1.0", "build": "rocm72_gfx942_py312_h1_0", "manager": "conda",
                   "platform": "linux-64", "dependencies": {"python": ">=3.12,<3.13", "amdgpu-target": "* gfx942"},
                   "url": f"{CHANNEL}/linux-64/pytorch-1.0-rocm72_gfx942_py312_h1_0.conda",
                   "hash": {"md5": "02" * 16, "sha256": "01" * 32}, "category": "main", "optional": False}
    # deterministic, and a changed pin changes the content hash
    again = render_conda_lock("mi300x", [CHANNEL], [GFX942], {GFX942.name: [_record("python"), torch]}, "gfx942")
    assert again == text
    other = render_conda_lock("mi300x", [CHANNEL], [GFX942], {GFX942.name: [_record("python", "h1_0"), torch]})
    assert other is not None and yaml.safe_load(other)["metadata"]["content_hash"] != meta["content_hash"]


def test_platforms_of_one_subdir_are_one_solution_only_when_they_lock_the_same() -> None:
    same = {GFX90A.name: [_record("python")], GFX942.name: [_record("python")]}
    text = render_conda_lock("default", [CHANNEL], [GFX90A, GFX942], same)
    assert text is not None
    data = yaml.safe_load(text)
    assert len(data["package"]) == 1
    # two GPU platforms in one solution: neither's virtual packages, no GPU target named
    assert data["metadata"]["custom_metadata"] == {"created_by": "rocmlock",
                                                   "rocmlock-platforms.linux-64": "linux-64-gfx90a, linux-64-gfx942"}
    assert text.splitlines()[1] == "# environment: default; conda-lock v1 format, one solution per conda subdir:"
    differ = {GFX90A.name: [_record("amdgpu-target", "gfx90a")], GFX942.name: [_record("amdgpu-target", "gfx942")]}
    assert render_conda_lock("both", [CHANNEL], [GFX90A, GFX942], differ) is None


def test_two_subdirs_are_two_solutions() -> None:
    records = {GFX942.name: [_record("python")], ARM.name: [_record("python", subdir="linux-aarch64")]}
    text = render_conda_lock("e", [CHANNEL], [GFX942, ARM], records)
    assert text is not None
    data = yaml.safe_load(text)
    assert data["metadata"]["platforms"] == ["linux-64", "linux-aarch64"]
    assert sorted(p["platform"] for p in data["package"]) == ["linux-64", "linux-aarch64"]
    assert sorted(data["metadata"]["content_hash"]) == ["linux-64", "linux-aarch64"]


def test_a_package_without_sha256_has_its_md5_only_and_pypi_is_pointed_to() -> None:
    record = PackageRecord("a", "1.0", BuildString("h0_0"), 0, "linux-64", md5=b"\x02" * 16)
    rec = RepoDataRecord(record, "a-1.0-h0_0.conda", f"{CHANNEL}/linux-64/a-1.0-h0_0.conda", CHANNEL)
    text = render_conda_lock("e", [CHANNEL], [GFX942], {GFX942.name: [rec]}, pypi_platforms=[GFX942.name, ARM.name])
    assert text is not None and yaml.safe_load(text)["package"][0]["hash"] == {"md5": "02" * 16}
    assert ("# PyPI packages are not in it: then pip install --require-hashes -r requirements-<platform>.txt "
            "(linux-64-gfx942, linux-aarch64)") in text.splitlines()


@pytest.mark.parametrize("why", ["no-md5", "not-locked"])
def test_no_file_where_conda_lock_would_refuse_it(why: str) -> None:
    records = {GFX942.name: [_record("python", md5=None)]} if why == "no-md5" else {}
    assert render_conda_lock("mi300x", [CHANNEL], [GFX942], records) is None


def test_credentials_never_reach_the_file() -> None:
    secret = "https://user:s3cret@conda.example/t/tk-123456/rocm"
    text = render_conda_lock("mi300x", [secret], [GFX942], {GFX942.name: [_record("python", url=secret)]})
    assert text is not None and "s3cret" not in text and "tk-123456" not in text


def test_underscore_packages_are_locked_like_any_other() -> None:
    # conda-forge's `_openmp_mutex` and `_libgcc_mutex` are real packages (every libgomp/libgcc environment has
    # them; only `__`-prefixed names are virtual): conda-lock install must get them, and depends on them kept.
    gcc = _record("libgcc", depends=("_openmp_mutex >=4.5", "_libgcc_mutex 0.1 conda_forge"))
    records = [gcc, _record("_openmp_mutex", "2_gnu"), _record("_libgcc_mutex", "conda_forge"), _record("python")]
    text = render_conda_lock("mi300x", [CHANNEL], [GFX942], {GFX942.name: records}, "gfx942")
    assert text is not None
    packages = {p["name"]: p for p in yaml.safe_load(text)["package"]}
    assert sorted(packages) == ["_libgcc_mutex", "_openmp_mutex", "libgcc", "python"]
    assert packages["_openmp_mutex"]["url"] == f"{CHANNEL}/linux-64/_openmp_mutex-1.0-2_gnu.conda"
    assert packages["_openmp_mutex"]["hash"] == {"md5": "02" * 16, "sha256": "01" * 32}
    assert packages["libgcc"]["dependencies"] == {"_openmp_mutex": ">=4.5", "_libgcc_mutex": "0.1 conda_forge"}


def test_a_string_pyyaml_must_decide_sends_the_whole_file_to_pyyaml() -> None:
    """A dependency string with a non-ASCII character: the direct writer leaves that package to PyYAML
    (rocmlock.util.yamlwrite.render_item is None), so the file is PyYAML's from top to bottom, the other packages
    included. Planted: the packages left out of that document (the fallback wrote none): the load below fails."""
    odd = _record("pytorch", depends=("python >=3.12", "caf\u00e9 >=1"))
    text = render_conda_lock("e", [CHANNEL + "/"], [GFX942], {GFX942.name: [odd, _record("python")]})
    assert text is not None
    body = text[text.index("\nversion: 1\n") + 1:]
    data = yaml.safe_load(body)
    assert [p["name"] for p in data["package"]] == ["python", "pytorch"]
    assert data["package"][1]["dependencies"] == {"python": ">=3.12", "caf\u00e9": ">=1"}
    assert body == yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
