"""``tomllib``, or on Python 3.10 ``tomli`` (the same API, and a dependency already: TOML 1.1 manifests).

rocmlock needs Python >= 3.11, but ``rocmlock unpack`` also runs on a node's 3.10 (Ubuntu 22.04's python3)
through a bundle's installer (``rocmlock pack --with-installer``), which ships tomli's wheel for it.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):  # noqa: UP036 - a node's 3.10 runs `rocmlock unpack` (see above)
    import tomllib
else:  # pragma: no cover - exercised by tests/test_pack.py's installer test on a 3.10
    import tomli as tomllib

__all__ = ["tomllib"]
