"""A minimal Debian base image for the image tests, made once with debootstrap and cached as an OCI layout.

``debootstrap --variant=minbase --include=python3 bookworm`` (the probe runs with the base's python3), made by
``rocmlock image --base debootstrap:bookworm:python3``'s code into ``~/.cache/rocmlock-tests/bases/`` (tag
``base``). A second session reuses it; a half-made one is never used (it is renamed into place when complete).
The mirror is ``ROCMLOCK_DEBIAN_MIRROR`` (as tests/rocm72/make-chroot.sh) or deb.debian.org.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REF = "debootstrap:bookworm:python3"
CACHE = Path(os.environ.get("ROCMLOCK_TEST_CACHE", Path.home() / ".cache" / "rocmlock-tests"))


class BaseUnavailable(Exception):
    """debootstrap, umoci or the mirror is missing: the tests that need the base say so."""


def missing_tools() -> list[str]:
    return [t for t in ("debootstrap", "umoci", "skopeo", "docker-registry") if shutil.which(t) is None
            and not Path(f"/usr/sbin/{t}").exists()]


def debian_base() -> Path:
    """The cached OCI layout directory of the Debian base (made now when absent); ``oci:<it>:base``.

    Made by rocmlock's own ``--base debootstrap:bookworm:python3`` (rocmlock.image.debianbase), so the tests'
    base is the one users get: a test that builds it twice is tests/test_image_run.py's."""
    from rocmlock.errors import RocmlockError
    from rocmlock.image.debianbase import debian_base as make

    if missing := missing_tools():
        raise BaseUnavailable(f"missing {', '.join(missing)} (apt-get install skopeo umoci docker-registry debootstrap)")
    try:
        return make(REF, "amd64", CACHE)
    except RocmlockError as exc:
        raise BaseUnavailable(f"{exc.message} ({exc.hint})") from None


def debian_base_for_tests() -> Path:
    """:func:`debian_base`, or the test skipped saying why; under CI a failure (.ci/run makes the base before the
    tests, so its absence there is a fault)."""
    import pytest
    from ciskips import in_ci

    try:
        return debian_base()
    except BaseUnavailable as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


if __name__ == "__main__":
    print(debian_base())
    sys.exit(0)
