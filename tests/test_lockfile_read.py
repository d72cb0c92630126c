"""Reading a pixi.lock's parts py-rattler 0.28 leaves to rocmlock (issue 29: what mutation testing left unjudged).

``_environment_options`` reads each environment's ``options:`` (channel-priority, solve-strategy, pypi-prerelease-mode:
what pixi records of how it solved, pixi_core/src/lock_file/update.rs), which py-rattler parses but does not
expose; ``redact_record`` takes credentials out of a record's URL and channel before anything is written. Both get
the shapes a hand-edited or an unusual lock has: an empty or null ``environments:`` block, an environment without
options, options written after a long ``packages:`` list, comments, top-level keys after the block; a secret in a
package URL whose channel is clean, and the other way round.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.lock.lockfile import _environment_options, redact_record

LOCK_HEAD = "version: 6\n"
PACKAGES = "packages:\n- conda: https://conda.example/linux-64/a-1.0-h0_0.conda\n  sha256: abc\n"


@pytest.mark.parametrize(("block", "options"), [
    ("environments:\n", {}),
    ("environments: {}\n", {}),
    ("environments: null\n", {}),
    ("environments:\n  default:\n    channels:\n    - url: https://conda.example/\n", {}),
    (("environments:\n  default:\n    channels:\n    - url: https://conda.example/\n    options:\n"
     "      channel-priority: disabled\n      solve-strategy: lowest\n"),
     {"default": {"channel-priority": "disabled", "solve-strategy": "lowest"}}),
    # options after a packages: list (skipped as bulk), a comment and a blank line inside the block
    (("environments:\n  gpu:\n    channels:\n    - url: https://conda.example/\n    packages:\n      linux-64:\n"
     "      - conda: https://conda.example/linux-64/a-1.0-h0_0.conda\n\n    # pixi writes none, a hand may\n"
     "    options:\n      pypi-prerelease-mode: allow\n  cpu:\n    options:\n      channel-priority: strict\n"),
     {"gpu": {"pypi-prerelease-mode": "allow"}, "cpu": {"channel-priority": "strict"}}),
])
def test_environment_options_are_read_from_every_shape_of_the_block(tmp_path: Path, block: str,
                                                                      options: dict[str, dict[str, str]]) -> None:
    lock = tmp_path / "pixi.lock"
    lock.write_text(LOCK_HEAD + block + PACKAGES, encoding="utf-8")
    assert _environment_options(lock) == options


def test_top_level_keys_outside_the_block_are_not_read_as_environments(tmp_path: Path) -> None:
    # A top-level `options:`-like mapping after the block (or before it) belongs to no environment.
    lock = tmp_path / "pixi.lock"
    lock.write_text(LOCK_HEAD + "other:\n  default:\n    options:\n      channel-priority: disabled\n"
                    "environments:\n  default:\n    options:\n      channel-priority: strict\n"
                    "more:\n  x:\n    options:\n      solve-strategy: lowest\n" + PACKAGES, encoding="utf-8")
    assert _environment_options(lock) == {"default": {"channel-priority": "strict"}}


def _record(url: str, channel: str) -> RepoDataRecord:
    record = PackageRecord("a", "1.0", BuildString("h0_0"), 0, "linux-64")
    return RepoDataRecord(record, "a-1.0-h0_0.conda", url, channel)


@pytest.mark.parametrize(("url", "channel"), [
    ("https://bob:pw-1@conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/rocm"),
    ("https://conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://bob:pw-1@conda.example/rocm"),
    ("https://conda.example/t/pw-1/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/t/pw-1/rocm"),
])
def test_redact_record_cleans_the_url_and_the_channel_each_on_its_own(url: str, channel: str) -> None:
    clean = redact_record(_record(url, channel))
    assert clean.url == "https://conda.example/rocm/linux-64/a-1.0-h0_0.conda"
    assert clean.channel == "https://conda.example/rocm"
    assert (clean.name.normalized, str(clean.version), str(clean.build), clean.file_name) == (
        "a", "1.0", "h0_0", "a-1.0-h0_0.conda")


def test_redact_record_returns_a_clean_record_as_it_is() -> None:
    record = _record("https://conda.example/rocm/linux-64/a-1.0-h0_0.conda", "https://conda.example/rocm")
    assert redact_record(record) is record
