#!/usr/bin/env bash
# The README's Quickstart, command 1: build -> publish -> serve (basic auth) -> lock -> export -> install -> probe,
# all offline on this machine. Needs Python >= 3.11; installs rocmlock (pip install -e .) when it is missing.
# Arguments go to quickstart.py (--workdir DIR keeps the channel, lock and environment; --json prints a summary).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
if ! "$PYTHON" -c "import rocmlock" >/dev/null 2>&1; then
    echo "==> rocmlock is not importable: pip install -e ." >&2
    "$PYTHON" -m pip install -q -e .
fi
exec "$PYTHON" examples/offline/quickstart.py "$@"
