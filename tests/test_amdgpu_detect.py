"""Issue 40, item 2: rocmlock reads a node's AMD GPU as rattler does, and says so.

py-rattler 0.28 detects ``__amdgpu`` (``0=0``) and ``__amdgpu_arch`` (the ISA, ``9.4.2``) itself
(conda/rattler#2806, crates/rattler_virtual_packages/src/amdgpu.rs), with ``CONDA_OVERRIDE_AMDGPU`` (``0`` on,
empty off) and ``CONDA_OVERRIDE_AMDGPU_ARCH`` (the ISA; empty for none; ``__amdgpu_arch`` only with
``__amdgpu``). Every path that reads the host's GPU (unpack's gate, doctor's gpus check, the standalone probe)
is driven here with those overrides, and its answer compared with ``rattler.VirtualPackage.detect``'s.

Two GPUs cannot be written as an override: rattler stands for a node by one ``__amdgpu_arch``, the GPU with the
most compute units, ties to the highest ISA (``select_device``). Those cases run rattler's real detection on a
KFD tree bind-mounted over ``/sys/class`` in a private mount namespace (``unshare --mount --map-root-user``),
and compare it with what rocmlock and the probe read from the same tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rattler import VirtualPackage, VirtualPackageOverrides
from rocmlock.bundle import unpack
from rocmlock.bundle.layout import BundleMetadata
from rocmlock.cli.main import main
from rocmlock.errors import InputError, OperationError
from rocmlock.gpu.targets import get_target
from rocmlock.host.doctor import run_doctor
from rocmlock.host.node import node_gpus, read_node
from rocmlock.host.rocm import Host
from test_heterogeneous_nodes import MI210, MI300X, STRIX_HALO, W7900, kfd_tree
from test_probe import load_probe

probe = load_probe()
TARGETS = ("gfx90a", "gfx942", "gfx1100")
# What each override case sets: (CONDA_OVERRIDE_AMDGPU, CONDA_OVERRIDE_AMDGPU_ARCH); None leaves it unset.
CASES = {"none": ("", None), "gfx90a": ("0", "9.0.10"), "gfx942": ("0", "9.4.2"), "gfx1100": ("0", "11.0.0"),
         "present, no arch": ("0", "")}


def rattler_says() -> tuple[bool, str | None]:
    """(__amdgpu, __amdgpu_arch) as rattler detects them in this process's environment."""
    found = {vp.into_generic().name.normalized: str(vp.into_generic().version)
             for vp in VirtualPackage.detect(VirtualPackageOverrides.from_env())}
    return "__amdgpu" in found, found.get("__amdgpu_arch")


def _override(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    for name, value in zip(("CONDA_OVERRIDE_AMDGPU", "CONDA_OVERRIDE_AMDGPU_ARCH"), CASES[case]):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


def _meta(gfx: str) -> BundleMetadata:
    return BundleMetadata("e", "linux-64", "linux-64", gfx, None, "7.2", "0" * 64, "0", None, ())


def _doctor(root: Path, gfx: str) -> tuple[str, str] | None:
    host = Host(env={"PATH": ""}, which=lambda _n, _p: None, kfd=root / "dev/kfd", sysroot=root)
    check = next((c for c in run_doctor([get_target(gfx)], build=False, host=host).checks if c.name == "gpus"), None)
    return None if check is None else (check.status, check.message)


def _probe(root: Path, gfx: str) -> object:
    (root / "sys/module/amdgpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/amdgpu/initstate").write_text("live\n")
    ctx = probe.Context(root=root, prefix=root / "env", environ=dict(os.environ), expect_arch=gfx,
                        expect_arch_source="--expect-arch")
    return probe.check_driver(ctx)


@pytest.mark.parametrize("case", list(CASES))
def test_every_path_agrees_with_rattler_under_its_overrides(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's KFD holds an MI300X; the override says what rattler (and pixi) see, and every path says the same."""
    _override(monkeypatch, case)
    present, isa = rattler_says()
    assert (present, isa) == {"none": (False, None), "present, no arch": (True, None)}.get(
        case, (True, CASES[case][1]))  # rattler's own answer, as documented
    root = kfd_tree(tmp_path, MI300X)
    node = read_node(root, {})
    assert (node.amdgpu.present, node.amdgpu.isa) == (present, isa)
    assert node_gpus(root)[1] == node.amdgpu
    ctx = probe.Context(root=root, prefix=root, environ=dict(os.environ))
    probe_present, probe_isa, _ = probe.amdgpu_seen(ctx, probe.kfd_gpus(ctx))
    assert (probe_present, ".".join(map(str, probe_isa)) if probe_isa else None) == (present, isa)
    for gfx in TARGETS:
        runs = isa == get_target(gfx).isa
        # unpack's gate
        if runs:
            line = unpack._check_node(_meta(gfx), root, {}, force=False)
            assert f"a {gfx} GPU" in line and f"__amdgpu_arch {isa} ({gfx}) from rattler with" in line
        else:
            with pytest.raises(OperationError) as err:
                unpack._check_node(_meta(gfx), root, {}, force=False)
            assert f"built for {gfx}" in str(err.value) and "rattler with CONDA_OVERRIDE_AMDGPU=" in str(err.value)
        # doctor's gpus check
        doctor = _doctor(root, gfx)
        if isa is None:
            assert doctor is None if not present else (doctor is not None and doctor[0] == "warn")
        else:
            assert doctor is not None and doctor[0] == ("ok" if runs else "fail")
            assert f"__amdgpu_arch {isa} (" in doctor[1]
        # the probe (tools/verify_env.py, standalone)
        out = _probe(root, gfx)
        assert out.status == ("ok" if runs else "warn" if isa is None else "fail"), out.evidence
        if isa is not None:
            assert f"__amdgpu_arch {isa} from rattler with" in out.evidence


@pytest.mark.parametrize(("case", "warned"), [("none", False), ("gfx942", False), ("gfx90a", True)])
def test_install_says_when_this_machine_is_not_the_platforms_gpu(
        case: str, warned: bool, locked_ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`mi300x` is locked for linux-64-gfx942 (__amdgpu_arch 9.4.2); install asks rattler what this machine is."""
    _override(monkeypatch, case)
    capsys.readouterr()
    assert main(["install", "--manifest-path", str(locked_ws), "-e", "mi300x", "--prefix", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    line = ("warning: this machine is __amdgpu_arch 9.0.10 (gfx90a) from rattler with CONDA_OVERRIDE_AMDGPU='0' "
            "CONDA_OVERRIDE_AMDGPU_ARCH='9.0.10', but platform 'linux-64-gfx942' is for gfx942 (__amdgpu_arch 9.4.2)")
    assert (line in err) is warned, err
    assert ("warning: this machine" in err) is warned


def test_a_bad_override_is_one_line_as_rattler_refuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU", "0")
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU_ARCH", "gfx942")  # the gfx name, not the ISA
    with pytest.raises(Exception, match="invalid AMDGPU ISA version 'gfx942'"):
        rattler_says()
    root = kfd_tree(tmp_path, MI300X)
    with pytest.raises(InputError) as err:
        read_node(root, {})
    assert "gfx942" in str(err.value) and "CONDA_OVERRIDE_AMDGPU_ARCH" in (err.value.hint or "")
    out = _probe(root, "gfx942")
    assert out.status == "fail" and "CONDA_OVERRIDE_AMDGPU_ARCH='gfx942'" in out.evidence
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU", "1")
    monkeypatch.delenv("CONDA_OVERRIDE_AMDGPU_ARCH")
    with pytest.raises(Exception, match="invalid __amdgpu override '1'"):
        rattler_says()
    assert _probe(root, "gfx942").status == "fail"


@pytest.mark.parametrize("arch", ["4294967296.0.0", "9.4294967296.2", "9.4.4294967296", "18446744073709551615.0.0"])
@pytest.mark.parametrize("present", ["0", "", None])
def test_an_isa_part_past_32_bits_is_refused_by_every_path_as_by_rattler(
        arch: str, present: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rattler reads each part as a u32 (4294967295.0.0 is read); the probe's pattern took any digits, so it
    reported "gfx429496729600" where rattler, unpack and doctor refuse the override."""
    if present is None:
        monkeypatch.delenv("CONDA_OVERRIDE_AMDGPU", raising=False)
    else:
        monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU", present)
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU_ARCH", arch)
    with pytest.raises(Exception, match="invalid AMDGPU ISA version"):
        rattler_says()
    root = kfd_tree(tmp_path, MI300X)
    with pytest.raises(InputError):
        read_node(root, {})
    out = _probe(root, "gfx942")
    assert out.status == "fail" and f"CONDA_OVERRIDE_AMDGPU_ARCH={arch!r}: not an AMDGPU ISA version" in out.evidence
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU_ARCH", "4294967295.0.0")  # the largest: rattler and the probe read it
    monkeypatch.setenv("CONDA_OVERRIDE_AMDGPU", "0")
    assert rattler_says() == (True, "4294967295.0.0")
    ctx = probe.Context(root=root, prefix=root, environ=dict(os.environ))
    assert probe.amdgpu_seen(ctx, probe.kfd_gpus(ctx))[1] == (4294967295, 0, 0)


# ----------------------------------------------------------------------------- rattler's own detection of KFD trees

_DETECT = ("import json; from rattler import VirtualPackage as V, VirtualPackageOverrides as O; "
           "g = [v.into_generic() for v in V.detect(O.from_env())]; "
           "print(json.dumps({x.name.normalized: str(x.version) for x in g if x.name.normalized.startswith('__amd')}))")


def rattler_detects(root: Path) -> dict[str, str]:
    """rattler's detection with ``root``'s ``sys/class`` in place of the host's (no override set)."""
    script = f'mount --bind "{root / "sys/class"}" /sys/class || exit 97; exec "{sys.executable}" -c "{_DETECT}"'
    proc = subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-c", script], check=False,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    if proc.returncode == 97 or proc.stderr.startswith("unshare:"):
        pytest.skip(f"no private mount namespace here ({proc.stderr.strip()[:120]})")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
@pytest.mark.parametrize(("gpus", "isa"), [
    ((), None),                          # no GPU
    ((MI210,), "9.0.10"),                # gfx90a
    ((MI300X,), "9.4.2"),                # gfx942
    ((W7900,), "11.0.0"),                # gfx1100
    ((MI210, MI300X), "9.4.2"),          # two GPUs: the most compute units (304 > 104)
    ((STRIX_HALO, W7900), "11.0.0"),     # the discrete W7900 (96 CUs) over the newer iGPU (40 CUs)
    (((110000, 80, 2), STRIX_HALO), "11.5.1"),  # equal compute units: the highest ISA
])
def test_rocmlock_and_the_probe_read_a_kfd_tree_as_rattler_detects_it(
        gpus: tuple[tuple[int, int, int], ...], isa: str | None, tmp_path: Path) -> None:
    root = kfd_tree(tmp_path, *gpus)
    (root / "sys/class/drm").mkdir(parents=True, exist_ok=True)  # no DRM card: rattler's presence fallback finds none
    detected = rattler_detects(root)
    assert detected.get("__amdgpu_arch") == isa and ("__amdgpu" in detected) == bool(gpus)
    seen = node_gpus(root)[1]
    assert (seen.present, seen.isa) == (bool(gpus), isa)
    ctx = probe.Context(root=root, prefix=root, environ={})
    present, probe_isa, _ = probe.amdgpu_seen(ctx, probe.kfd_gpus(ctx))
    assert (present, ".".join(map(str, probe_isa)) if probe_isa else None) == (bool(gpus), isa)
