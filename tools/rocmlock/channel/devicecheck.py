"""Publishing only packages whose GPU code is what their build string says (``rocm72_gfx942_...``: gfx942 only).

The build string is what every solver trusts (the ``amdgpu-target`` mutex and ``__amdgpu_arch`` hang on it); a
package built for the wrong GPU, or fat, would install cleanly and fail at run time with
``hipErrorNoBinaryForGpu``. ``rocmlock build`` checks each package it builds; this catches one built elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from rocmlock.errors import OperationError
from rocmlock.gpu.devicecode import build_string_of, build_string_target, package_identity


def check_device_code(packages: Iterable[tuple[str, Path]], log: Callable[[str], None]) -> None:
    """Refuse (OperationError naming the package) when a package whose build string names a GPU holds device code
    that cannot run on that GPU, or code for another GPU; ``packages`` are ``(subdir/file, path)``."""
    for key, path in packages:
        gfx = build_string_target(build_string_of(path.name))
        if gfx is None:
            continue
        found, problems = package_identity(path, gfx)
        if problems:
            more = f" (+{len(problems) - 1} more: `rocmlock audit {path}` lists them)" if problems[1:] else ""
            raise OperationError(f"{key}: its device code contradicts its build string ({gfx}): "
                                 f"{problems[0]}{more}; nothing was published",
                                 hint=f"rebuild it for {gfx} only, or remove it from {path.parent}")
        log(f"device code of {key}: {len(found)} file(s), all for {gfx}" if found else
            f"device code of {key}: none (nothing for {gfx} to contradict)")
