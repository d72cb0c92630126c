#!/bin/sh
# rocm-env-check: run the rocmlock probe with this environment's python on this environment.
prefix=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
python="$prefix/bin/python"
[ -x "$python" ] || python=python3
exec "$python" "$prefix/share/rocm-env-check/verify_env.py" --prefix "$prefix" "$@"
