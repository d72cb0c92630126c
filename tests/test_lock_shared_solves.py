"""Issue 40 (speed): jobs that differ in their virtual packages alone (an environment without a GPU feature over
several rich GPU platforms, such as pixi's ``default``) are solved once when nothing the solver may consider reads
those virtual packages, and each on its own when something does (rocmlock.lock.solve.alike, _reads_virtual).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rattler import Channel, Gateway, MatchSpec, Subdir
from rocmlock.cli.main import main
from rocmlock.lock import solve as solve_mod
from rocmlock.lock.lockfile import read_lockfile

RICH = """platforms = [
    { name = "linux-64-gfx90a", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.0.10" },
    { name = "linux-64-gfx942", platform = "linux-64", __amdgpu = "0", __amdgpu_arch = "9.4.2" },
]"""
# A dependency taken only on a GPU of ISA 9.4 or newer (a repodata v3 conditional dependency, as rattler's
# indexer writes it), a constraint on the GPU, and a package that reads no virtual package at all.
GATED = 'extra[when="__amdgpu_arch >=9.4"]'


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("shared") / "ch", [
        Pkg("extra", "1"),
        Pkg("plain", "1", depends=("extra",)),
        Pkg("gated", "1", depends=(GATED,)),
        Pkg("capped", "1", constrains=("__amdgpu_arch >=9.4",)),
    ])


def _workspace(root: Path, channel: Path, dependency: str, version: str = "*") -> Path:
    root.mkdir(parents=True)
    (root / "pixi.toml").write_text(f'[workspace]\nname = "t"\nchannels = ["{channel.as_uri()}"]\n{RICH}\n\n'
                                    f'[dependencies]\n{dependency} = "{version}"\n')
    return root


@pytest.fixture
def solves(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """How many times each (environment, platform) was given to rattler's solver."""
    seen: Counter[tuple[str, str]] = Counter()
    real = solve_mod._solve_one

    async def counted(job: solve_mod.SolveJob, gateway: Gateway) -> object:
        seen[job.key] += 1
        return await real(job, gateway)

    monkeypatch.setattr(solve_mod, "_solve_one", counted)
    return seen


def _names(lock: Path, platform: str) -> list[str]:
    locked = read_lockfile(lock)
    assert locked is not None
    records = locked.records("default", platform)
    assert records is not None
    return sorted(r.name.normalized for r in records)


def test_jobs_that_no_record_tells_apart_are_solved_once(channel: Path, tmp_path: Path,
                                                         solves: Counter[tuple[str, str]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _workspace(tmp_path / "shared", channel, "plain")
    assert main(["lock", "--manifest-path", str(shared)]) == 0
    assert sum(solves.values()) == 1, solves  # two platforms, one solve
    assert _names(shared / "pixi.lock", "linux-64-gfx90a") == _names(shared / "pixi.lock", "linux-64-gfx942") \
        == ["extra", "plain"]
    # The same workspace solved platform by platform writes the same bytes.
    monkeypatch.setattr(solve_mod, "alike", lambda jobs: [[i] for i in range(len(jobs))])
    apart = _workspace(tmp_path / "apart", channel, "plain")
    solves.clear()
    assert main(["lock", "--manifest-path", str(apart)]) == 0
    assert sum(solves.values()) == 2
    for name in ("pixi.lock", "envs/default/conda-linux-64-gfx90a.lock", "envs/default/conda-lock.yml"):
        assert (apart / name).read_text().replace(str(apart), "WS") == \
            (shared / name).read_text().replace(str(shared), "WS"), name


def test_a_dependency_conditional_on_the_gpu_is_solved_per_platform(channel: Path, tmp_path: Path,
                                                                    solves: Counter[tuple[str, str]]) -> None:
    """Planted: with the records left unscanned (or only rattler's ``wanted_virtual_packages`` asked, see below)
    both platforms got gfx90a's answer, without `extra`."""
    ws = _workspace(tmp_path / "ws", channel, "gated")
    assert main(["lock", "--manifest-path", str(ws)]) == 0
    assert solves == {("default", "linux-64-gfx90a"): 1, ("default", "linux-64-gfx942"): 1}
    assert _names(ws / "pixi.lock", "linux-64-gfx942") == ["extra", "gated"]
    assert _names(ws / "pixi.lock", "linux-64-gfx90a") == ["gated"]


def test_rattler_does_not_count_a_condition_as_wanting_the_virtual_package(channel: Path, tmp_path: Path) -> None:
    """Why _reads_virtual scans the records itself (py-rattler 0.28): the query's ``wanted_virtual_packages`` has
    ``__amdgpu_arch`` for a constraint, and nothing for a name used only in a ``[when=...]`` condition. If a
    rattler release starts counting it, this fails: the scan could then be rattler's answer."""
    async def wanted(spec: str) -> list[str]:
        found = await Gateway(cache_dir=str(tmp_path / "cache")).query(
            [Channel(channel.as_uri())], [Subdir("linux-64"), Subdir("noarch")], [MatchSpec(spec)],
            recursive=True, detector_target=Subdir("linux-64"))
        assert sorted(r.name.normalized for records in found for r in records) != []
        return [n.normalized for n in found.wanted_virtual_packages]

    assert asyncio.run(wanted("capped")) == ["__amdgpu_arch"]
    assert asyncio.run(wanted("gated")) == []


def test_a_failure_names_the_platform_that_failed(channel: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ws = _workspace(tmp_path / "ws", channel, "capped")
    assert main(["lock", "--manifest-path", str(ws)]) != 0
    err = capsys.readouterr().err
    first = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "linux-64-gfx90a" in first and "linux-64-gfx942" not in first, err
    assert not (ws / "pixi.lock").exists()


def test_a_manifest_spec_on_the_gpu_keeps_the_platforms_apart(channel: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A dependency on the virtual package itself that the first platform (gfx90a, in the order the jobs are
    made) meets: the other must not take its records (planted: without the look at the specs, it did)."""
    ws = _workspace(tmp_path / "ws", channel, "__amdgpu_arch", "<9.4")
    assert main(["lock", "--manifest-path", str(ws)]) != 0
    first = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("error:"))
    # The solver's own verdict; with gfx90a's records given to gfx942, pixi's check of the solve caught it later,
    # as "one pixi would reject".
    assert first.startswith("error: cannot solve environment 'default' on platform 'linux-64-gfx942'"), first
    assert not (ws / "pixi.lock").exists()


def test_an_unsolvable_group_names_every_platform(channel: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing tells the two platforms apart, and neither solves: each is named, not the first one twice
    (planted: the first solve's failure given to the rest)."""
    ws = _workspace(tmp_path / "ws", channel, "plain")
    (ws / "pixi.toml").write_text((ws / "pixi.toml").read_text().replace('plain = "*"', 'plain = ">=2"'))
    assert main(["lock", "--manifest-path", str(ws)]) != 0
    first = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("error:"))
    assert "'linux-64-gfx90a'" in first and "'linux-64-gfx942'" in first, first


def _job(key: str, vps: tuple[tuple[str, str, str], ...], **kw: object) -> solve_mod.SolveJob:
    from rocmlock.workspace.platforms import Platform

    fields: dict[str, object] = {"channels": ("file:///c/",), "specs": ("python",), "channel_priority": "strict",
                                 "target": None, **kw}
    return solve_mod.SolveJob(key=("e", key), platform=Platform(key, "linux-64"), virtual_packages=vps,
                              **fields)  # type: ignore[arg-type]


def test_which_jobs_are_alike_and_what_they_differ_in() -> None:
    base = (("__unix", "0", "0"), ("__glibc", "2.28", "0"))
    a = _job("a", (*base, ("__amdgpu", "0", ""), ("__amdgpu_arch", "9.0.10", "")))
    b = _job("b", (*base, ("__amdgpu", "0", ""), ("__amdgpu_arch", "9.4.2", "")))
    plain = _job("p", base)
    other = _job("o", base, specs=("python", "numpy"))
    assert solve_mod.alike([a, b, plain, other]) == [[0, 1, 2], [3]]
    assert solve_mod.differing_virtual([a, b]) == {"__amdgpu_arch"}
    assert solve_mod.differing_virtual([a, plain]) == {"__amdgpu", "__amdgpu_arch"}
    assert solve_mod.differing_virtual([plain, plain]) == frozenset()
    # A job that keeps locked records (a re-lock with pins) is never grouped: its pins are its own.
    assert solve_mod.alike([a, _job("b", b.virtual_packages, locked=(object(),))]) == [[0], [1]]
    assert solve_mod.mentions([GATED], frozenset({"__amdgpu_arch"}))
    assert solve_mod.mentions(["__amdgpu_arch ==9.4.2"], frozenset({"__amdgpu"}))  # errs towards apart
    assert not solve_mod.mentions(["extra >=1", "python"], frozenset({"__amdgpu", "__amdgpu_arch"}))


def test_a_query_that_fails_solves_each_platform_on_its_own(channel: Path, tmp_path: Path,
                                                            solves: Counter[tuple[str, str]],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """When the look at what the solver may consider fails, nothing is known to be shared: each platform is solved
    (and a real failure is then reported by the solves themselves). Planted: the failure answered "reads nothing",
    and both platforms got the first one's records after one solve."""
    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the gateway query failed")

    monkeypatch.setattr(Gateway, "query", broken)
    ws = _workspace(tmp_path / "ws", channel, "plain")
    assert main(["lock", "--manifest-path", str(ws)]) == 0
    assert solves == {("default", "linux-64-gfx90a"): 1, ("default", "linux-64-gfx942"): 1}
    assert _names(ws / "pixi.lock", "linux-64-gfx942") == _names(ws / "pixi.lock", "linux-64-gfx90a") \
        == ["extra", "plain"]


def test_a_solve_keeps_its_gateway_only_until_the_next_and_never_reuses_it(tmp_path: Path) -> None:
    """The gateway of the last solve is kept (freeing its parsed repodata cost the lock ~40 ms on the bench's
    channel), but only one call's worth, and a second lock in the same process gets a gateway of its own and reads
    the channel afresh. Planted: never freeing them (two held after two locks) and reusing the held one both fail."""
    channel = build_channel(tmp_path / "ch", [Pkg("plain", "1")])
    first = _workspace(tmp_path / "first", channel, "plain")
    assert main(["lock", "--manifest-path", str(first)]) == 0
    held = list(solve_mod._retired)
    assert len(held) == 1
    build_channel(channel, [Pkg("plain", "2")])
    second = _workspace(tmp_path / "second", channel, "plain")
    assert main(["lock", "--manifest-path", str(second)]) == 0
    assert len(solve_mod._retired) == 1 and solve_mod._retired[0] is not held[0]
    locked = read_lockfile(second / "pixi.lock")
    assert locked is not None
    assert [str(r.version) for r in locked.records("default", "linux-64-gfx942") or []] == ["2"]
