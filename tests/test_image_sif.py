"""Apptainer: ``rocmlock image --sif`` and ``rocmlock verify --image SIF``.

The real Apptainer is Debian sid's (1.4.5) in the ROCm 7.2.4 chroot (tests/rocm72/packages.txt), run as users
run it: unprivileged (uid 65534, user namespaces), the chroot entered with pivot_root (tests/rocm72chroot.py,
run_unprivileged). The image is built on the host from tests/test_image_run.py's workspace; in the chroot the
SIF is made by ``--sif``'s code and by the command the build printed, then ``apptainer run SIF env`` shows
the activation and ``apptainer exec SIF /opt/rocmlock/check`` fails only at host.devices (no GPU here),
agreeing with the same check run by podman on every check from python up. The refusals and the CLI's wiring
(a stand-in apptainer) need no Apptainer.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import rocm72chroot
from rocmlock.cli.main import main
from slurmcluster import Cluster
from test_image_run import ENV, _run, base, podman, ws  # noqa: F401 - the fixtures, shared
from test_slurm import cluster, slurm_env  # noqa: F401 - the fixtures, shared

TESTS = Path(__file__).resolve().parent

LAUNCH = b"#!/usr/bin/env run-singularity\n"
FAKE_APPTAINER = """#!/bin/sh
# a stand-in: `apptainer --quiet build OUT oci:DIR` writes a SIF-looking OUT and records its arguments
echo "$@" >>"$LOG"
[ "$2" = build ] || exit 3
[ -f "${4#oci:}/index.json" ] || { echo "FATAL:   no layout at $4" >&2; exit 255; }
[ -z "$FAIL" ] || { echo "FATAL:   While performing build: packer failed" >&2; exit 255; }
printf '#!/usr/bin/env run-singularity\\n\\0SIF_MAGIC\\0' >"$3"
"""


def _image(ws: Path, *args: str) -> int:  # noqa: F811
    return main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, *args])


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    (bindir / "apptainer").write_text(FAKE_APPTAINER)
    (bindir / "apptainer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(tmp_path / "apptainer.log"))
    monkeypatch.delenv("FAIL", raising=False)
    return tmp_path / "apptainer.log"


def test_sif_converts_the_builds_own_layout_and_prints_how_to_run_it(
        ws: Path, base: Path, tmp_path: Path, fake_apptainer: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    sif = tmp_path / "env.sif"
    assert _image(ws, "--base", f"oci:{base}:base", "--sif", str(sif), "--json") == 0
    out = capsys.readouterr()
    assert sif.read_bytes().startswith(LAUNCH) and json.loads(out.out)["sif"] == str(sif)
    (args,) = fake_apptainer.read_text().splitlines()
    assert args.startswith("--quiet build ") and ":" not in args.split()[-1][4:]  # oci:DIR, no tag
    assert f"  apptainer exec {shlex.quote(str(sif))} /opt/rocmlock/check" in out.err.splitlines()
    assert not list(tmp_path.glob(".env.sif.*")) and not list(tmp_path.glob(".rocmlock-image-*"))


def test_a_failing_apptainer_build_is_one_line_and_leaves_nothing(
        ws: Path, base: Path, tmp_path: Path, fake_apptainer: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAIL", "1")
    sif = tmp_path / "env.sif"
    assert _image(ws, "--base", f"oci:{base}:base", "--sif", str(sif), "-o", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "apptainer build failed: While performing build: packer failed" in err and "Traceback" not in err
    assert not sif.exists() and not (tmp_path / "out").exists() and not list(tmp_path.glob(".env.sif.*"))


def test_sif_without_apptainer_is_one_line_before_anything_is_built(
        ws: Path, base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "apptainer" else real(name, *a, **k))
    assert _image(ws, "--base", f"oci:{base}:base", "-o", str(tmp_path / "out"),
                  "--sif", str(tmp_path / "env.sif")) == 1
    err = capsys.readouterr().err
    assert "apptainer is not installed" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "env.sif").exists()
    assert not list(tmp_path.glob(".rocmlock-image-*"))


@pytest.mark.parametrize(("args", "message"), [
    (["--base", "oci:BASE:base", "--sif", "DIR"], "is a directory"),
    (["--base", "oci:BASE:base", "--sif", "DIR/missing/env.sif"], "does not exist"),
    (["--no-base", "--sif", "DIR/env.sif"], "--sif with --no-base"),
])
def test_bad_sif_targets_are_refused(ws: Path, base: Path, tmp_path: Path,  # noqa: F811
                                     capsys: pytest.CaptureFixture[str], fake_apptainer: Path, args: list[str],
                                     message: str) -> None:
    assert _image(ws, *[a.replace("DIR", str(tmp_path)).replace("BASE", str(base)) for a in args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not list(tmp_path.rglob("*.sif"))
    assert not fake_apptainer.exists()


@pytest.mark.parametrize(("content", "extra", "message"), [
    (None, [], "no such file"),
    (b"#!/bin/sh\n" + b"\0" * 100, [], "not a SIF file"),
    (LAUNCH + b"\0SIF_MAGIC\0" + b"\0" * 80, ["--prefix", "/opt/env"], "--image and --prefix together"),
])
def test_verify_image_refuses_what_is_not_a_sif(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                content: bytes | None, extra: list[str], message: str) -> None:
    sif = tmp_path / "env.sif"
    if content is not None:
        sif.write_bytes(content)
    assert main(["verify", "--image", str(sif), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _checks(text: str) -> dict[str, str]:
    return {c["id"]: c["status"] for c in json.loads(text)["checks"]}


@pytest.fixture(scope="module")
def sif_work(ws: Path, base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:  # noqa: F811
    """The image's layout and its SIF made by ``--sif``'s code in the chroot as a user (once for this module), in a
    work directory nobody may write, and the ``apptainer build`` hint the image build printed."""
    rocm72chroot.require_chroot()
    if not (rocm72chroot.CHROOT / "usr/bin/apptainer").exists():
        pytest.fail(f"{rocm72chroot.CHROOT} has no apptainer: tests/rocm72/packages.txt lists it; "
                    "run tests/rocm72/make-chroot.sh")
    work = tmp_path_factory.mktemp("sif") / "work"
    (work / "home").mkdir(parents=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert _image(ws, "--base", f"oci:{base}:base", "-o", str(work / "layout")) == 0
    (hint,) = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip().startswith("apptainer build")]
    rocm = work / "rocm"
    (rocm / "include/hip").mkdir(parents=True)
    (rocm / "include/hip/hip_runtime.h").write_text("")
    (rocm / ".info").mkdir()
    (rocm / ".info/version").write_text("7.2.0-43\n")
    for path in [work, *work.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)  # nobody builds and runs in it
    # --sif's conversion (rocmlock.image.sif.build_sif) of the layout, in the chroot, as a user.
    build = rocm72chroot.run_unprivileged(
        ["python3", "-c", ("from pathlib import Path; from rocmlock.image.sif import build_sif; "
                           "build_sif(Path('/mnt/work/layout'), Path('/mnt/work/env.sif'))")], work)
    assert build.returncode == 0, build.stderr[-3000:]
    assert (work / "env.sif").read_bytes()[:41] == LAUNCH + b"\0SIF_MAGIC"
    return work, hint


def test_the_sif_runs_activated_and_its_check_agrees_with_podmans(
        sif_work: tuple[Path, str], podman: dict[str, str]) -> None:  # noqa: F811
    work, hint = sif_work
    # The entrypoint, as the SIF's runscript: activated as `podman run IMAGE env` is.
    ran = rocm72chroot.run_unprivileged(["apptainer", "run", "--bind", "/mnt/work/rocm:/opt/rocm",
                                         "/mnt/work/env.sif", "env"], work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line)
    assert seen["ROCM_PATH"] == seen["HIP_PATH"] == "/opt/rocm"  # rocm-version's activate.d script ran
    assert seen["HSA_OVERRIDE_GFX_VERSION"] == "9.4.2-linux" and seen["FROM_ENV_VARS_D"] == "yes"
    assert seen["AFTER_SCRIPTS"] == "seen /opt/rocm" and seen["CONDA_PREFIX"] == "/opt/env"
    # The check as verify --image runs it (exec --rocm), and as the build printed it (same paths inside).
    check = rocm72chroot.run_unprivileged(["apptainer", "exec", "--rocm", "/mnt/work/env.sif",
                                           "/opt/rocmlock/check", "--json"], work)
    assert check.returncode == 1, check.stderr[-3000:]
    inside = _checks(check.stdout)
    assert inside["host.devices"] == "fail"
    printed = rocm72chroot.run_unprivileged(["sh", "-c", f"cd {shlex.quote(str(work))} && {hint}"], work,
                                            also_at=work)
    assert printed.returncode == 1 and "host.devices" in printed.stdout + printed.stderr, printed.stderr[-3000:]
    # podman runs the same image: everything from python up agrees. Below python they differ for a reason:
    # host.* reads each machine, and --rocm binds the host's rocminfo and rocm-smi into the container
    # (/etc/apptainer/rocmliblist.conf lists them), so tools.* finds them failing there, absent under podman.
    assert inside["tools.rocminfo"] == "fail" and inside["tools.smi"] == "fail"
    outside = _checks(_run(podman, f"oci:{work / 'layout'}:{ENV}", "/opt/rocmlock/check", "--json").stdout)
    above = sorted(n for n in outside if not n.startswith(("host.", "tools.")))
    assert "torch.import" in above and len(above) >= 10, above
    assert above and {n: inside.get(n) for n in above} == {n: outside[n] for n in above}


# A node's `apptainer` for srun's tasks: the real one (Debian sid's, in the ROCm 7.2 chroot), run as a user runs it,
# with the work directory at its own path too, so the SIF path verify passes on the host names the same file.
APPTAINER_ON_NODE = """#!{python}
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import rocm72chroot
done = rocm72chroot.run_unprivileged(["apptainer", *sys.argv[1:]], Path({work!r}), also_at=Path({work!r}))
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""


def test_verify_slurm_image_runs_the_sifs_check_through_srun_on_every_task(
        sif_work: tuple[Path, str], ws: Path, slurm_env: Cluster, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    work, _ = sif_work
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "apptainer").write_text(APPTAINER_ON_NODE.format(python=sys.executable, tests=str(TESTS),
                                                               work=str(work)))
    (bindir / "apptainer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    reports = tmp_path / "reports"
    code = main(["verify", "-e", ENV, "--manifest-path", str(ws / "pixi.toml"), "--image", str(work / "env.sif"),
                 "--slurm", "--reports", str(reports), "--json", "--", "--ntasks=2", "--overcommit"])
    out, err = capsys.readouterr()
    assert code == 1 and out, err[-3000:]
    (srun,) = [shlex.split(ln[2:]) for ln in err.splitlines() if ln.startswith("> srun ")]
    on_node = srun[srun.index("apptainer"):]
    assert on_node[:4] == ["apptainer", "exec", "--rocm", str(work / "env.sif")] and "--json" in on_node, srun
    fleet = json.loads(out)
    assert len(fleet["nodes"]) == 2, fleet
    # Each task ran the image's check: no GPU here, so host.devices fails (the example has no torch: torch.import
    # fails too, on purpose), and each task's report is what the same command gives run by hand on the node.
    by_hand = rocm72chroot.run_unprivileged(on_node, work, also_at=work)
    assert by_hand.returncode == 1, by_hand.stderr[-3000:]
    expected = _checks(by_hand.stdout)
    assert expected["host.devices"] == "fail" and len(expected) >= 10, expected
    reports_json = sorted(reports.glob("*.json"))
    assert len(reports_json) == 2, sorted(reports.iterdir())
    assert [_checks(r.read_text()) for r in reports_json] == [expected, expected]
    for node in fleet["nodes"]:
        assert node["verdict"] == "fail"
        assert sorted(node["failed"]) == sorted(k for k, v in expected.items() if v == "fail"), node
