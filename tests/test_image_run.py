"""``rocmlock image`` run as users run it: podman (runc, as CI has it) on the Debian base, the environment activated
by the entrypoint as ``pixi shell-hook`` would (the rocm-version activate.d script, an env_vars.d file, the
workspace's [activation.env] and [activation.scripts]), and every command the build prints executed."""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocmlock.cli.main import main

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
ENV = "mi300x"


@pytest.fixture(scope="module")
def base() -> Path:
    from ocibase import debian_base_for_tests

    return debian_base_for_tests()


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment podman runs in here: its own storage under a temporary directory (nothing left in the
    machine's), runc, and default ulimits this process may set (a sandbox without CAP_SYS_RESOURCE cannot raise
    podman's default nofile of 1048576: "error setting rlimit type 7: operation not permitted")."""
    from ciskips import in_ci

    missing = [t for t in ("podman", "runc", "skopeo") if shutil.which(t, path="/usr/bin:/usr/sbin:/bin:/sbin") is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (apt-get install podman runc skopeo; .ci/run does)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("podman")
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    (root / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\n')
    (root / "storage.conf").write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/storage"\n'
                                       f'runroot = "{root}/run"\n')
    env = {"CONTAINERS_CONF": str(root / "containers.conf"), "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin", "HOME": str(root),
           "TMPDIR": str(root)}
    yield env
    subprocess.run(["podman", "system", "reset", "--force"], env=env, capture_output=True, check=False)


def _channel(root: Path) -> Path:
    """rocm-version with its real activate.sh (recipes/rocm-version), a package with an env_vars.d file, python-less."""
    from channels import Pkg, build_channel

    activate = (RECIPES / "rocm-version/activate.sh").read_text().replace("@ROCM_VERSION@", "7.2")
    return build_channel(root, [
        Pkg("rocm-version", "7.2.0", files=(("etc/conda/activate.d/rocm-version_activate.sh", activate),)),
        Pkg("envvars", "1.0", files=(("etc/conda/env_vars.d/envvars.json", '{"FROM_ENV_VARS_D": "yes"}'),)),
    ])


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    channel = _channel(root / "channel")
    (root / "ws").mkdir()
    (root / "ws/activation.sh").write_text('export FROM_WORKSPACE_SCRIPT="seen ${ROCM_PATH-unset}"\n')
    (root / "ws/pixi.toml").write_text(
        f'[workspace]\nname = "t"\nchannels = ["{channel.as_uri()}"]\n'
        'platforms = [{ name = "linux-64-g", platform = "linux-64", glibc = "2.28" }]\n'
        '[dependencies]\nrocm-version = "*"\nenvvars = "*"\n'
        '[activation.env]\nFROM_DEFAULT = "default"\nOVERRIDDEN = "by-default-feature"\n'
        '[feature.gpu.activation]\nscripts = ["activation.sh"]\n'
        '[feature.gpu.activation.env]\nHSA_OVERRIDE_GFX_VERSION = "9.4.2"\nOVERRIDDEN = "by-gpu-feature"\n'
        'AFTER_SCRIPTS = "$FROM_WORKSPACE_SCRIPT"\n'
        '[feature.gpu.target.linux-64.activation.env]\nHSA_OVERRIDE_GFX_VERSION = "9.4.2-linux"\n'
        '[feature.gpu.target.win-64.activation.env]\nWINDOWS_ONLY = "1"\n'
        f'[environments]\n{ENV} = ["gpu"]\n')
    assert main(["lock", "--manifest-path", str(root / "ws/pixi.toml")]) == 0
    return root / "ws"


@pytest.fixture(scope="module")
def built(ws: Path, base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("image") / "layout"
    assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                 "-o", str(out)]) == 0
    return out


def _config(layout: Path) -> dict:  # type: ignore[type-arg]
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    return json.loads((layout / "blobs/sha256" / manifest["config"]["digest"][7:]).read_bytes())  # type: ignore[no-any-return]


def _run(podman: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "run", "--rm", "--quiet", *args], env=podman, capture_output=True, text=True, check=False,
                          timeout=300)


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_podman_run_env_shows_the_activate_d_scripts_and_the_workspaces_activation(
        built: Path, podman: dict[str, str], tmp_path: Path) -> None:
    # A ROCm mounted into the container where AMD's packages put it: rocm-version's activation finds it at run time.
    rocm = tmp_path / "rocm"
    (rocm / "include/hip").mkdir(parents=True)
    (rocm / "include/hip/hip_runtime.h").write_text("")
    (rocm / ".info").mkdir()
    (rocm / ".info/version").write_text("7.2.0-43\n")
    proc = _run(podman, "-v", f"{rocm}:/opt/rocm:ro", f"oci:{built}:{ENV}", "env")
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = _env(proc.stdout)
    assert env["ROCM_PATH"] == env["HIP_PATH"] == "/opt/rocm"  # the activate.d script ran in the container
    assert env["FROM_ENV_VARS_D"] == "yes"
    # [activation.env]: the most specific target first, the first feature first, after the scripts.
    assert env["HSA_OVERRIDE_GFX_VERSION"] == "9.4.2-linux" and env["OVERRIDDEN"] == "by-gpu-feature"
    assert env["FROM_DEFAULT"] == "default" and "WINDOWS_ONLY" not in env
    assert env["FROM_WORKSPACE_SCRIPT"] == "seen /opt/rocm" and env["AFTER_SCRIPTS"] == "seen /opt/rocm"
    assert env["CONDA_PREFIX"] == "/opt/env" and env["PATH"].split(":").count("/opt/env/bin") == 1
    assert env["CONDA_DEFAULT_ENV"] == f"t:{ENV}" and env["PIXI_ENVIRONMENT_NAME"] == ENV
    # Without a ROCm in the container the script exports nothing (never a path without ROCm), and says why.
    bare = _run(podman, f"oci:{built}:{ENV}", "env")
    assert bare.returncode == 0 and "ROCM_PATH" not in _env(bare.stdout)
    assert "rocm-version: no ROCm found" in bare.stderr
    assert _env(bare.stdout)["FROM_WORKSPACE_SCRIPT"] == "seen unset"


def test_the_image_records_its_activation_and_defaults_to_a_shell(built: Path) -> None:
    import hashlib
    import tarfile

    config = _config(built)
    inner = config["config"]
    assert inner["Entrypoint"] == ["/opt/rocmlock/entrypoint"] and inner["Cmd"] == ["/bin/bash"]
    index = json.loads((built / "index.json").read_text())
    manifest = json.loads((built / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    with tarfile.open(built / "blobs/sha256" / manifest["layers"][-1]["digest"][7:]) as tar:
        script = tar.extractfile("opt/rocmlock/activate.sh").read()  # type: ignore[union-attr]
        names = tar.getnames()
    assert inner["Labels"]["io.rocmlock.activation.sha256"] == hashlib.sha256(script).hexdigest()
    assert "opt/rocmlock/activation/00-activation.sh" in names
    assert b"WINDOWS_ONLY" not in script


def test_the_docs_read_the_sbom_out_of_the_image_by_its_label(built: Path, podman: dict[str, str]) -> None:
    """docs/containers.md "The SBOM": skopeo inspect names it, podman run --entrypoint cat reads it out, and its
    sha256 is the label's."""
    import hashlib

    inspect = subprocess.run(["skopeo", "inspect", f"oci:{built}:{ENV}"], env=podman, capture_output=True,
                             text=True, check=True)
    labels = json.loads(inspect.stdout)["Labels"]
    assert labels["io.rocmlock.sbom"] == "/opt/rocmlock/sbom.cdx.json"
    proc = subprocess.run(["podman", "run", "--rm", "--quiet", "--entrypoint", "cat", f"oci:{built}:{ENV}",
                           labels["io.rocmlock.sbom"]], env=podman, capture_output=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert hashlib.sha256(proc.stdout).hexdigest() == labels["io.rocmlock.sbom.sha256"]
    sbom = json.loads(proc.stdout)
    assert sbom["bomFormat"] == "CycloneDX" and {c["name"] for c in sbom["components"]} == {"rocm-version", "envvars"}


def test_a_changed_activation_env_changes_the_digest(ws: Path, base: Path, built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ws"
    shutil.copytree(ws, copy)
    (copy / "pixi.toml").write_text((copy / "pixi.toml").read_text().replace('"9.4.2-linux"', '"11.0.0"'))
    out = tmp_path / "out"
    assert main(["image", "--manifest-path", str(copy / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                 "-o", str(out)]) == 0
    assert (out / "index.json").read_bytes() != (built / "index.json").read_bytes()


@pytest.mark.parametrize("change, message", [
    (('scripts = ["activation.sh"]', 'scripts = ["missing.sh"]'), "[activation.scripts] 'missing.sh': no such file"),
    (('scripts = ["activation.sh"]', 'scripts = ["setup.bat"]'), "not a shell script"),
    (('HSA_OVERRIDE_GFX_VERSION = "9.4.2"', '"BAD NAME" = "x"'), "'BAD NAME' is not an environment variable name"),
    # Unbalanced, it left activate.sh unparsable (no command started in the container); balanced, pixi's bash runs it.
    (('HSA_OVERRIDE_GFX_VERSION = "9.4.2"', "V = 'a$(b'"), "the value of V runs a command ($(...))"),
    (('[feature.gpu.activation]', '[feature.gpu.activation]\nscript = "x.sh"'), "is not an activation key"),
])
def test_an_activation_the_image_cannot_honour_is_refused_in_one_line(
        ws: Path, base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: tuple[str, str], message: str) -> None:
    copy = tmp_path / "ws"
    shutil.copytree(ws, copy)
    (copy / "pixi.toml").write_text((copy / "pixi.toml").read_text().replace(*change))
    assert main(["image", "--manifest-path", str(copy / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".rocmlock-image-*"))


def test_every_printed_podman_hint_runs(ws: Path, base: Path, podman: dict[str, str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    for out in (tmp_path / "plain" / "layout", tmp_path / "Not.A.Podman.Name" / "layout"):
        assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                     "-o", str(out)]) == 0
        lines = capsys.readouterr().err.splitlines()
        (podman_line,) = [line.strip() for line in lines if "podman run" in line]
        assert "--device" not in podman_line  # no /dev/kfd here
        proc = subprocess.run(podman_line, shell=True, env=podman, capture_output=True, text=True, check=False,
                              timeout=300)
        # The check ran in the container and failed for want of a GPU, saying so.
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "host.devices" in proc.stdout + proc.stderr
        assert shlex.split(podman_line)[-1] == "/opt/rocmlock/check"


def test_a_pushed_images_printed_podman_hint_runs_and_a_colon_in_the_scratch_path_is_no_obstacle(
        ws: Path, base: Path, podman: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loopback registry speaks plain HTTP: the push went without TLS verification, so podman's hint says
    --tls-verify=false (without it: "http: server gave HTTP response to HTTPS client"). The push's scratch
    layout is in TMPDIR, here a path with ':', which containers/image cannot name as oci:PATH:TAG."""
    from test_image import registry

    scratch = tmp_path / "t:mp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    with registry(tmp_path / "registry") as host:
        ref = f"{host}/rocmlock/{ENV}:v1"
        assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                     "--push", ref]) == 0, capsys.readouterr().err
        lines = capsys.readouterr().err.splitlines()
        (podman_line,) = [line.strip() for line in lines if "podman run" in line]
        assert podman_line.startswith("podman run --rm --tls-verify=false ")
        (apptainer_line,) = [line.strip() for line in lines if "apptainer build" in line]
        assert apptainer_line.startswith("apptainer build --nohttps ")
        proc = subprocess.run(podman_line, shell=True, env=podman, capture_output=True, text=True, check=False,
                              timeout=300)
        assert proc.returncode == 1 and "host.devices" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert not list(scratch.iterdir())


def test_a_base_less_image_is_a_layer_and_its_printed_recipe_builds_an_image_that_runs(
        ws: Path, base: Path, podman: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "layer"
    assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--no-base", "-o", str(out)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any("it cannot run on its own" in line for line in lines)
    (skopeo,) = [line.strip() for line in lines if line.strip().startswith("skopeo copy")]
    subprocess.run(skopeo, shell=True, env=podman, check=True, capture_output=True, timeout=300)
    containerfile = [line.strip() for line in lines if line.startswith("    ")]
    assert containerfile[0] == "FROM docker.io/library/debian:12"
    # The Debian base of the tests stands in for debian:12 (no registry here).
    subprocess.run(["skopeo", "copy", f"oci:{base}:base", "containers-storage:localhost/debian-base:12"],
                   env=podman, check=True, capture_output=True, timeout=300)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx/Containerfile").write_text("\n".join(["FROM localhost/debian-base:12", *containerfile[1:]]) + "\n")
    subprocess.run(["podman", "build", "-q", "-t", "localhost/from-layer:1", str(tmp_path / "ctx")], env=podman,
                   check=True, capture_output=True, timeout=300)
    proc = _run(podman, "localhost/from-layer:1")  # CMD: the check, activated by the entrypoint
    assert proc.returncode == 1 and "host.devices" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    env = _env(_run(podman, "localhost/from-layer:1", "env").stdout)
    assert env["HSA_OVERRIDE_GFX_VERSION"] == "9.4.2-linux" and env["CONDA_PREFIX"] == "/opt/env"


def test_prefix_puts_the_environment_where_pixi_users_look_for_it(
        ws: Path, base: Path, podman: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "pixi-layout"
    assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--base", f"oci:{base}:base",
                 "--prefix", f"/app/.pixi/envs/{ENV}/", "-o", str(out)]) == 0
    config = _config(out)
    assert config["config"]["Labels"]["io.rocmlock.prefix"] == f"/app/.pixi/envs/{ENV}"
    proc = _run(podman, f"oci:{out}:{ENV}", "sh", "-c", 'env; ls "$CONDA_PREFIX/conda-meta"')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"CONDA_PREFIX=/app/.pixi/envs/{ENV}" in proc.stdout and "rocm-version-7.2.0-0.json" in proc.stdout
    assert "FROM_ENV_VARS_D=yes" in proc.stdout  # the activation follows the prefix


def test_the_debootstrap_base_builds_twice_to_one_digest_and_its_image_runs(
        ws: Path, podman: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--base debootstrap:SUITE[:PKG]`` twice from Debian's mirror, each into a cache of its own: one base, one
    image digest; the printed podman line runs the check in it (python3 from the base: the environment has none)."""
    from ciskips import in_ci

    if os.geteuid() != 0 or shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        reason = "debootstrap as root is needed (.ci/run installs debootstrap and runs as root)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    import ocibase

    # The first cache is the one .ci/run's tests/ocibase.py filled (made by this same code, in another run, from
    # the mirror): one debootstrap here instead of two keeps CI's time (each is minutes) for the comparison.
    caches = {"one": ocibase.CACHE, "two": tmp_path / "cache-two"}
    ocibase.debian_base()
    digests, lines = [], []
    for name in ("one", "two"):
        monkeypatch.setenv("ROCMLOCK_CACHE_DIR", str(caches[name]))
        assert main(["image", "--manifest-path", str(ws / "pixi.toml"), "-e", ENV, "--json",
                     "--base", "debootstrap:bookworm:python3", "-o", str(tmp_path / name / "layout")]) == 0
        captured = capsys.readouterr()
        digests.append(json.loads(captured.out)["digest"])
        lines = captured.err.splitlines()
    assert digests[0] == digests[1]
    # cache two holds the one base made here; cache one the same name (it may hold older ones: other formats)
    (made,) = sorted((tmp_path / "cache-two/bases").glob("debootstrap-bookworm-*/layout"))
    assert (caches["one"] / "bases" / made.parent.name / "complete").is_file()
    assert (caches["one"] / "bases" / made.parent.name / "layout/index.json").read_bytes() == \
        (made / "index.json").read_bytes()
    (podman_line,) = [line.strip() for line in lines if "podman run" in line]
    proc = subprocess.run(podman_line, shell=True, env=podman, capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == 1 and "host.devices" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    env = _env(_run(podman, f"oci:{tmp_path / 'two' / 'layout'}:{ENV}", "env").stdout)
    assert env["HSA_OVERRIDE_GFX_VERSION"] == "9.4.2-linux" and env["CONDA_PREFIX"] == "/opt/env"
