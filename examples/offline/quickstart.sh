#!/usr/bin/env bash
# The README's Quickstart, command 1: build -> publish -> serve (basic auth) -> lock -> export -> install -> probe,
# all offline on this machine. Needs Python >= 3.11. Which rocmlock it runs, said on stderr:
#  1. $PYTHON when set (rocmlock installed into it if missing, as in 3);
#  2. else an installed `rocmlock` command (`pipx install .`, `pip install .`): the python its script runs;
#  3. else the first python on PATH, when it imports rocmlock; when it does not, rocmlock is installed
#     (pip install -e .): into that python, or, when it is externally managed (PEP 668: an EXTERNALLY-MANAGED
#     file in its stdlib directory, as Debian's and Ubuntu's system python have, where pip refuses), into a
#     venv of the quickstart's own, .rocmlock/quickstart-venv (ROCMLOCK_QUICKSTART_VENV=DIR names another),
#     made once and reused.
# Arguments go to quickstart.py (--workdir DIR keeps the channel, lock and environment; --json prints a summary).
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { echo "quickstart: $*" >&2; }
# rocmlock and the packages quickstart.py imports beside it (a PYTHONPATH may lend rocmlock alone).
has_rocmlock() { [ -x "$1" ] && "$1" -c 'import rocmlock, rattler, rattler_build' >/dev/null 2>&1; }
# PEP 668's marker, as pip reads it: never inside a venv.
externally_managed() {
    "$1" -c 'import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.isfile(marker) else 1)'
}
# The python a console script runs: its #! line, or, under `#!/bin/sh`, the `'''exec' PYTHON "$0" "$@"` line
# pip writes when that python's path is too long for #!.
script_python() {
    local first second
    IFS= read -r first < "$1" || return 1
    case "$first" in
        '#!/bin/sh'*)
            second=$(sed -n 2p "$1")
            case "$second" in "'''exec' "*) ;; *) return 1 ;; esac
            second=${second#"'''exec' "}; second=${second%% \"\$0\"*}; second=${second#\"}; second=${second%\"}
            printf '%s\n' "$second" ;;
        '#!'*) first=${first#\#!}; printf '%s\n' "${first%% *}" ;;
        *) return 1 ;;
    esac
}

if [ -n "${PYTHON:-}" ]; then
    say "python: \$PYTHON, $PYTHON"
elif command=$(command -v rocmlock) && PYTHON=$(script_python "$command") && has_rocmlock "$PYTHON"; then
    say "rocmlock: the installed command $command (its python: $PYTHON)"
    exec "$PYTHON" examples/offline/quickstart.py "$@"
else
    PYTHON=$(command -v python || command -v python3 || true)
    if [ -z "$PYTHON" ]; then
        say "error: no python or python3 on PATH: install Python >= 3.11, or set PYTHON=/path/to/python3"
        exit 1
    fi
    say "python: the first on PATH, $PYTHON"
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    say "error: $PYTHON is not Python >= 3.11 ($("$PYTHON" -V 2>&1 || true)): set PYTHON=/path/to/python3.11 or newer"
    exit 1
fi
# --help installs nothing: quickstart.py reads its arguments before it imports anything but the standard library.
for arg in "$@"; do
    case "$arg" in -h|--help) exec "$PYTHON" examples/offline/quickstart.py --help ;; esac
done
if has_rocmlock "$PYTHON"; then
    say "rocmlock: imported by $PYTHON"
elif externally_managed "$PYTHON"; then
    VENV="${ROCMLOCK_QUICKSTART_VENV:-.rocmlock/quickstart-venv}"
    if has_rocmlock "$VENV/bin/python"; then
        say "rocmlock: the quickstart's venv $VENV ($PYTHON is externally managed, PEP 668)"
    else
        say "rocmlock: $PYTHON is externally managed (PEP 668: pip may not install into it): making a venv" \
            "for rocmlock at $VENV (pip install -e .; once, reused by the next run)"
        "$PYTHON" -m venv "$VENV" || {
            say "error: $PYTHON -m venv failed: install the venv module (Debian/Ubuntu: apt-get install" \
                "python3-venv), or install rocmlock with pipx install . and run this again"
            exit 1
        }
        "$VENV/bin/python" -m pip install -q -e .
    fi
    PYTHON="$VENV/bin/python"
else
    say "rocmlock: not importable by $PYTHON: installing it there (pip install -e .)"
    "$PYTHON" -m pip install -q -e .
fi
exec "$PYTHON" examples/offline/quickstart.py "$@"
