"""conda-lock.yml's direct YAML writer (rocmlock.util.yamlwrite, issue 40) against PyYAML's ``safe_dump``: the same
bytes for every string, key or value, whichever way PyYAML would write it (plain, quoted, folded, explicit key)."""

from __future__ import annotations

import random
from typing import Any

import yaml
from rocmlock.util.yamlwrite import render_yaml

# the characters PyYAML's scalar analysis looks at, and a few it does not
ALPHABET = list("aZ09_.-+*=<>!~^@%,:;#?&|'\"`[]{}()/\\ ") + ["\t", "\u00e9", "\n", "\x85", "\u2028"]
SPECIAL = ["", " ", "-", "- a", "? a", ": a", "a:", "a: b", "a #b", "a#b", "---", "...x", "~", "null", "on", "no",
           "y", "1.0", "1e3", "0x1F", "1:20", "2024-01-01", "=", "<<", ".inf", "12", "+1", "'", "''", "a'b", "*a",
           "&a", "!a", "%a", "@a", "`a", ">=1.0,<2", "* gfx942", "2!0.1", "x" * 801, "x " * 450, "k" * 128]


def _dump(data: dict[str, Any]) -> str:
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000))


def _doc(value: str, key: str) -> dict[str, Any]:
    # conda-lock.yml's shapes: top-level scalars, nested mappings, a list of mappings, a list of strings,
    # empty lists and mappings, ints and bools
    return {"version": 1, "metadata": {"content_hash": {key: value}, "channels": [{"url": value, "used_env_vars": []}],
                                       "platforms": [value, "linux-64"], "sources": [], "custom_metadata": {}},
            "package": [{"name": value, "dependencies": {key: value, "python": ">=3.12"}, "optional": False,
                         "hash": {"md5": value}}, {"name": "x", "dependencies": {}}]}


def test_every_kind_of_string_is_written_as_pyyaml_writes_it() -> None:
    rng = random.Random(40)
    strings = SPECIAL + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))) for _ in range(1200)]
    for text in strings:
        for key in (text, "k"):
            doc = _doc(text, key)
            assert render_yaml(doc) == _dump(doc), (text, key)


def test_long_lists_and_values_of_a_real_lock_shape() -> None:
    doc = {"version": 1, "package": [{"name": f"p{i}", "version": f"1.{i}", "build": "h0_0", "manager": "conda",
                                      "dependencies": {f"d{j}": f">={j}.0" for j in range(i % 7)}, "optional": False}
                                     for i in range(50)]}
    assert render_yaml(doc) == _dump(doc)


def test_a_list_item_is_its_lines_of_the_document_and_none_where_pyyaml_decides() -> None:
    from rocmlock.util.yamlwrite import render_item

    items = [{"name": "a", "dependencies": {"b": ">=1", "on": ""}, "hash": {"md5": "0" * 32}, "optional": False},
             {"name": "c", "dependencies": {}, "url": "https://x.example/c-1.0-0.conda"}]
    parts = [render_item(i) for i in items]
    assert render_yaml({"version": 1}) + "package:\n" + "".join(p or "" for p in parts) == \
        _dump({"version": 1, "package": items})
    assert render_item({"name": "caf\u00e9"}) is None and render_item({"name": "x" * 900}) is None
