"""rocmlock audit, and the device-code checks of build, publish and unpack, on real code objects.

The device code is PyPI's bitsandbytes 0.50.1 ROCm 7.2 library (13 targets) and single code objects taken out of
it (real AMDGPU ELF files); packages are made with py-rattler-build, bundles with `rocmlock pack` over a locked
workspace whose gfx942 pytorch holds a gfx90a code object, nodes are fake sysfs trees. Libraries compiled by
ROCm 7.2.4's hipcc: tests/test_rocm72_devicecode.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from devicecode_helpers import BNB_LIB, BNB_TARGETS, bnb_library, code_objects, make_package
from rattler.index import index_fs
from rocmlock.build.builder import BuildOptions, build_plan, rattler_build_variant
from rocmlock.cli.main import main

SITE = "lib/python3.12/site-packages"
PYTORCH_942 = "pytorch-2.12.1-rocm72_gfx942_py312_h1a2b3c4_0.conda"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Single real code objects (.hsaco files) for gfx90a and gfx942."""
    root = tmp_path_factory.mktemp("kernels")
    objects = code_objects()
    out = {}
    for gfx in ("gfx90a", "gfx942"):
        out[gfx] = root / f"kernel-{gfx}.hsaco"
        out[gfx].write_bytes(objects[gfx])
    return out


def _prefix(root: Path, gfx: str | None, files: dict[str, Path]) -> Path:
    (root / "conda-meta").mkdir(parents=True)
    if gfx:
        (root / f"conda-meta/amdgpu-target-1-{gfx}.json").write_text("{}")
    (root / "conda-meta/python-3.12.7-h0_0_cpython.json").write_text("{}")
    for rel, source in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / rel)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin/python3.12").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 200)  # a host ELF without HIP code
    (root / "bin/python").symlink_to("python3.12")
    return root


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- a prefix


def test_audit_of_a_prefix_lists_device_code_and_passes_on_its_target(tmp_path: Path, kernels: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _prefix(tmp_path / "env", "gfx942", {f"{SITE}/bitsandbytes/{BNB_LIB}": bnb_library(),
                                                  "share/kernels/k.hsaco": kernels["gfx942"]})
    code, out, err = _audit(capsys, "--prefix", str(prefix))
    assert code == 0, err
    assert "checked against gfx942 (the prefix's amdgpu-target package)" in out
    assert re.search(f"ok +{SITE}/bitsandbytes/{BNB_LIB} +gfx90a, gfx942, gfx950, gfx1100, gfx1101, gfx1102, "
                     r"gfx1103, gfx1150, gfx1151, gfx1152, gfx1153, gfx1200, gfx1201 \(2 bundle\(s\)\)", out)
    assert "share/kernels/k.hsaco" in out and "gfx942 (code object)" in out
    assert "bin/python" not in out  # no device code: not listed
    assert "2 file(s) with device code, all can run on gfx942" in out
    # Byte-identical for the same prefix.
    assert _audit(capsys, "--prefix", str(prefix))[1] == out


def test_a_library_without_code_for_the_gpu_is_named_and_exit_1(tmp_path: Path, kernels: dict[str, Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _prefix(tmp_path / "env", "gfx942", {f"{SITE}/bitsandbytes/{BNB_LIB}": bnb_library(),
                                                  "lib/libmine.hsaco": kernels["gfx90a"]})
    code, out, _ = _audit(capsys, "--prefix", str(prefix))
    assert code == 1
    assert re.search(r"FAIL +lib/libmine.hsaco +gfx90a \(code object\)", out)
    assert out.rstrip().endswith("1 of 2 file(s) with device code cannot run on gfx942: lib/libmine.hsaco")
    # --target overrides the prefix's own: bitsandbytes 0.50.1's ROCm 7.2 build has no gfx908 (MI100) code.
    code, out, _ = _audit(capsys, "--prefix", str(prefix), "--target", "gfx908", "--json")
    report = json.loads(out)
    assert code == 1 and report["target"] == "gfx908" and report["target_from"] == "--target"
    assert report["cannot_run"] == ["lib/libmine.hsaco", f"{SITE}/bitsandbytes/{BNB_LIB}"]
    assert set(report["files"][1]["targets"]) == BNB_TARGETS


def test_xnack_matters_where_the_gpus_mode_is_given(tmp_path: Path, kernels: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _prefix(tmp_path / "env", None, {"lib/k.hsaco": kernels["gfx942"]})
    # hipcc's default code object is for xnack "any": it runs in either mode.
    assert _audit(capsys, "--prefix", str(prefix), "--target", "gfx942:xnack+")[0] == 0
    assert _audit(capsys, "--prefix", str(prefix), "--target", "gfx942:sramecc-:xnack-")[0] == 0


def test_an_unreadable_file_fails_the_audit_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.so"
    cut.write_bytes(bnb_library().read_bytes()[:-8192])
    prefix = _prefix(tmp_path / "env", "gfx942", {"lib/libcut.so": cut})
    code, out, err = _audit(capsys, "--prefix", str(prefix))
    assert code == 1 and "Traceback" not in out + err
    assert re.search("FAIL +lib/libcut.so +unreadable: truncated or damaged ELF file", out)


@pytest.mark.parametrize(("argv", "message"), [
    (["--prefix", "{env}"], "no amdgpu-target package in conda-meta/"),
    (["--prefix", "{env}", "--target", "gfx9-4-generic"], "'gfx9-4-generic' is a compilation target, not a GPU"),
    (["--prefix", "{env}", "--target", "mi300x"], "'mi300x' is not an AMDGPU target ID"),
    (["--prefix", "{tmp}/nowhere"], "no such directory"),
    (["{tmp}/b.tar", "--prefix", "{env}"], "takes a BUNDLE or --prefix DIR"),
    (["{tmp}/nothing.tar"], "no such file"),
])
def test_bad_input_is_exit_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                         message: str) -> None:
    env = _prefix(tmp_path / "env", None, {})
    code, _, err = _audit(capsys, *(a.format(env=env, tmp=tmp_path) for a in argv))
    assert code == 2 and message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1


# ----------------------------------------------------------------------------- packages: audit, publish, build


def test_a_package_is_audited_against_its_build_string_without_installing(
        tmp_path: Path, kernels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    good = make_package(tmp_path / "out", "mylib", "rocm72_gfx942_py312_h0_0", {"lib/k.hsaco": kernels["gfx942"]})
    wrong = make_package(tmp_path / "out", "other", "rocm72_gfx942_py312_h0_0", {"lib/k.hsaco": kernels["gfx90a"]},
                         bz2=True)
    assert wrong.name.endswith(".tar.bz2")
    code, out, _ = _audit(capsys, str(good))
    assert code == 0 and "checked against gfx942 (the build string)" in out and re.search("ok +lib/k.hsaco", out)
    code, out, _ = _audit(capsys, str(wrong))
    assert code == 1 and re.search(r"FAIL +lib/k.hsaco +gfx90a \(code object\)", out)


def _channel_with(tmp_path: Path, files: dict[str, Path | bytes]) -> Path:
    out = tmp_path / "built"
    make_package(out / "linux-64", "bitsandbytes", "rocm72_gfx942_py312_h0_0", files)
    make_package(out / "noarch", "amdgpu-target", "gfx942", {}, subdir="noarch")
    asyncio.run(index_fs(str(out)))
    return out


def test_publish_refuses_a_fat_package_and_publishes_a_right_one(tmp_path: Path, kernels: dict[str, Path],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fat = _channel_with(tmp_path / "fat", {f"{SITE}/bitsandbytes/{BNB_LIB}": bnb_library()})
    dest = tmp_path / "channel"
    assert main(["publish", "--from", str(fat), "--to", str(dest)]) == 1
    err = capsys.readouterr().err
    assert ("error: linux-64/bitsandbytes-1.0-rocm72_gfx942_py312_h0_0.conda: its device code contradicts its build "
            f"string (gfx942): {SITE}/bitsandbytes/{BNB_LIB}: also holds code for gfx90a, gfx950, gfx1100") in err
    assert "nothing was published" in err and not list(dest.rglob("*.conda"))
    right = _channel_with(tmp_path / "right", {"lib/k.hsaco": kernels["gfx942"]})
    assert main(["publish", "--from", str(right), "--to", str(dest)]) == 0
    err = capsys.readouterr().err
    assert "device code of linux-64/bitsandbytes-1.0-rocm72_gfx942_py312_h0_0.conda: 1 file(s), all for gfx942" in err
    assert "device code of noarch/amdgpu-target-1.0-gfx942.conda: none (nothing for gfx942 to contradict)" in err
    assert len(list(dest.rglob("*.conda"))) == 2


BUILD_WS = """
[workspace]
name = "audit-build"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
python = "3.12.*"
rocm-version = "7.2.*"

[feature.gfx942.dependencies]
amdgpu-target = { version = "*", build = "gfx942" }
pytorch = "2.12.*"

[environments]
mi300x = ["gfx942"]
"""


@pytest.mark.parametrize(("content", "verdict"), [
    ("gfx942", None),
    ("fat", "also holds code for gfx90a, gfx950, gfx1100"),
    ("gfx90a", "code for gfx90a, none for gfx942"),
    ("none", "no device code at all"),
])
def test_build_fails_a_variant_whose_package_contradicts_its_build_string(
        tmp_path: Path, kernels: dict[str, Path], content: str, verdict: str | None) -> None:
    from rocmlock.build.plan import make_plan
    from rocmlock.workspace.manifest import load_workspace

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws/pixi.toml").write_text(BUILD_WS)
    plan = make_plan(load_workspace(tmp_path / "ws/pixi.toml"), ["mi300x"],
                     recipes_dir=Path(__file__).resolve().parent.parent / "recipes")
    files: dict[str, Path | bytes] = {"none": {"lib/README": b"no GPU code"},
                                      "fat": {f"lib/{BNB_LIB}": bnb_library()}}.get(
        content, {"lib/libtorch_hip.hsaco": kernels.get(content, Path())})

    def builder(plan, variant, output, channels, log):  # type: ignore[no-untyped-def]
        if variant.subdir == "noarch":
            return rattler_build_variant(plan, variant, output, channels, log)
        make_package(output / variant.subdir, variant.stage, variant.build_string, files, version=variant.version)
        asyncio.run(index_fs(str(output)))  # as rattler-build indexes its output after each package
        assert variant.id in (output / variant.subdir / "repodata.json").read_text()
        return None

    out = tmp_path / "out"
    report = build_plan(plan, BuildOptions(out, stage="pytorch"), builder=builder)
    (outcome,) = report.outcomes
    if verdict is None:
        assert outcome.status == "built", outcome.reason
        assert len(list((out / "linux-64").glob("pytorch-*.conda"))) == 1
        assert "device code: lib/libtorch_hip.hsaco: gfx942" in Path(outcome.log or "").read_text()
        return
    assert outcome.status == "failed"
    assert outcome.reason.startswith(f"{outcome.id}: its package contradicts its build string") and verdict in \
        outcome.reason
    # Out of the channel: neither publish nor the next build takes it, and the index no longer lists it.
    assert not list((out / "linux-64").glob("pytorch-*.conda")) and len(list((out / "rejected").iterdir())) == 1
    assert outcome.id not in (out / "linux-64/repodata.json").read_text()
    again = build_plan(plan, BuildOptions(out, stage="pytorch"), builder=builder)
    assert again.outcomes[0].status == "failed"


# ----------------------------------------------------------------------------- bundles and unpack


@pytest.fixture(scope="module")
def wrong_bundle(tmp_path_factory: pytest.TempPathFactory, kernels: dict[str, Path]) -> Path:
    """A bundle of an mi300x (gfx942) environment whose pytorch package holds a gfx90a code object."""
    from channels import build_channel, forge_packages, private_packages
    from lockhelpers import lock_fresh_workspace

    root = tmp_path_factory.mktemp("wrong")
    private = [p for p in private_packages() if not (p.name == "pytorch" and "gfx942" in p.build)]
    channels = {"forge": build_channel(root / "forge", forge_packages()),
                "private": build_channel(root / "private", private)}
    make_package(channels["private"] / "linux-64", "pytorch", "rocm72_gfx942_py312_h1a2b3c4_0",
                 {f"{SITE}/torch/lib/kernels.hsaco": kernels["gfx90a"]}, version="2.12.1",
                 depends=("python >=3.12,<3.13.0a0", "numpy", "amdgpu-target * gfx942", "rocm-version 7.2.*"),
                 constrains=("__amdgpu_arch ==9.4.2",))
    asyncio.run(index_fs(str(channels["private"])))
    ws = lock_fresh_workspace(root / "ws", channels)
    bundle = root / "mi300x.tar"
    assert main(["pack", "--manifest-path", str(ws / "pixi.toml"), "-e", "mi300x", "-o", str(bundle)]) == 0
    return bundle


def test_audit_of_a_bundle_names_the_package_and_file(wrong_bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code, out, _ = _audit(capsys, str(wrong_bundle))
    assert code == 1
    assert "checked against gfx942 (the bundle's GPU target)" in out
    assert re.search(f"FAIL +{PYTORCH_942}/{SITE}/torch/lib/kernels.hsaco +gfx90a \\(code object\\)", out)
    code, out, _ = _audit(capsys, str(wrong_bundle), "--target", "gfx90a", "--json")
    assert code == 0 and json.loads(out)["cannot_run"] == []


def test_unpack_refuses_such_a_bundle_on_a_gfx942_node_and_force_installs(
        wrong_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_pack import fake_node

    host = fake_node(tmp_path / "host", [90402])
    prefix = tmp_path / "env"
    capsys.readouterr()
    assert main(["unpack", str(wrong_bundle), "--prefix", str(prefix), "--host-root", str(host)]) == 1
    err = capsys.readouterr().err
    assert "node check: a gfx942 GPU, ROCm 7.2 found" in err
    assert (f"error: the bundle holds GPU code that cannot run on this node's gfx942: "
            f"{PYTORCH_942}/{SITE}/torch/lib/kernels.hsaco") in err
    assert not prefix.exists()
    assert main(["unpack", str(wrong_bundle), "--prefix", str(prefix), "--host-root", str(host), "--force"]) == 0
    assert "device code check ignored (--force): cannot run on gfx942" in capsys.readouterr().err
    # The installed environment audits the same way, its target read from its amdgpu-target package.
    code, out, _ = _audit(capsys, "--prefix", str(prefix))
    assert code == 1 and re.search(f"FAIL +{SITE}/torch/lib/kernels.hsaco", out)


def test_a_file_name_with_control_characters_reaches_the_terminal_defused(
        tmp_path: Path, kernels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _prefix(tmp_path / "env", "gfx942", {"lib/evil\x1b[2J\x07.hsaco": kernels["gfx90a"],
                                                  "lib/libx\u202egnp.so": kernels["gfx90a"]})
    code, out, _ = _audit(capsys, "--prefix", str(prefix))
    assert code == 1 and "\x1b" not in out and "\x07" not in out
    assert "lib/evil?[2J?.hsaco" in out
    # U+202E (right-to-left override) made libx<RLO>gnp.so show as libxos.png: format characters are defused too.
    assert "\u202e" not in out and "lib/libx?gnp.so" in out


@pytest.mark.parametrize(("damage", "message"), [
    ("cut", "not a readable conda package (File is not a zip file)"),
    ("inner", "its pkg-mylib-1.0-rocm72_gfx942_py312_h0_0.tar.zst is damaged (zstd decompress error"),
    ("bz2", "not a readable conda package"),
])
def test_a_damaged_package_is_one_line_exit_2(tmp_path: Path, kernels: dict[str, Path], damage: str, message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import zipfile

    pkg = make_package(tmp_path / "out", "mylib", "rocm72_gfx942_py312_h0_0", {"lib/k.hsaco": kernels["gfx942"]},
                       bz2=damage == "bz2")
    bad = tmp_path / "bad" / pkg.name
    bad.parent.mkdir()
    if damage == "inner":
        with zipfile.ZipFile(pkg) as src, zipfile.ZipFile(bad, "w") as out:
            for name in src.namelist():
                data = src.read(name)
                out.writestr(name, data[:20] + bytes(b ^ 0x55 for b in data[20:200]) + data[200:]
                             if name.startswith("pkg-") else data)
    else:
        bad.write_bytes(pkg.read_bytes()[:300])
    code, out, err = _audit(capsys, str(bad))
    assert code == 2 and not out and "Traceback" not in err
    assert err.splitlines()[0].startswith(f"error: {bad}: ") and message in err
    assert err.splitlines()[1] == "hint: download or build the package again"


def test_aotriton_kernel_archives_count_as_device_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from devicecode_helpers import aks2

    objects = code_objects()
    images = f"{SITE}/torch/lib/aotriton.images"
    wrong, right = tmp_path / "wrong.aks2", tmp_path / "right.aks2"
    wrong.write_bytes(aks2([("attn_fwd-Gpu-gfx90a", objects["gfx90a"])]))
    right.write_bytes(aks2([("attn_fwd-Gpu-gfx942", objects["gfx942"])]))
    prefix = _prefix(tmp_path / "env", "gfx942", {f"{images}/amd-gfx942/flash/attn_fwd.aks2": right,
                                                  f"{images}/amd-gfx90a/flash/attn_fwd.aks2": wrong})
    code, out, _ = _audit(capsys, "--prefix", str(prefix))
    assert code == 1
    assert re.search(f"ok +{images}/amd-gfx942/flash/attn_fwd.aks2 +gfx942 \\(AOTriton archive\\)", out)
    assert re.search(f"FAIL +{images}/amd-gfx90a/flash/attn_fwd.aks2 +gfx90a \\(AOTriton archive\\)", out)
    # Inside a package too (the tar member is copied out like an ELF one).
    pkg = make_package(tmp_path / "out", "aotriton", "rocm72_gfx942_h0_0",
                       {"lib/aotriton.images/amd-gfx90a/attn_fwd.aks2": wrong})
    code, out, _ = _audit(capsys, str(pkg))
    assert code == 1 and "lib/aotriton.images/amd-gfx90a/attn_fwd.aks2" in out


def test_code_objects_beside_their_alternatives_pass_where_one_serves_the_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from devicecode_helpers import aks2

    objects = code_objects()
    files: dict[str, Path] = {}
    for gfx in ("gfx90a", "gfx942", "gfx1100"):  # rocBLAS's way: one Tensile code object per target
        files[f"lib/rocblas/library/TensileLibrary_{gfx}.co"] = tmp_path / f"{gfx}.co"
        files[f"lib/rocblas/library/TensileLibrary_{gfx}.co"].write_bytes(objects[gfx])
    for gfx in ("gfx1100", "gfx1201"):  # AOTriton's way: an image of several targets' archives
        files[f"lib/aotriton.images/amd-gfx11xx/flash/{gfx}.aks2"] = tmp_path / f"{gfx}.aks2"
        files[f"lib/aotriton.images/amd-gfx11xx/flash/{gfx}.aks2"].write_bytes(aks2([("k", objects[gfx])]))
    prefix = _prefix(tmp_path / "env", "gfx942", dict(files))
    code, out, _ = _audit(capsys, "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 1  # rocBLAS serves gfx942; the gfx11xx AOTriton image does not, and both its files are named
    assert report["cannot_run"] == ["lib/aotriton.images/amd-gfx11xx/flash/gfx1100.aks2",
                                    "lib/aotriton.images/amd-gfx11xx/flash/gfx1201.aks2"]
    assert _audit(capsys, "--prefix", str(prefix), "--target", "gfx1100")[0] == 0  # both directories serve it
    code, out, _ = _audit(capsys, "--prefix", str(prefix), "--target", "gfx1201", "--json")
    assert code == 1 and json.loads(out)["cannot_run"] == [f"lib/rocblas/library/TensileLibrary_{g}.co"
                                                           for g in ("gfx1100", "gfx90a", "gfx942")]
    # A gfx1100 package with that AOTriton image is no fat build: publish takes it.
    del files["lib/rocblas/library/TensileLibrary_gfx942.co"], files["lib/rocblas/library/TensileLibrary_gfx90a.co"]
    out_dir = tmp_path / "built"
    make_package(out_dir / "linux-64", "pytorch", "rocm72_gfx1100_py312_h0_0", dict(files))
    asyncio.run(index_fs(str(out_dir)))
    assert main(["publish", "--from", str(out_dir), "--to", str(tmp_path / "channel")]) == 0
    assert "device code of linux-64/pytorch-1.0-rocm72_gfx1100_py312_h0_0.conda: 3 file(s), all for gfx1100" in \
        capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 33: hostile and odd input


def test_code_object_files_of_hipcc_genco_are_device_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`hipcc --genco` writes an offload bundle file (compressed with --offload-compress), which hipModuleLoad
    loads: it was "no device code found", exit 0. Real ones: tests/test_rocm72_devicecode.py."""
    from devicecode_helpers import ccob, plain_bundle

    objects = code_objects()
    host = ("host-x86_64-unknown-linux-gnu-", b"")
    files: dict[str, Path] = {}
    for name, data in {"plain.co": plain_bundle([host, ("hipv4-amdgcn-amd-amdhsa--gfx90a", objects["gfx90a"])]),
                       "zstd.co": ccob(plain_bundle([host, ("hipv4-amdgcn-amd-amdhsa--gfx1100", objects["gfx1100"])])),
                       "zlib-v2.hsaco": ccob(plain_bundle([("hip-amdgcn-amd-amdhsa--gfx1201", objects["gfx1201"])]),
                                             method=0, version=2),
                       "notes.txt": b"CCOB is not a bundle: not every file starting so is one\n"}.items():
        files[f"share/kernels/{name}"] = tmp_path / name
        files[f"share/kernels/{name}"].write_bytes(data)
    prefix = _prefix(tmp_path / "env", "gfx942", files)
    code, out, _ = _audit(capsys, "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 1 and report["cannot_run"] == [f"share/kernels/{n}" for n in ("plain.co", "zlib-v2.hsaco",
                                                                                  "zstd.co")]
    assert [(f["kind"], f["targets"], f["bundles"]) for f in report["files"]] == [
        ("offload-bundle", ["gfx90a"], 1), ("offload-bundle", ["gfx1201"], 1), ("offload-bundle", ["gfx1100"], 1)]
    assert _audit(capsys, "--prefix", str(prefix), "--target", "gfx90a")[0] == 0  # one of the directory serves it
    # Inside a package, against its build string; a damaged one is unreadable, never "no device code".
    pkg = make_package(tmp_path / "out", "kernels", "rocm72_gfx1100_h0_0",
                       {"share/k/zstd.co": files["share/kernels/zstd.co"],
                        "share/k/cut.co": files["share/kernels/plain.co"].read_bytes()[:300]})
    code, out, _ = _audit(capsys, str(pkg))
    assert code == 1 and re.search(r"ok +share/k/zstd.co +gfx1100 \(code object file of 1 bundle\(s\)\)", out)
    assert re.search(r"FAIL +share/k/cut.co +unreadable: bundle at offset 0: entry '.*gfx90a' claims", out)


# Root reads every directory through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: the audit runs without them
# (setpriv(1) drops them), so mode bits apply as they do to a user (as in tests/test_publish_concurrent.py).
NO_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search")


def _audit_as_a_user(*argv: str) -> subprocess.CompletedProcess[str]:
    """`rocmlock audit ARGV` in a child process to which mode bits apply (as root: without the overrides)."""
    cmd: tuple[str, ...] = (sys.executable, "-m", "rocmlock", "audit", *argv)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv(1) to run the audit as root without its override of mode bits")
        cmd = NO_OVERRIDE + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "tools")})


def test_an_unreadable_directory_fails_the_audit_naming_it(tmp_path: Path, kernels: dict[str, Path]) -> None:
    """Issue 33: a directory the user may not list was skipped and the audit passed."""
    prefix = _prefix(tmp_path / "env", "gfx942", {"lib/ok.hsaco": kernels["gfx942"],
                                                  "lib/secret/k.hsaco": kernels["gfx90a"],
                                                  "lib/nosearch/k.hsaco": kernels["gfx90a"]})
    (prefix / "lib/secret").chmod(0)
    (prefix / "lib/nosearch").chmod(0o644)  # its names can be listed, its files not opened
    try:
        proc = _audit_as_a_user("--prefix", str(prefix))
    finally:
        (prefix / "lib/secret").chmod(0o755)
        (prefix / "lib/nosearch").chmod(0o755)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"FAIL +lib/secret/ +unreadable: cannot list this directory \(Permission denied\)", out), out
    assert re.search(r"FAIL +lib/nosearch/k.hsaco +unreadable: cannot read it \(Permission denied\)", out), out
    assert re.search(r"ok +lib/ok.hsaco +gfx942", out)
    assert out.rstrip().endswith("2 of 3 file(s) with device code cannot run on gfx942: lib/nosearch/k.hsaco, "
                                 "lib/secret/")


_SMALL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full /tmp
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
from rocmlock.cli.main import main
code = main(["audit", *sys.argv[1:]])
# VmHWM, not getrusage: ru_maxrss keeps the peak of the process before exec (pytest's, hundreds of MB).
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("peak-rss-mib", int(peak.split()[1]) // 1024)
sys.exit(code)
"""


def test_a_package_is_read_as_a_stream_without_disk_and_in_bounded_memory(tmp_path: Path) -> None:
    """Issue 33: each ELF member was copied whole to $TMPDIR (4 GiB for a 128 KiB .conda), and where /tmp was
    small the package was blamed ("not a readable conda package"). A 96 MiB library (a gfx942 bundle after 96 MiB
    of code) in a 30 KiB .conda, audited where no file may grow past 1 MiB."""
    from devicecode_helpers import ccob, padded_host_elf, plain_bundle, streamed_conda

    section = ccob(plain_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", code_objects()["gfx942"])]))
    pkg = streamed_conda(tmp_path / "big-1.0-rocm72_gfx942_h0_0.conda", "lib/libbig.so",
                         padded_host_elf(96 << 20, section))
    assert pkg.stat().st_size < 200_000
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(scratch), "PYTHONPATH": str(Path(__file__).parent.parent / "tools")}
    proc = subprocess.run([sys.executable, "-c", _SMALL_DISK, str(pkg)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"ok +lib/libbig.so +gfx942 \(1 bundle\(s\)\)", proc.stdout), proc.stdout
    assert int(proc.stdout.split("peak-rss-mib")[1]) < 150  # the interpreter, zstandard and a window of 8-16 MiB
    assert not list(scratch.iterdir())


def test_a_package_this_machine_cannot_read_is_not_blamed_on_the_package(tmp_path: Path,
                                                                        kernels: dict[str, Path]) -> None:
    """Issue 33: an error of the machine reading a package (here: the user may not open it; a full or failing disk
    alike) was "not a readable conda package", exit 2, "download or build the package again"."""
    pkg = make_package(tmp_path / "out", "mylib", "rocm72_gfx942_py312_h0_0", {"lib/k.hsaco": kernels["gfx942"]})
    pkg.chmod(0)
    try:
        proc = _audit_as_a_user(str(pkg))
    finally:
        pkg.chmod(0o644)
    error = (f"error: cannot read {pkg}: Permission denied (an error of this machine's disk or file system, not "
             "of the package)")
    assert proc.returncode == 1 and not proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [error, "hint: check the disk and the file's permissions, then run again"]
