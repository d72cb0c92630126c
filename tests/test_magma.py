"""MAGMA for the pytorch build (issue 13, finding 10): doctor's `magma` check, the build script's
`rocmlock_magma` / `rocmlock_bundle_magma` (recipes/rocm-build-env.sh) and the ELF reader both use.

PyTorch's USE_MAGMA defaults to ON and cmake/Modules/FindMAGMA.cmake searches $MAGMA_HOME, /usr/local/magma and the
system prefixes, so the recipe must say USE_MAGMA=0 unless told otherwise; a MAGMA linking another ROCm's HIP runtime
(Debian sid's libmagma-rocm-dev 2.9.0+ds-3 links libamdhip64.so.6) must be refused. The libraries here are real ELF
files made by the system C compiler with the sonames and NEEDED entries the real ones have.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rocmlock.errors import InputError
from rocmlock.gpu.elf import ElfError, read_dynamic
from rocmlock.host import doctor, magma

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"


def _cc() -> str:
    found = shutil.which("cc") or shutil.which("gcc")
    assert found, "a C compiler is required (apt-get install gcc)"
    return found


def _shared(path: Path, soname: str, needed: tuple[Path, ...] = ()) -> Path:
    """A real shared library at ``path`` with that SONAME, linking ``needed`` (each by its own SONAME)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / f"{path.name}.c"
    src.write_text("int rocmlock_test_symbol(void) { return 1; }\n")
    argv = [_cc(), "-shared", "-fPIC", "-o", str(path), str(src), f"-Wl,-soname,{soname}", "-Wl,--no-as-needed"]
    subprocess.run([*argv, *map(str, needed)], check=True, capture_output=True)
    src.unlink()
    return path


def _rocm(root: Path, hip_major: int) -> Path:
    """A ROCm prefix whose lib/libamdhip64.so is (links to) a library with ROCm's soname libamdhip64.so.N."""
    real = _shared(root / f"lib/libamdhip64.so.{hip_major}.2.4", f"libamdhip64.so.{hip_major}")
    (root / "lib/libamdhip64.so").symlink_to(real.name)
    return root


def _magma(prefix: Path, hip: Path, multiarch: bool = False) -> Path:
    """A MAGMA install as Debian lays it out (multiarch) or as PyTorch's CI does (lib/), linking ``hip``."""
    lib = prefix / ("lib/x86_64-linux-gnu" if multiarch else "lib")
    real = _shared(lib / "libmagma.so.2", "libmagma.so.2", (hip,))
    (lib / "libmagma.so").symlink_to(real.name)
    (prefix / "include").mkdir(parents=True, exist_ok=True)
    (prefix / "include/magma.h").write_text("")
    return prefix


def test_elf_reader_agrees_with_readelf(tmp_path: Path) -> None:
    hip = _rocm(tmp_path / "rocm", 7) / "lib/libamdhip64.so"
    lib = _magma(tmp_path / "magma", hip) / "lib/libmagma.so"
    dyn = read_dynamic(lib)
    assert dyn.soname == "libmagma.so.2"
    assert "libamdhip64.so.7" in dyn.needed and "libc.so.6" in dyn.needed
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        assert sorted(line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line) \
            == sorted(dyn.needed)
    (tmp_path / "text").write_text("not elf")
    with pytest.raises(ElfError, match="not a 64-bit little-endian ELF"):
        read_dynamic(tmp_path / "text")
    out = subprocess.run([sys.executable, str(REPO / "tools/rocmlock/gpu/elf.py"), str(tmp_path / "text")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_discovery_order_and_layouts(tmp_path: Path) -> None:
    rocm = _rocm(tmp_path / "rocm", 7)
    hip = rocm / "lib/libamdhip64.so"
    assert magma.hip_runtime_of(rocm) == "libamdhip64.so.7"
    assert magma.discover({}, rocm) is None
    # Debian's layout: MAGMA in the ROCm prefix itself, library in the multiarch directory.
    _magma(rocm, hip, multiarch=True)
    found = magma.discover({}, rocm)
    assert found is not None and found.prefix == rocm and found.hip_runtime == "libamdhip64.so.7"
    assert found.library == rocm / "lib/x86_64-linux-gnu/libmagma.so"
    # PyTorch CI's layout (<rocm>/magma) comes first, $MAGMA_HOME before it.
    _magma(rocm / "magma", hip)
    assert magma.discover({}, rocm).prefix == rocm / "magma"  # type: ignore[union-attr]
    other = _magma(tmp_path / "other", hip)
    assert magma.discover({"MAGMA_HOME": str(other)}, rocm).prefix == other  # type: ignore[union-attr]
    # A header without the library is no MAGMA.
    (tmp_path / "half/include").mkdir(parents=True)
    (tmp_path / "half/include/magma.h").write_text("")
    assert magma.magma_at(tmp_path / "half") is None


def test_doctor_magma_check(tmp_path: Path) -> None:
    rocm = _rocm(tmp_path / "rocm", 7)
    hip7 = rocm / "lib/libamdhip64.so"
    hip6 = _shared(tmp_path / "rocm6/lib/libamdhip64.so.6", "libamdhip64.so.6")

    def check(env: dict[str, str], packages: tuple[str, ...] | None = ("pytorch",)) -> doctor.Check:
        result = doctor.check_magma(env, rocm, packages, required=packages is not None)
        assert result is not None
        return result

    assert doctor.check_magma({}, rocm, ("bitsandbytes",)) is None  # only pytorch links MAGMA
    none = check({})
    assert none.status == "warn" and none.message.startswith(f"no MAGMA for the ROCm at {rocm}: pytorch builds")
    assert "libmagma-rocm-dev" in none.fix and "ROCMLOCK_MAGMA_HOME=<its absolute prefix>" in none.fix
    # Debian sid's MAGMA next to ROCm 7: found, and refused for its HIP runtime.
    _magma(rocm, hip6, multiarch=True)
    stale = check({})
    assert stale.status == "warn"
    assert stale.message == (f"MAGMA at {rocm} links libamdhip64.so.6 but the ROCm at {rocm} is libamdhip64.so.7: "
                             "built for another ROCm, pytorch cannot use it")
    assert check({"ROCMLOCK_MAGMA_HOME": str(rocm)}).status == "fail"  # the build would refuse it
    assert check({"ROCMLOCK_MAGMA_HOME": str(rocm)}, None).status == "warn"  # no workspace: not known to be built
    # A MAGMA for this ROCm: a warning while unused, ok once given.
    good = _magma(rocm / "magma", hip7)
    unused = check({})
    assert unused.status == "warn" and unused.fix.startswith(f"export ROCMLOCK_MAGMA_HOME={good} ")
    used = check({"ROCMLOCK_MAGMA_HOME": str(good)})
    assert used.status == "ok" and used.message.startswith(f"MAGMA at {good} ({good}/lib/libmagma.so, links "
                                                           "libamdhip64.so.7)")
    missing = check({"ROCMLOCK_MAGMA_HOME": str(tmp_path / "nowhere")})
    assert missing.status == "fail" and missing.message.endswith("/nowhere does not exist")


def _build_env(env: dict[str, str], body: str) -> subprocess.CompletedProcess[str]:
    script = f'set -euo pipefail\n. "{RECIPES / "rocm-build-env.sh"}"\n{body}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                               "RECIPE_DIR": str(RECIPES / "pytorch-rocm"), "ROCMLOCK_ROCM_VERSION": "7.2", **env})


def test_build_script_links_and_carries_only_a_magma_for_this_rocm(tmp_path: Path) -> None:
    rocm = _rocm(tmp_path / "rocm", 7)
    report = 'echo "USE_MAGMA=${USE_MAGMA} MAGMA_HOME=${MAGMA_HOME:-unset}"'
    # Unset: USE_MAGMA=0 said explicitly, and a MAGMA_HOME from elsewhere does not reach FindMAGMA.
    out = _build_env({"ROCM_PATH": str(rocm), "MAGMA_HOME": "/usr/local/magma"}, f"rocmlock_magma\n{report}")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "USE_MAGMA=0 MAGMA_HOME=unset\n" and "MAGMA off" in out.stderr
    # ROCm 6's MAGMA (Debian sid's) is refused in one line naming both runtimes.
    stale = _magma(tmp_path / "stale", _shared(tmp_path / "r6/libamdhip64.so.6", "libamdhip64.so.6"), multiarch=True)
    out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": str(stale)}, f"rocmlock_magma\n{report}")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == (
        f"rocmlock build: MAGMA at {stale} ({stale}/lib/x86_64-linux-gnu/libmagma.so) links libamdhip64.so.6 but the "
        f"ROCm at {rocm} is libamdhip64.so.7: it was built for another ROCm; build MAGMA against ROCm 7.2 (PyTorch's "
        ".ci/docker/common/install_rocm_magma.sh) or unset ROCMLOCK_MAGMA_HOME")
    out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": str(tmp_path / "none")}, "rocmlock_magma")
    assert out.returncode == 1 and "/none does not exist" in out.stderr
    (tmp_path / "none").mkdir()
    out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": str(tmp_path / "none")}, "rocmlock_magma")
    assert out.returncode == 1 and "has no include/magma.h" in out.stderr
    # One for this ROCm: linked (USE_MAGMA=1, MAGMA_HOME for FindMAGMA) and carried under its soname.
    good = _magma(tmp_path / "good", rocm / "lib/libamdhip64.so")
    prefix = tmp_path / "prefix"
    out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": str(good), "PREFIX": str(prefix)},
                     f"rocmlock_magma\n{report}\nrocmlock_bundle_magma")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"USE_MAGMA=1 MAGMA_HOME={good}\n"
    carried = prefix / "lib/libmagma.so.2"
    assert carried.is_file() and not carried.is_symlink()
    assert carried.read_bytes() == (good / "lib/libmagma.so.2").read_bytes()
    # Off: nothing carried.
    empty = tmp_path / "empty"
    out = _build_env({"ROCM_PATH": str(rocm), "PREFIX": str(empty)}, "rocmlock_magma\nrocmlock_bundle_magma")
    assert out.returncode == 0 and not empty.exists()


def test_recipe_passes_the_key_and_marks_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The key reaches build.sh through the recipe (rattler-build forwards no environment), and a build with MAGMA has
    # "magma_" in its build string, so it never shares a file name with one without; its test expects
    # torch._C._has_magma to say the same.
    import rattler_build as rb
    from rocmlock.build.recipes import load_matrix, render_config

    one = load_matrix(RECIPES).narrowed({"gpu_target": ["gfx942"], "python": ["3.12"], "rocm_version": ["7.2"]})

    def rendered() -> dict:  # type: ignore[type-arg]
        (rv,) = rb.Stage0Recipe.from_file(str(RECIPES / "pytorch-rocm/recipe.yaml")).render(
            one.to_variant_config(), render_config())
        return rv.recipe.to_dict()  # type: ignore[no-any-return]

    def magma_test(recipe: dict) -> str:  # type: ignore[type-arg]
        return next(line for t in recipe["tests"] for line in t.get("script", []) if "_has_magma" in line)

    off = rendered()
    assert "ROCMLOCK_MAGMA_HOME" not in off["build"]["script"]["env"]  # rattler-build drops an empty value
    assert "magma" not in off["build"]["string"]
    # rattler-build renders the test's Jinja when it runs it: the context value decides.
    assert off["context"]["magma"] == "0" and "('${{ magma }}' == '1')" in magma_test(off)
    monkeypatch.setenv("ROCMLOCK_MAGMA_HOME", str(tmp_path))
    on = rendered()
    assert on["build"]["script"]["env"]["ROCMLOCK_MAGMA_HOME"] == str(tmp_path)
    assert on["build"]["string"].startswith("rocm72_gfx942_py312_magma_h")
    assert on["context"]["magma"] == "1"
    build = (RECIPES / "pytorch-rocm/build.sh").read_text()
    assert "rocmlock_require_rocm_components pytorch\n" in build and "\nrocmlock_magma\n" in build
    assert build.endswith("python -m pip install . --no-deps --no-build-isolation -vv\nrocmlock_bundle_magma\n")


def test_damaged_libraries_are_one_line_errors_not_tracebacks(tmp_path: Path) -> None:
    """ELF magic with the rest cut off (an interrupted copy), or headers pointing past the end, is an ElfError for
    read_dynamic, exit 1 with one line for `elf.py`, and doctor says the library cannot be read instead of failing
    with a traceback (struct.error) or blaming another ROCm."""
    rocm = _rocm(tmp_path / "rocm", 7)
    good = _magma(tmp_path / "good", rocm / "lib/libamdhip64.so") / "lib/libmagma.so.2"
    whole = good.read_bytes()
    damaged = {"truncated-header": b"\x7fELF\x02\x01\x01", "truncated-half": whole[: len(whole) // 2],
               "phoff-past-end": whole[:0x20] + (10**9).to_bytes(8, "little") + whole[0x28:]}
    for name, data in damaged.items():
        lib = tmp_path / name
        lib.write_bytes(data)
        with pytest.raises(ElfError, match=f"{lib}: "):
            read_dynamic(lib)
        out = subprocess.run([sys.executable, str(REPO / "tools/rocmlock/gpu/elf.py"), str(lib)],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 1 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    # A libmagma.so that is no ELF file at all (a linker script, a truncated download) in a MAGMA prefix.
    prefix = tmp_path / "broken"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include/magma.h").write_text("")
    for data in (damaged["truncated-header"], b"INPUT(libmagma.so.2)\n"):
        (prefix / "lib").mkdir(exist_ok=True)
        (prefix / "lib/libmagma.so").write_bytes(data)
        found = magma.magma_at(prefix)
        assert found is not None and found.hip_runtime is None and found.unreadable
        check = doctor.check_magma({"ROCMLOCK_MAGMA_HOME": str(prefix)}, rocm, ("pytorch",))
        assert check is not None and check.status == "fail"
        assert check.message.startswith(f"MAGMA at {prefix}: cannot read {prefix}/lib/libmagma.so as a shared "
                                        "library ("), check.message
        assert "another ROCm" not in check.message
    # A ROCm whose libamdhip64.so is damaged: its HIP runtime is unknown, not a traceback.
    (rocm / "lib/libamdhip64.so.7.2.4").write_bytes(damaged["truncated-header"])
    assert magma.hip_runtime_of(rocm) is None


# ----------------------------------------------------------------------------- the key's value: absolute, existing

BUILD_WORKSPACE = """
[workspace]
name = "magma-key"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
python = "3.12.*"
rocm-version = "7.2.*"
amdgpu-target = { version = "*", build = "gfx942" }
pytorch = "2.12.*"
"""


def test_a_relative_missing_or_empty_key_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rattler-build runs build.sh in its own work directory, so a relative path that is right where the user
    typed it names another directory there: refused even when it exists relative to the current directory."""
    rocm = _rocm(tmp_path / "rocm", 7)
    good = _magma(tmp_path / "good", rocm / "lib/libamdhip64.so")
    monkeypatch.chdir(tmp_path)
    key = magma.KEY
    assert magma.given({}) is None and magma.given({key: ""}) is None
    assert magma.given({key: str(good)}).prefix == good  # type: ignore[union-attr]
    (tmp_path / "file").write_text("")
    cases = {
        "good": ((f"{key}=good is a relative path; build.sh runs in rattler-build's work directory, where it "
                  "would name another directory"), f"give an absolute path (export {key}={good} if that is the one)"),
        "./good/": (f"{key}=./good/ is a relative path", f"export {key}={good} if"),
        f"{tmp_path}/none": (f"{key}={tmp_path}/none does not exist", "point it at a MAGMA install"),
        f"{tmp_path}/file": (f"{key}={tmp_path}/file is not a directory", "point it at a MAGMA install's prefix"),
        str(rocm): (f"{key}={rocm} has no include/magma.h and lib/libmagma.so", "point it at a MAGMA install"),
    }
    for value, (message, hint) in cases.items():
        with pytest.raises(InputError) as exc:
            magma.given({key: value})
        assert str(exc.value).startswith(message) and "\n" not in str(exc.value), value
        assert exc.value.hint and hint in exc.value.hint and exc.value.hint.endswith(
            f"or unset {key} to build pytorch without MAGMA"), exc.value.hint
        # doctor: the same line, a failure when pytorch is to be built, a warning without a workspace.
        check = doctor.check_magma({key: value}, rocm, ("pytorch",))
        assert check is not None and check.status == "fail" and check.message.startswith(message)
        assert check.fix == exc.value.hint
        assert doctor.check_magma({key: value}, rocm, None, required=False).status == "warn"  # type: ignore[union-attr]
    empty = doctor.check_magma({key: ""}, rocm, ("pytorch",))
    assert empty is not None and empty.status == "warn"
    assert empty.message == f"{key} is set but empty: pytorch builds without MAGMA, as when unset"


def test_a_refusal_without_a_hint_still_gives_doctor_a_fix(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Check.fix is a string: `doctor --json` promises one and the text report prints it under a failure. An
    # InputError's hint is optional, so a refusal raised without one must not put None (JSON null) there.
    rocm = _rocm(tmp_path / "rocm", 7)

    def refuse(env: object) -> None:
        raise InputError(f"{magma.KEY}=/x: refused")

    monkeypatch.setattr(magma, "given", refuse)
    check = doctor.check_magma({magma.KEY: "/x"}, rocm, ("pytorch",))
    assert check is not None and check.status == "fail" and check.message == f"{magma.KEY}=/x: refused"
    assert isinstance(check.fix, str)
    assert check.fix.startswith(f"set {magma.KEY} to the absolute prefix of a MAGMA")
    report = doctor.DoctorReport((check,), (), 1)
    assert report.to_dict()["checks"][0]["fix"] == check.fix
    assert f"fix: {check.fix}" in doctor.render_report(report)


def test_build_script_refuses_a_relative_or_missing_key(tmp_path: Path) -> None:
    # Built by hand with rattler-build, nothing in Python checks the key first: rocmlock_magma must.
    rocm = _rocm(tmp_path / "rocm", 7)
    _magma(tmp_path / "good", rocm / "lib/libamdhip64.so")  # "good" exists relative to build.sh's directory
    (tmp_path / "file").write_text("")
    script = f'cd "{tmp_path}"\nrocmlock_magma\necho "USE_MAGMA=${{USE_MAGMA}}"'
    for value, message in {"good": "ROCMLOCK_MAGMA_HOME=good is a relative path and build.sh runs in rattler-build's"
                                   f" work directory {tmp_path}; give the absolute path of the MAGMA install",
                           f"{tmp_path}/none": f"ROCMLOCK_MAGMA_HOME={tmp_path}/none does not exist; point it at",
                           f"{tmp_path}/file": f"ROCMLOCK_MAGMA_HOME={tmp_path}/file is not a directory"}.items():
        out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": value}, script)
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"rocmlock build: {message}"), out.stderr
    # Empty is unset (the recipe renders it as no value at all): MAGMA off, no error.
    out = _build_env({"ROCM_PATH": str(rocm), "ROCMLOCK_MAGMA_HOME": ""}, script)
    assert out.returncode == 0 and out.stdout == "USE_MAGMA=0\n", out.stderr


def test_rocmlock_build_refuses_the_key_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from rocmlock.build import builder as build
    from rocmlock.build.plan import make_plan
    from rocmlock.cli.main import main
    from rocmlock.workspace.manifest import load_workspace

    manifest = tmp_path / "ws/pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(BUILD_WORKSPACE)
    (tmp_path / "ws/magma").mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    monkeypatch.setenv(magma.KEY, "magma")

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may be built with a bad ROCMLOCK_MAGMA_HOME")

    monkeypatch.setattr(build, "build_plan", no_build)
    out_dir = tmp_path / "out"
    code = main(["build", "--manifest-path", str(manifest), "--recipes-dir", str(RECIPES), "--output", str(out_dir),
                 "--skip-doctor"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [
        (f"error: {magma.KEY}=magma is a relative path; build.sh runs in rattler-build's work directory, where it "
         "would name another directory"),
        (f"hint: give an absolute path (export {magma.KEY}={tmp_path}/ws/magma if that is the one), or unset "
         f"{magma.KEY} to build pytorch without MAGMA")]
    assert not out_dir.exists()
    # Only a build that compiles pytorch is concerned; an empty value is a warning (MAGMA off).
    plan = make_plan(load_workspace(manifest), recipes_dir=RECIPES)
    assert build.check_magma_home(plan, out_dir, "amdgpu-target", {magma.KEY: "magma"}) == []
    with pytest.raises(InputError, match="does not exist"):
        build.check_magma_home(plan, out_dir, None, {magma.KEY: str(tmp_path / "none")})
    assert build.check_magma_home(plan, out_dir, None, {magma.KEY: ""}) == [
        f"{magma.KEY} is set but empty: pytorch builds without MAGMA, as when unset"]
    assert build.check_magma_home(plan, out_dir, None, {}) == []
