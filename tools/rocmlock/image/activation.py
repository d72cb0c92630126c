"""The activation script of ``rocmlock image``: what ``pixi shell-hook -s bash`` prints for the environment, made
for the image's prefix at build time and sourced at run time by the image's entrypoint and check.

rattler_shell ``Activator::activation`` (crates/rattler_shell/src/activation.rs), as pixi's ``get_activator``
(crates/pixi_core/src/activation.rs) sets it up, in this order:
1. ``PATH`` with ``<prefix>/bin`` first, ``CONDA_SHLVL``, ``CONDA_PREFIX``;
2. the prefix's variables: ``etc/conda/env_vars.d/*.json`` (sorted by name) and ``conda-meta/state``'s
   ``env_vars``, then pixi's own (``CONDA_DEFAULT_ENV``, ``PIXI_ENVIRONMENT_NAME``, ...);
3. ``. <script>`` for every ``etc/conda/activate.d/*.sh`` (sorted; bash runs only ``.sh``), then the
   workspace's ``[activation.scripts]``;
4. the workspace's ``[activation.env]`` (after the scripts, so they win).
A value with ``$`` in it is written in double quotes (expanded when sourced), any other shell-quoted (rattler_shell
shell/mod.rs, ``Bash::set_env_var``). There the shell reads ``$NAME``, ``${NAME}`` and ``${NAME:-word}`` (and
``-``, ``+``, ``=``, ``?``, with or without ``:``), which are honoured. Refused: a command substitution
(`` `...` ``, ``$(...)``, and bash's ``$[...]`` arithmetic, which runs what backticks in a variable it reads say),
which pixi's bash would run and an unbalanced one of which (``a$(b``) leaves the script unparsable so that no
command starts in the container; any other ``${...}`` (``x${HOME`` is unparsable too); a NUL (no environment
string holds one); a variable of 128 KiB or more (Linux's MAX_ARG_STRLEN: every exec would fail with "Argument
list too long"). The scripts run when the container starts, not when the image is built: the
ROCm an ``activate.d`` script looks for is the container's (its base image's, or one mounted into it).

Differences, each on purpose: pixi's variables that name the building machine (``PIXI_PROJECT_ROOT``,
``PIXI_PROJECT_MANIFEST``, ``PIXI_EXE``) or a pixi shell (``PIXI_IN_SHELL``, ``PIXI_PROMPT``) are not set; the
workspace's scripts are copied into the image (under ``/opt/rocmlock/activation/``) since the workspace is not
there; a second sourcing in one process tree does nothing (``ROCMLOCK_ACTIVATED``). Anything that cannot be
honoured is refused with one line: a missing or non-``.sh`` workspace script, a variable name no shell can set, a
non-string value in an ``env_vars.d`` file.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rocmlock.errors import InputError
from rocmlock.util.fs import read_regular
from rocmlock.workspace.activation import EnvironmentActivation

ACTIVATION_DIR = "opt/rocmlock/activation"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # rattler_shell validate_env_var_name, for a POSIX shell
_SCRIPT_LIMIT = 1 << 20
_BRACED = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-+=?][^{}$`\"'\\]*)?\}")
_ARG_STRLEN = 32 * 4096  # MAX_ARG_STRLEN (include/uapi/linux/binfmts.h): one "NAME=value" string, NUL included
_BRACED_HINT = "write $NAME, ${NAME} or ${NAME:-default} (a default without $, quotes, backslashes or braces)"
_NO_COMMANDS = "the image's activation sets variables and runs no commands: put commands in a script of " \
    "[activation.scripts]"


def _value_problem(value: str) -> tuple[str, str] | None:
    """(what is wrong, hint) for a value the activation script cannot set as written, else None."""
    if "\0" in value:
        return "holds a NUL, which no environment variable can", "remove it"
    if "$" not in value:
        return None
    if "`" in value:
        return "runs a command (`...`)", _NO_COMMANDS
    at = value.find("$")
    while at != -1:
        following = value[at + 1:at + 2]
        if following == "(":
            return "runs a command ($(...))", _NO_COMMANDS
        if following == "[":  # bash's old arithmetic: it expands `...` in the variables it reads
            return "has bash's $[...] arithmetic, which can run a command", _NO_COMMANDS
        end = at + 1
        if following == "{":
            braced = _BRACED.match(value, at)
            if braced is None:
                return "has a ${...} other than ${NAME} or ${NAME:-default}", _BRACED_HINT
            end = braced.end()
        at = value.find("$", end)
    return None


@dataclass(frozen=True)
class ImageActivation:
    """The activation script's text and the workspace scripts it sources (path in the image, bytes)."""

    script: str
    files: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ActivationInputs:
    """What the activation is made of: the installed prefix (read now) and where it lives in the image."""

    staged_prefix: Path
    prefix: str
    environment: str
    project: str
    platforms: tuple[str, ...]
    workspace_root: Path
    workspace: EnvironmentActivation


def _export(name: str, value: str, where: str) -> str:
    if not _NAME.fullmatch(name):
        raise InputError(f"{where}: '{name[:80]}' is not an environment variable name a shell can set",
                         hint="use letters, digits and '_', not starting with a digit")
    problem = _value_problem(value)
    if problem is not None:
        raise InputError(f"{where}: the value of {name} {problem[0]}", hint=problem[1])
    if len(name.encode()) + len(value.encode("utf-8", "surrogateescape")) + 2 > _ARG_STRLEN:
        raise InputError(f"{where}: the value of {name} is {len(value.encode('utf-8', 'surrogateescape'))} bytes; "
                         "Linux passes no environment variable of 128 KiB or more to a program",
                         hint="shorten it (a long list belongs in a file the variable names)")
    if "$" in value:
        # Expanded by the shell, as pixi's shell-hook leaves a value with a "$" (rattler_shell's Bash::set_env_var,
        # crates/rattler_shell/src/shell/mod.rs). Its bash path escapes only '"', so a value ending in a backslash
        # or holding '\"' ends the string early (the script does not parse); escaped as rattler's zsh and fish
        # writers do (escape_double_quoted: backslashes first, then double quotes).
        return f'export {name}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
    return f"export {name}={shlex.quote(value)}"


def _prefix_variables(staged: Path) -> list[tuple[str, str, str]]:
    """(name, value, file) of ``env_vars.d/*.json`` (sorted) then ``conda-meta/state``; later files win."""
    files = sorted((staged / "etc/conda/env_vars.d").glob("*")) if (staged / "etc/conda/env_vars.d").is_dir() else []
    out: list[tuple[str, str, str]] = []
    for path, table_key in [*((f, None) for f in files if f.is_file()), (staged / "conda-meta/state", "env_vars")]:
        if not path.is_file():
            continue
        where = str(path.relative_to(staged))
        try:
            data = json.loads(read_regular(path, _SCRIPT_LIMIT, f"{where}: not a JSON file"))
        except ValueError:
            raise InputError(f"{where} of the environment is not JSON", hint="the package that installs it is broken") \
                from None
        table = data.get(table_key) if table_key and isinstance(data, dict) else data
        if not isinstance(table, dict):
            raise InputError(f"{where} of the environment is not a JSON object of variables",
                             hint="the package that installs it is broken")
        for name, value in table.items():
            if not isinstance(value, str):
                raise InputError(f"{where} of the environment: variable '{name}' is not a string",
                                 hint="the package that installs it is broken; a shell variable is a string")
            out.append((name.upper() if table_key else name, value, where))
    return out


def _workspace_script(root: Path, rel: str, index: int) -> tuple[str, bytes]:
    where = f"[activation.scripts] '{rel}'"
    if PurePosixPath(rel).suffix not in (".sh", ".bash"):
        raise InputError(f"{where}: not a shell script (.sh or .bash), which a Linux image cannot source",
                         hint="give Linux its own scripts under [target.linux.activation] or [target.unix.activation]")
    path = root / rel
    if not path.is_file():
        raise InputError(f"{where}: no such file in the workspace ({path})",
                         hint="create it or remove it from [activation] scripts (pixi only warns, the image refuses)")
    data = read_regular(path, _SCRIPT_LIMIT, f"{where}: not a regular file")
    return f"{ACTIVATION_DIR}/{index:02d}-{PurePosixPath(rel).name}", data


def render_activation(inputs: ActivationInputs) -> ImageActivation:
    """The activation script for the image (see the module)."""
    prefix = inputs.prefix
    lines = ["# The environment's activation, as `pixi shell-hook -s bash` makes it; written by rocmlock image.",
             f'if [ "${{ROCMLOCK_ACTIVATED:-}}" != {shlex.quote(prefix)} ]; then',
             f'case ":${{PATH:-}}:" in *:{prefix}/bin:*) ;; *) export PATH="{prefix}/bin${{PATH:+:$PATH}}" ;; esac',
             "export CONDA_SHLVL=1", _export("CONDA_PREFIX", prefix, "CONDA_PREFIX")]
    for name, value, where in _prefix_variables(inputs.staged_prefix):
        lines.append(_export(name, value, where))
    pixi_vars = {"PIXI_PROJECT_NAME": inputs.project, "CONDA_DEFAULT_ENV":
                 inputs.project if inputs.environment == "default" else f"{inputs.project}:{inputs.environment}",
                 "PIXI_ENVIRONMENT_NAME": inputs.environment, "PIXI_ENVIRONMENT_PLATFORMS": ",".join(inputs.platforms)}
    lines += [_export(k, v, k) for k, v in pixi_vars.items()]
    activate_d = inputs.staged_prefix / "etc/conda/activate.d"
    scripts = sorted(p.name for p in activate_d.iterdir() if p.suffix == ".sh" and p.is_file()) \
        if activate_d.is_dir() else []
    lines += [f". {shlex.quote(f'{prefix}/etc/conda/activate.d/{name}')}" for name in scripts]
    files = [_workspace_script(inputs.workspace_root, rel, i) for i, rel in enumerate(inputs.workspace.scripts)]
    lines += [f". {shlex.quote('/' + path)}" for path, _ in files]
    lines += [_export(k, v, f"[activation.env] {k}") for k, v in inputs.workspace.env]
    lines += [_export("ROCMLOCK_ACTIVATED", prefix, "ROCMLOCK_ACTIVATED"), "fi", ""]
    return ImageActivation("\n".join(lines), tuple(files))
