"""ROCm releases newer than the build matrix (``rocmlock outdated``'s ROCm line).

ROCm is no PyPI project rocmlock can ask: PyPI's ``rocm`` and ``rocm-sdk-core`` are 0.1.0 placeholders, and AMD
serves the real ``rocm-sdk-*`` wheels from its own index. Since 7.14 ROCm is built by ROCm/TheRock, which tags each
release line ``therock-<major>.<minor>[.<patch>]`` (its git history: therock-7.9.0, therock-7.10 ... therock-7.14),
so the releases come from that repository's tags through GitHub's REST API (``GET /repos/{owner}/{repo}/tags``,
paged with the ``Link`` header). Their answer is read as hostile: anything but a list of objects with a string
``name`` is an error of this line only, and a tag that does not look like a release is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rocmlock.errors import OperationError
from rocmlock.upstream.client import Client, Unreachable

REPO = "ROCm/TheRock"
TAG = re.compile(r"therock-([0-9]+)\.([0-9]+)(?:\.[0-9]+)?")
UNREACHABLE = "unknown (unreachable)"


def _series(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True)
class RocmLine:
    """The ROCm series of the matrix (variants.yaml's rocm_version) and those ROCm/TheRock has released."""

    matrix: tuple[str, ...]
    released: tuple[str, ...] = ()
    error: str | None = None

    @property
    def newer(self) -> tuple[str, ...]:
        """The released series above every one of the matrix, oldest first."""
        top = max((_series(v) for v in self.matrix), default=())
        return tuple(s for s in self.released if _series(s) > top)

    def to_json(self) -> dict[str, Any]:
        return {"matrix": list(self.matrix), "released": list(self.released), "newer": list(self.newer),
                "source": f"github.com/{REPO} tags", "error": self.error}

    def render(self) -> str:
        where = "ROCm/TheRock's tags"
        if self.error:
            return f"rocm: matrix {', '.join(self.matrix)}; newer releases {self.error} ({where})"
        if not self.newer:
            return f"rocm: matrix {', '.join(self.matrix)}; no newer release ({where})"
        return (f"rocm: matrix {', '.join(self.matrix)}; newer releases {', '.join(self.newer)} ({where}): add them "
                "to rocm_version in recipes/variants.yaml once their pins are known")


def released_series(names: Sequence[str]) -> tuple[str, ...]:
    """The ROCm major.minor series the tag ``names`` release, oldest first, each once."""
    found = {f"{m[1]}.{m[2]}" for name in names if (m := TAG.fullmatch(name))}
    return tuple(sorted(found, key=_series))


def rocm_line(matrix: Sequence[str], client: Client) -> RocmLine:
    """The ROCm line of the report: never raises; an unreachable GitHub or a bad answer is its ``error``."""
    try:
        names = client.github_tags(REPO)
    except Unreachable:
        return RocmLine(tuple(matrix), error=UNREACHABLE)
    except OperationError as exc:
        return RocmLine(tuple(matrix), error=f"unknown ({str(exc).splitlines()[0]})")
    return RocmLine(tuple(matrix), released_series(names))
