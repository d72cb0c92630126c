"""rocmlock build: the small recipes built for real (offline), skip-existing, resume after a failure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rocmlock.build.builder import (
    BuildOptions,
    BuildReport,
    blocked_by_doctor,
    build_plan,
    rattler_build_variant,
)
from rocmlock.build.plan import make_plan
from rocmlock.cli.main import main
from rocmlock.gpu.targets import get_target
from rocmlock.workspace.manifest import load_workspace

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"
WORKSPACE = """
[workspace]
name = "build-test"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
python = "3.12.*"
rocm-version = "7.2.*"
rocm-env-check = "*"

[feature.gfx90a.dependencies]
amdgpu-target = { version = "*", build = "gfx90a" }

[feature.gfx942.dependencies]
amdgpu-target = { version = "*", build = "gfx942" }

[feature.train.dependencies]
pytorch = "2.12.*"

[environments]
mi250 = ["gfx90a"]
mi300x = ["gfx942"]
mi300x-train = ["gfx942", "train"]
"""
SMALL = ["amdgpu-target-1-gfx90a", "amdgpu-target-1-gfx942"]


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "ws" / "pixi.toml"
    path.parent.mkdir()
    path.write_text(WORKSPACE)
    return path


def _build(capsys: pytest.CaptureFixture[str], manifest: Path, output: Path, *extra: str) -> tuple[int, dict]:
    code = main(["build", "--manifest-path", str(manifest), "--recipes-dir", str(RECIPES), "--output", str(output),
                 "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def _status(report: dict) -> dict[str, str]:
    return {v["id"]: v["status"] for v in report["variants"]}


def test_builds_the_small_recipes_for_real_then_skips_them(manifest: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, report = _build(capsys, manifest, out, "-e", "mi250", "-e", "mi300x")
    assert code == 0, report
    status = _status(report)
    assert set(status.values()) == {"built"} and len(status) == 4
    names = sorted(p.name for p in (out / "noarch").glob("*.conda"))
    assert [n.rsplit("-", 2)[0] for n in names] == ["amdgpu-target", "amdgpu-target", "rocm-env-check",
                                                    "rocm-version"]
    assert (out / "noarch" / "amdgpu-target-1-gfx942.conda").is_file()
    assert (out / "noarch" / "repodata.json").is_file()  # the output is a channel for later stages
    for vid in status:
        log = (out / "logs" / f"{vid}.log").read_text()
        assert log.startswith(f"rocmlock build {vid}") and "[info]" in log
    # Unchanged plan: nothing is rebuilt.
    code, again = _build(capsys, manifest, out, "-e", "mi250", "-e", "mi300x")
    assert code == 0
    assert set(_status(again).values()) == {"skipped"}
    assert {v["reason"] for v in again["variants"]} == {"already built in the output directory"}


def test_variants_present_in_the_target_channel_are_not_built(manifest: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "first"
    assert _build(capsys, manifest, first, "-e", "mi250")[0] == 0
    code, report = _build(capsys, manifest, tmp_path / "second", "-e", "mi250", "--channel", str(first))
    assert code == 0
    assert {v["reason"] for v in report["variants"]} == {"present in the target channel"}
    assert not (tmp_path / "second" / "noarch").exists() or not list((tmp_path / "second/noarch").glob("*.conda"))


def test_stage_builds_only_that_package(manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _build(capsys, manifest, tmp_path / "out", "--stage", "rocm-version")
    assert code == 0
    assert [(v["stage"], v["status"]) for v in report["variants"]] == [("rocm-version", "built")]
    assert main(["build", "--manifest-path", str(manifest), "--recipes-dir", str(RECIPES), "--stage", "nope",
                 "--output", str(tmp_path / "out")]) == 2


def _plan(manifest: Path, envs: list[str]):  # type: ignore[no-untyped-def]
    return make_plan(load_workspace(manifest), envs, recipes_dir=RECIPES)


def test_resume_after_a_failure_injected_mid_plan(manifest: Path, tmp_path: Path) -> None:
    plan = _plan(manifest, ["mi250", "mi300x"])
    ids = [v.id for v in plan.variants]
    calls: list[str] = []

    def flaky(plan, variant, output, channels, log):  # type: ignore[no-untyped-def]
        calls.append(variant.id)
        if len(calls) == 2:
            log("simulated compiler crash")
            raise __import__("rocmlock.build.builder", fromlist=["BuildFailed"]).BuildFailed("simulated failure")
        rattler_build_variant(plan, variant, output, channels, log)

    out = tmp_path / "out"
    first: BuildReport = build_plan(plan, BuildOptions(out), builder=flaky)
    statuses = [o.status for o in first.outcomes]
    assert statuses[:2] == ["built", "failed"] and set(statuses[2:]) == {"blocked"}
    assert not first.ok
    failed_log = Path(first.outcomes[1].log or "")
    assert "simulated compiler crash" in failed_log.read_text() and "FAILED: simulated failure" in failed_log.read_text()
    # The second run (a healthy builder) builds exactly what is missing.
    calls.clear()
    second = build_plan(plan, BuildOptions(out), builder=rattler_build_variant)
    assert second.ok
    assert [o.status for o in second.outcomes] == ["skipped"] + ["built"] * (len(ids) - 1)


def test_keep_going_builds_independent_variants(manifest: Path, tmp_path: Path) -> None:
    plan = _plan(manifest, ["mi250", "mi300x"])
    victim = plan.variants[0].id

    def fails_first(plan, variant, output, channels, log):  # type: ignore[no-untyped-def]
        if variant.id == victim:
            from rocmlock.build.builder import BuildFailed
            raise BuildFailed("boom")
        rattler_build_variant(plan, variant, output, channels, log)

    report = build_plan(plan, BuildOptions(tmp_path / "out", keep_going=True), builder=fails_first)
    assert report.outcomes[0].status == "failed"
    assert [o.status for o in report.outcomes[1:]] == ["built"] * (len(plan.variants) - 1)


def test_failed_doctor_blocks_gpu_variants_but_builds_metapackages(manifest: Path, tmp_path: Path) -> None:
    # This host's real toolchain (Debian ROCm 5.2) cannot target gfx942: pytorch must never reach the builder.
    from rocmlock.build.builder import BuildFailed, toolchain_targets
    from rocmlock.host.doctor import run_doctor

    plan = _plan(manifest, ["mi300x-train"])
    out = tmp_path / "out"
    targets = toolchain_targets(plan, out)
    assert [t.gfx for t in targets] == ["gfx942"]
    report = run_doctor(targets, build=True, rocm_wanted=("7.2",), workdir=tmp_path)
    assert not report.ok
    blocked = blocked_by_doctor([(c.name, c.status, c.message) for c in report.checks], targets)
    assert "toolchain too old for gfx942" in blocked["gfx942"]
    attempted: list[str] = []

    def builder(plan, variant, output, channels, log):  # type: ignore[no-untyped-def]
        attempted.append(variant.stage)
        if variant.subdir != "noarch":
            raise BuildFailed("this test builds only noarch packages")  # e.g. triton (needs no ROCm)
        rattler_build_variant(plan, variant, output, channels, log)

    result = build_plan(plan, BuildOptions(out, keep_going=True, blocked_targets=blocked), builder=builder)
    by_stage = {o.stage: o for o in result.outcomes}
    assert by_stage["pytorch"].status == "blocked" and by_stage["pytorch"].reason.startswith("doctor:")
    assert "pytorch" not in attempted
    assert by_stage["amdgpu-target"].status == "built" and by_stage["rocm-version"].status == "built"
    assert not result.ok


def test_blocked_by_doctor_per_target_and_general() -> None:
    targets = (get_target("gfx90a"), get_target("gfx942"))
    per_target = [("offload-arch:gfx90a", "ok", "fine"), ("offload-arch:gfx942", "fail", "too old"),
                  ("ccache", "warn", "no ccache")]
    assert blocked_by_doctor(per_target, targets) == {"gfx942": "too old"}
    general = [*per_target, ("hip-path", "fail", "no header")]
    blocked = blocked_by_doctor(general, targets)
    assert blocked["gfx90a"] == "hip-path: no header"
    assert blocked["gfx942"].startswith("too old (+1 more")


# A command in a path: `cd` up from the build's work directory (<output>/bld/rattler-build_<name>_<epoch>/work) to
# the output's parent, then write a file there. No '/', so it can be one directory's name.
INJECTED = "`cd ..;cd ..;cd ..;cd ..;echo>INJECTED`"


def test_rattler_build_runs_a_command_in_the_output_path(manifest: Path, tmp_path: Path) -> None:
    """Why rocmlock refuses such paths (issue 33 item 16): py-rattler-build 0.73 writes the work directory into
    its build script in double quotes (`source "<work>/build_env.sh"`), so bash runs what the path holds. When
    this fails, rattler-build quotes its paths: check_build_paths may then let them through."""
    plan = _plan(manifest, ["mi300x"])
    variant = next(v for v in plan.variants if v.id == "amdgpu-target-1-gfx942")
    with pytest.raises(Exception, match="Script execution failed"):  # the prefixes name a directory not there
        rattler_build_variant(plan, variant, tmp_path / f"out{INJECTED}", [], lambda line: None)
    assert (tmp_path / "INJECTED").is_file()


def test_a_path_bash_would_run_is_refused_before_anything_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / f"ws{INJECTED}"
    ws.mkdir()
    (ws / "pixi.toml").write_text(WORKSPACE)
    for output in ([], ["--output", str(tmp_path / "out$(id)")], ["--output", str(tmp_path / 'out"x')]):
        code = main(["build", "--manifest-path", str(ws / "pixi.toml"), "--recipes-dir", str(RECIPES),
                     "-e", "mi300x", *output])
        err = capsys.readouterr().err.splitlines()
        assert code == 2 and len(err) == 2 and err[0].startswith("error: --output: the path "), err
        assert "rattler-build's build script would run as shell code" in err[0], err
        assert err[1] == "hint: move the workspace, recipes and --output to a path without $ ` \" or \\"
    recipes = tmp_path / "recipes$HOME"
    shutil.copytree(RECIPES / "amdgpu-target", recipes / "amdgpu-target")
    shutil.copytree(RECIPES / "rocm-version", recipes / "rocm-version")
    shutil.copy(RECIPES / "variants.yaml", recipes / "variants.yaml")
    (tmp_path / "tools").symlink_to(REPO / "tools")
    code = main(["build", "--manifest-path", str(manifest_at(tmp_path / "plain")), "--recipes-dir", str(recipes),
                 "--stage", "amdgpu-target", "-e", "mi300x", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[0].startswith("error: recipe ") and "recipes$HOME/amdgpu-target holds '$'" in err[0]
    assert not list(tmp_path.rglob("INJECTED")) and not (tmp_path / "out").exists()


def manifest_at(root: Path) -> Path:
    root.mkdir()
    (root / "pixi.toml").write_text(WORKSPACE)
    return root / "pixi.toml"


def test_an_output_or_cache_path_that_is_a_file_is_bad_input(manifest: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # It was exit 1, "File exists", from the first mkdir under it.
    afile = tmp_path / "afile"
    afile.write_text("x")
    for argv in (["build", "--output", str(afile)], ["sources", "fetch", "--to", str(afile)]):
        assert main([*argv, "--manifest-path", str(manifest), "--recipes-dir", str(RECIPES), "-e", "mi250"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {argv[-2]} {afile}: a file, not a directory"), err
    assert afile.read_text() == "x"
