"""rocmlock.lock.satisfy against pixi 0.77.0's own rules: which lock `pixi install --locked` accepts, and what
rocmlock refuses to write because pixi would not accept it."""

from __future__ import annotations

from pathlib import Path

import pytest
from channels import Pkg, build_channel
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.cli.main import main
from rocmlock.lock.satisfy import records_unsat
from rocmlock.lock.solve import virtual_packages_for
from rocmlock.workspace.manifest import load_workspace
from rocmlock.workspace.model import Environment
from rocmlock.workspace.pixi_compat import pixi_virtual_packages
from rocmlock.workspace.platforms import Platform

GPU = '[workspace]\nname = "t"\nchannels = ["c"]\nplatforms = [{ name = "gpu", platform = "linux-64", ' \
      '__amdgpu = "0", __amdgpu_arch = "9.4.2" }]\n'


def record(name: str, version: str = "1", depends: tuple[str, ...] = ()) -> RepoDataRecord:
    pkg = PackageRecord(name, version, BuildString("0"), 0, "linux-64", depends=list(depends))
    return RepoDataRecord(pkg, f"{name}-{version}-0.conda", f"https://c.example/linux-64/{name}-{version}-0.conda",
                          "https://c.example/")


def env_of(tmp_path: Path, deps: str) -> tuple[Environment, Platform]:
    (tmp_path / "pixi.toml").write_text(GPU + "[dependencies]\n" + deps)
    env = load_workspace(tmp_path).environment("default")
    return env, env.platforms[0]


def test_virtual_packages_are_the_ones_pixi_models(tmp_path: Path) -> None:
    """pixi_core/src/workspace/virtual_packages.rs (get_minimal_virtual_packages, generic_to_virtual_package) drops
    names rattler does not model; its linux-64 snapshot has `__archspec` version 1 (rattler_virtual_packages
    lib.rs, From<Archspec> for GenericVirtualPackage) and build "0" on version-only packages. rattler models
    `__amdgpu`/`__amdgpu_arch` since conda/rattler#2806 (py-rattler 0.28 detects them: `__amdgpu=0=0`)."""
    env, gpu = env_of(tmp_path, 'a = "*"\n')
    assert pixi_virtual_packages([*gpu.declared_virtual_packages(), ("__fpga", "1", "")]) == [
        ("__amdgpu", "0", "0"), ("__amdgpu_arch", "9.4.2", "0"),
        ("__unix", "0", "0"), ("__linux", "4.18", "0"), ("__glibc", "2.28", "0"), ("__archspec", "1", "x86_64")]
    # The lock file still records the declared form (pixi_manifest platform.rs, subdir_default_virtual_packages).
    assert ("__archspec", "0", "x86_64") in gpu.declared_virtual_packages()
    # rocmlock's solve adds the GPU packages as a guard only.
    assert virtual_packages_for(env, gpu)[-2:] == (("__amdgpu", "0", ""), ("__amdgpu_arch", "9.4.2", ""))


@pytest.mark.parametrize(("depends", "ok"), [
    (("__archspec 1.*",), True),          # pixi's archspec is version 1
    (("__archspec 0.*",), False),
    (("__glibc >=2.17",), True),
    (("__amdgpu_arch ==9.4.2",), True),   # the platform's __amdgpu_arch, a rattler virtual package
    (("__amdgpu_arch ==9.0.10",), False),
    (("__amdgpu",), True),
    (('b *[when="python >=3.12"]',), True),   # condition unmet (python 3.11 locked): skipped
    (('b *[when="python >=3.10"]',), False),  # condition met: b must be locked
    (('b *[when="python >=3.12 or __unix"]',), False),
    (('b *[when="(python >=3.12 or __unix) and __win"]',), True),
])
def test_record_dependencies_by_pixis_rules(tmp_path: Path, depends: tuple[str, ...], ok: bool) -> None:
    """pixi_core/src/lock_file/satisfiability/platform.rs (pixi v0.77.0): every depends of a reached record must
    match a locked record or one of pixi's virtual packages, except a conditional one whose condition no
    locked record or virtual package meets (condition_is_met; `and` binds tighter than `or`, rattler
    match_spec/condition.rs)."""
    env, gpu = env_of(tmp_path, 'a = "*"\npython = "*"\n')
    records = [record("a", depends=depends), record("python", "3.11.0")]
    reason = records_unsat(env, gpu, records)
    assert (reason is None) is ok, reason


def test_a_solve_pixi_would_reject_is_not_written(
        tmp_path: Path, channels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A package that depends on `__amdgpu_arch`, in an environment whose GPU comes from its amdgpu-target pin on a
    plain `linux-64` platform: it solves with rocmlock's guard packages, but the platform declares no
    `__amdgpu_arch` for pixi's --locked check (virtual_packages.rs) to match it, so rocmlock refuses the lock."""
    gpu_only = build_channel(tmp_path / "gpu-only", [
        Pkg("gpu-only", "1", "0", subdir="noarch", noarch="generic", depends=("__amdgpu_arch ==9.4.2",))])
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pixi.toml").write_text(
        f'[workspace]\nname = "t"\nchannels = ["{gpu_only.as_uri()}", "{channels["private"].as_uri()}"]\n'
        'platforms = ["linux-64"]\n[dependencies]\ngpu-only = "*"\n'
        'amdgpu-target = { version = "*", build = "gfx942" }\n')
    assert main(["lock", "--manifest-path", str(root / "pixi.toml")]) == 1
    err = capsys.readouterr().err
    assert "environment 'default' on platform 'linux-64' is one pixi would reject" in err
    assert "'__amdgpu_arch ==9.4.2' (from gpu-only) has no matching locked package" in err
    assert "__amdgpu_arch = \"9.4.2\"" in err  # the hint: declare it on a rich platform
    assert not (root / "pixi.lock").exists()


@pytest.mark.parametrize(("when", "locked", "kept"), [
    # rattler (crates/rattler_conda_types/src/match_spec/condition.rs, check_word_delimiter): `and`/`or` are
    # operators only between whitespace or parentheses, so a package name that contains them is one leaf.
    ('"rock-and-roll"', ("rock-and-roll",), True),
    ('"sort-or-not >=1"', ("sort-or-not",), True),
    ('"sort-or-not >=2"', ("sort-or-not",), False),
    # `and` binds tighter than `or`; a parenthesis ends a leaf without a space (rattler's test cases).
    ('"nothere or rock-and-roll and sort-or-not"', ("rock-and-roll", "sort-or-not"), True),
    ('"nothere and rock-and-roll or nothere"', ("rock-and-roll",), False),
    ('"rock-and-roll and(nothere or(sort-or-not and rock-and-roll))"', ("rock-and-roll", "sort-or-not"), True),
])
def test_when_conditions_are_read_with_rattlers_grammar(tmp_path: Path, when: str, locked: tuple[str, ...],
                                                        kept: bool) -> None:
    """A `when` dependency is held to the lock exactly when its condition holds (pixi satisfiability/platform.rs,
    condition_is_met): kept, the locked `a` must be there; not kept, a locked `a` is one too many."""
    env, plat = env_of(tmp_path, "".join(f'{name} = "*"\n' for name in locked) + f'a = {{ version = "*", when = {when} }}\n')
    records = [record(name) for name in locked]
    with_a = records_unsat(env, plat, [*records, record("a")])
    without_a = records_unsat(env, plat, records)
    assert (with_a is None, without_a is None) == ((True, False) if kept else (False, True)), (with_a, without_a)


@pytest.mark.parametrize(("depends", "ok"), [
    (("__archspec 1.* x86_64",), True),       # __archspec keeps its build (the microarchitecture)
    (("__archspec 1.* x86_64_v3",), False),
    (("__glibc 2.28.* 0",), True),            # a version-only virtual package has build "0"
    (("__glibc 2.28.* 1",), False),
])
def test_virtual_packages_carry_pixis_build_strings(tmp_path: Path, depends: tuple[str, ...], ok: bool) -> None:
    """rattler_virtual_packages (From<Archspec>, and generic_to_virtual_package in pixi virtual_packages.rs): the
    build of `__archspec` is the microarchitecture; other version-only packages have build "0"."""
    env, gpu = env_of(tmp_path, 'a = "*"\n')
    reason = records_unsat(env, gpu, [record("a", depends=depends)])
    assert (reason is None) is ok, reason


def test_the_walk_goes_on_past_a_skipped_condition_and_a_package_seen_twice(tmp_path: Path) -> None:
    """Every reached record is walked: a `when` dependency whose condition fails, a virtual package, or a package
    reached a second time, ends that branch only (else the packages after it would be called "no longer needed")."""
    env, gpu = env_of(tmp_path, 'a = "*"\npython = "*"\ny = "*"\nz = "*"\n')
    records = [record("a", depends=("c", 'b *[when="python >=3.12"]')), record("c", depends=("d", "__glibc >=2.17")),
               record("d"), record("python", "3.11.0"),
               record("y"), record("z", depends=("y",))]
    assert records_unsat(env, gpu, records) is None


@pytest.mark.parametrize(("constraint", "reason"), [
    ('peft = "<0.18"', None),                 # nothing named peft is locked: nothing to violate
    ('a = "1.*"', None),                      # the locked a matches
    ('a = "2.*"', "locked a 1 0 violates constraint 'a 2.*'"),
])
def test_constraints_apply_to_locked_packages_only(tmp_path: Path, constraint: str, reason: str | None) -> None:
    """satisfiability/platform.rs (pixi v0.77.0), PlatformUnsat::ConstraintViolated: a [constraints] entry
    binds a locked record of its name, and nothing when none is locked."""
    env, gpu = env_of(tmp_path, f'a = "*"\n[constraints]\n{constraint}\n')
    assert records_unsat(env, gpu, [record("a")]) == reason


def test_the_reasons_name_the_spec_its_source_and_each_extra_package(tmp_path: Path) -> None:
    env, gpu = env_of(tmp_path, 'a = "2.*"\n')
    assert records_unsat(env, gpu, [record("a")]) == "locked a 1 0 does not match 'a 2.*' (from the manifest)"
    env, gpu = env_of(tmp_path, 'a = "*"\n')
    assert records_unsat(env, gpu, [record("a"), record("b"), record("c")]) == \
        "locked package(s) no longer needed: b, c"
    assert records_unsat(env, gpu, [record("a", depends=("d",))]) == "'d' (from a) has no matching locked package"


def test_answers_remembered_across_solves_are_each_records_own(tmp_path: Path) -> None:
    """_check_solved (rocmlock.lock.pipeline) shares one ``matched`` memo across the solves of a lock: a spec met
    by one solve's record is asked again of another's."""
    env, gpu = env_of(tmp_path, 'a = "*"\n')
    matched: dict[tuple[str, int], bool] = {}
    first, second = [record("a", depends=("b 1.*",)), record("b", "1")], [record("a", depends=("b 1.*",)),
                                                                          record("b", "2")]  # both alive
    assert records_unsat(env, gpu, first, matched) is None
    assert records_unsat(env, gpu, second, matched) == "locked b 2 0 does not match 'b 1.*' (from a)"
