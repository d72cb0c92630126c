"""The rocm-version activation and deactivation scripts as the shells that source them run them, on this host
(pure shell logic against a fake ROCm prefix; the real ROCm 7.2.4 layouts: tests/test_rocm72_env.py and
tests/test_rocm72_layouts.py).

Which shells source ``etc/conda/{activate,deactivate}.d/*.sh``:
- conda: ``PosixActivator`` (``script_extension = ".sh"``, ``run_script_tmpl = '. "%s"'``) serves the posix, ash,
  bash, dash and zsh shells (conda/activate.py, ``activator_map``); the xonsh activator runs the same ``.sh``.
- pixi/rattler: ``Bash`` (flavors bash, sh, dash, ksh, busybox) and ``Zsh`` both have ``extension() == "sh"`` and
  source with ``. "<path>"`` (crates/rattler_shell/src/shell/mod.rs); ``pixi run`` computes the environment with
  ``ShellEnum::default()``, bash on Unix (pixi_core/src/activation.rs ``run_activation``), and rattler's
  ``run_activation`` fails when that script exits non-zero. ``pixi shell`` sources them in the user's shell.
So the scripts must run in bash, dash and zsh alike, in shells with ``set -eu``, twice over, without a word on
stderr when nothing is wrong. zsh differs where it matters: a glob that matches nothing is an error that stops
the sourced file ("no matches found").
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ciskips import in_ci

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
SHELLS = ("bash", "dash", "zsh")
SHOW = 'echo "ROCM_PATH=${ROCM_PATH-unset} HIP_PATH=${HIP_PATH-unset} HIP_DEVICE_LIB_PATH=${HIP_DEVICE_LIB_PATH-unset}"'


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is not installed (apt-get install {name}; .ci/run does)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture
def scripts(tmp_path: Path) -> tuple[Path, Path]:
    activate = tmp_path / "rocm-version_activate.sh"
    activate.write_text((RECIPES / "rocm-version/activate.sh").read_text().replace("@ROCM_VERSION@", "7.2"))
    deactivate = tmp_path / "rocm-version_deactivate.sh"
    shutil.copy(RECIPES / "rocm-version/deactivate.sh", deactivate)
    return activate, deactivate


def _fake_rocm(root: Path, version: str = "7.2.0-43") -> Path:
    """A ROCm prefix whose device libraries are only in its clang's resource directory (no <rocm>/amdgcn)."""
    (root / "include/hip").mkdir(parents=True)
    (root / "include/hip/hip_runtime.h").write_text("")
    (root / ".info").mkdir()
    (root / ".info/version").write_text(f"{version}\n")
    resource = root / "lib/llvm/lib/clang/22"
    (resource / "amdgcn/bitcode").mkdir(parents=True)
    (resource / "amdgcn/bitcode/ocml.bc").write_text("")
    clang = root / "lib/llvm/bin/clang"
    clang.parent.mkdir(parents=True)
    clang.write_text(f"#!/bin/sh\necho {resource}\n")
    clang.chmod(0o755)
    return root


def _run(shell: str, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # -f for zsh: no startup files (the user's .zshrc is not under test); set -eu as a strict user's shell has.
    argv = [_shell(shell), *(["-f"] if shell == "zsh" else []), "-c", "set -eu\n" + script]
    return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("shell", SHELLS)
def test_activation_twice_then_deactivation_in_every_shell(shell: str, scripts: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    activate, deactivate = scripts
    rocm = _fake_rocm(tmp_path / "rocm")
    libs = rocm / "lib/llvm/lib/clang/22/amdgcn/bitcode"
    script = (f'before="$PATH"\n. "{activate}"\n. "{activate}"\n{SHOW}\n'
              '[ "$PATH" = "$before" ] && echo "PATH unchanged"\n'
              f'. "{deactivate}"\n{SHOW}\n'
              "set | grep -c '^_rocmlock_' || true\n")
    out = _run(shell, script, {"HIP_PATH": str(rocm)})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.splitlines() == [
        # HIP_PATH is the user's; ROCM_PATH and the device libraries (found by asking <rocm>/lib/llvm/bin/clang,
        # as rocm-build-env.sh does) are the activation's.
        f"ROCM_PATH={rocm} HIP_PATH={rocm} HIP_DEVICE_LIB_PATH={libs}",
        "PATH unchanged",
        # Deactivation takes back what activation set, and only that, however often it was sourced.
        f"ROCM_PATH=unset HIP_PATH={rocm} HIP_DEVICE_LIB_PATH=unset",
        "0",  # no helper variable left in the user's shell
    ]


@pytest.mark.parametrize("shell", SHELLS)
def test_activation_with_a_missing_rocm_path_warns_once_in_every_shell(shell: str, scripts: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    activate, deactivate = scripts
    missing = tmp_path / "rocm-7.2.9"
    out = _run(shell, f'. "{activate}"\n{SHOW}\n. "{deactivate}"\n{SHOW}\n', {"ROCM_PATH": str(missing)})
    assert out.returncode == 0
    assert out.stderr == (f"rocm-version: ROCM_PATH={missing} does not exist; nothing exported: point ROCM_PATH at "
                          "the host's ROCm 7.2, or unset it\n")
    assert out.stdout.splitlines() == [f"ROCM_PATH={missing} HIP_PATH=unset HIP_DEVICE_LIB_PATH=unset"] * 2


@pytest.mark.parametrize("shell", SHELLS)
def test_activation_keeps_what_the_user_set_through_deactivation(shell: str, scripts: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    activate, deactivate = scripts
    rocm = _fake_rocm(tmp_path / "rocm")
    given = {"ROCM_PATH": f"{rocm}/", "HIP_DEVICE_LIB_PATH": str(tmp_path)}  # a trailing slash is the same ROCm
    out = _run(shell, f'. "{activate}"\n{SHOW}\n. "{deactivate}"\n{SHOW}\n', given)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.splitlines() == [f"ROCM_PATH={rocm}/ HIP_PATH={rocm}/ HIP_DEVICE_LIB_PATH={tmp_path}",
                                       f"ROCM_PATH={rocm}/ HIP_PATH=unset HIP_DEVICE_LIB_PATH={tmp_path}"]


# [activation.env] values as the image's activation script exports them (rocmlock.image.activation): one with a
# "$" is left to the shell to expand, as pixi's shell-hook does; every other character stays as written.
_VALUES = ("$HOME\\", "a\\\"b $HOME", 'x"y$HOME', "\\$HOME", "$HOME", "two\\\\ $HOME", "plain", "it's", "tab\there",
           "${HOME}/lib:$HOME", "$", "100$", "`plain`")
# A value with "$" is the shell's to expand, in double quotes; what would run a command there (pixi's bash runs it;
# an unbalanced one left the image's activate.sh unparsable: no command started in the container) or is a ${...}
# other than a variable is refused, as are a NUL and a variable Linux cannot pass to a program (128 KiB).
_REFUSED = {"a$(b": "runs a command ($(...))", "$(id)": "runs a command ($(...))",
            "$HOME`id`": "runs a command (`...`)", "x${HOME": "has a ${...} other than",
            "${A:-$B}": "has a ${...} other than", "${#HOME}": "has a ${...} other than",
            "$[1]": "has bash's $[...] arithmetic", "a$[": "has bash's $[...] arithmetic",
            "${X:-'}": "has a ${...} other than", "${X-a'b}": "has a ${...} other than",
            "a\0b": "holds a NUL", "x" * (128 * 1024 - 2): "Linux passes no environment variable of 128 KiB"}


@pytest.mark.parametrize("shell", SHELLS)
def test_an_activation_env_value_reaches_the_shell_as_written_its_variables_expanded(shell: str) -> None:
    from rocmlock.image.activation import _export

    if shutil.which(shell) is None:
        if in_ci():
            pytest.fail(f"{shell} is not installed (.ci/run installs it)")
        pytest.skip(f"{shell} is not installed")
    home = "/home/someone"
    for value in _VALUES:
        line = _export("A", value, "[activation.env] A")
        run = subprocess.run([shell, "-c", f'{line}\nprintf %s "$A"'], capture_output=True, text=True,
                             env={"HOME": home, "PATH": "/usr/bin:/bin"}, check=False)
        assert run.returncode == 0 and not run.stderr, (value, line, run.stderr)
        expected = value.replace("${HOME}", home).replace("$HOME", home) if "$" in value else value
        assert run.stdout == expected, (value, line)
    # The braced forms with a default are honoured, and expanded by the shell.
    line = _export("A", "${NOPE:-/opt/rocm}:${HOME:+set}", "[activation.env] A")
    run = subprocess.run([shell, "-c", f'{line}\nprintf %s "$A"'], capture_output=True, text=True,
                         env={"HOME": home, "PATH": "/usr/bin:/bin"}, check=False)
    assert (run.returncode, run.stdout, run.stderr) == (0, "/opt/rocm:set", "")


@pytest.mark.parametrize("shell", SHELLS)
def test_an_activation_env_value_a_shell_would_run_or_not_parse_is_refused(shell: str) -> None:
    from rocmlock.errors import InputError
    from rocmlock.image.activation import _export

    _shell(shell)
    for value, says in _REFUSED.items():
        with pytest.raises(InputError) as caught:
            _export("A", value, "[activation.env] A")
        assert str(caught.value).startswith("[activation.env] A: the value of A ") and says in str(caught.value), \
            value[:40]
    assert _export("A", "x" * (128 * 1024 - 3), "w").startswith("export A=")  # A=...NUL: exactly the limit
