"""``rocmlock.util.jsonwrite.dumps_indented`` (issue 40) writes ``json.dumps(data, indent=2)``'s text: on generated
data (every JSON type, nesting, empty containers, strings with quotes, backslashes, control, non-ASCII and astral
characters), on the values it leaves to ``json.dumps`` (floats, int keys, an int subclass), and on the golden diff
of a lock."""

from __future__ import annotations

import enum
import json
import random
from pathlib import Path
from typing import Any

import pytest
from rocmlock.util.jsonwrite import dumps_indented

GOLDEN = Path(__file__).parent / "golden_lock"
_CHARS = "ab Z09-_.:/\"\\'\n\t\r\x00\x1f\x7f é€𝄞#*&{}[],"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 12)))


def _value(rng: random.Random, depth: int) -> Any:
    pick = rng.randint(0, 9 if depth < 4 else 4)
    if pick == 0:
        return _text(rng)
    if pick == 1:
        return rng.choice([0, 1, -1, 2**70, -(2**63), 4096, 1767225600000])
    if pick == 2:
        return rng.choice([True, False, None])
    if pick in (3, 4):
        return [_text(rng) for _ in range(rng.randint(0, 4))]
    if pick in (5, 6):
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if pick == 7:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


@pytest.mark.parametrize("seed", range(200))
def test_generated_data_is_written_as_json_dumps_writes_it(seed: int) -> None:
    data = _value(random.Random(seed), 0)
    assert dumps_indented(data) == json.dumps(data, indent=2)
    assert dumps_indented(data, indent=4) == json.dumps(data, indent=4)


class _Level(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize("data", [{"a": [1.5, float("inf")]}, {1: "x", "y": [2]}, [_Level.ONE], {"n": {None: 1}}])
def test_values_left_to_json_dumps_come_out_as_its_text(data: Any) -> None:
    assert dumps_indented(data) == json.dumps(data, indent=2)


def test_the_golden_lock_diff_is_written_byte_for_byte() -> None:
    for name in ("fresh-lock.json", "relock.json", "diff.json"):
        data = json.loads((GOLDEN / name).read_text())
        assert dumps_indented(data) == json.dumps(data, indent=2), name


def test_a_dict_shared_at_several_places_is_written_where_it_is_each_time() -> None:
    entry = {"conda": "https://x/linux-64/a-1-0.conda", "depends": ["b >=1", "c"], "size": 1}
    data = {"e1": {"p": [{"after": entry}, {"after": entry}]}, "e2": [entry, [entry]], "e3": entry}
    assert dumps_indented(data) == json.dumps(data, indent=2)
    changed = {**data, "e4": {**entry, "size": 2}}
    assert dumps_indented(changed) == json.dumps(changed, indent=2)
