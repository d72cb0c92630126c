"""pixi.lock's YAML read as rattler reads it, for the diff (issue 41 I and J).

rattler reads pixi.lock with a typed schema (rattler_lock's serde models): a value the schema types as a string is
that string, however it looks. PyYAML's ``safe_load`` resolves plain scalars by YAML 1.1 instead: ``license:
2024-01-01`` became a date (a TypeError in the JSON), ``1:20`` the integer 80, an environment named ``on`` the
boolean True. Here a mapping key is always its text; a plain value is null, a boolean or a decimal integer by
YAML 1.2's core schema (what rattler's writer leaves unquoted: ``size``, ``timestamp``, ``version: 7``), else
text, and always text under a key the schema types as a string (:data:`STRING_KEYS`). No dates, no base-60.

The parser is libyaml's where PyYAML has it (``yaml.CParser``; PyYAML's pure one otherwise); construction is a
plain walk of the nodes. Anchors and aliases are refused before anything is parsed (:func:`refuse_anchors`): pixi
and rattler never write them, and an alias expands to a copy in every reader that builds values (rattler's
serde_yaml included), so a 1.3 MB lock of 5000 packages aliasing one 5000-item list is 25 million items.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError

# Keys whose values (a scalar, or a list's items) rattler_lock's models type as strings (conda and PyPI package
# entries, platforms, environments): a plain `2024`, `true` or `1:20` there is that text.
STRING_KEYS = frozenset({
    "conda", "pypi", "name", "version", "build", "subdir", "noarch", "sha256", "md5", "legacy_bz2_md5", "license",
    "license_family", "channel", "channels", "arch", "platform", "features", "track_features", "depends",
    "constrains", "purls", "requires_dist", "requires_python", "url", "path", "python_site_packages_path",
    "extras", "file_name", "fn", "indexes", "find-links", "virtual_packages", "exclude-newer", "strategy",
    "channel-priority", "solve-strategy",
})
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_INT = re.compile(r"[-+]?[0-9]+")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def refuse_anchors(data: bytes | str, source: Path | str) -> None:
    """An InputError (exit 2) when the YAML ``data`` defines an anchor (so may hold an alias); ``source`` names it.

    A lock without ``&`` has no anchor, and an alias without one is no YAML (rattler refuses it): the common case
    costs one byte search. Otherwise libyaml's event stream (which never expands an alias) says whether a node
    carries an anchor or is an alias; an ``&`` in a string is no anchor."""
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    if "&" not in text:
        return
    try:
        import yaml
    except ImportError:  # the node-side rocmlock of `pack --with-installer`: an `&name` where a node may start
        found = _ANCHOR.search(text)
        if found:
            raise _anchor_error(source, text.count("\n", 0, found.start()) + 1)
        return
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise _anchor_error(source, event.start_mark.line + 1 if event.start_mark else 0)
    except yaml.YAMLError:
        return  # not YAML at all: the reader that follows says so, with its line and column


_ANCHOR = re.compile(r"(?:^|[\s\[{,])&[^\s,\[\]{}]")


def _anchor_error(source: Path | str, line: int) -> InputError:
    return InputError(f"{source}: line {line}: a YAML anchor or alias, which pixi and rattler never write (each "
                      "alias is a full copy for a reader); not a lock to read",
                      hint="restore the lock pixi or rocmlock wrote (`git checkout pixi.lock`), or run "
                           "`rocmlock lock --discard-lock`")


def _plain(key: str, value: str) -> Any:
    """A plain scalar under ``key``: YAML 1.2's core schema for null, booleans and decimal integers, except where
    the schema has a string."""
    if value in _NULL:
        return None
    if key in STRING_KEYS:
        return value
    if value in _BOOL:
        return _BOOL[value]
    return int(value) if _INT.fullmatch(value) else value


def _construct(node: Any, key: str = "") -> Any:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return _plain(key, node.value) if not node.style else node.value  # libyaml: '' for plain, PyYAML: None
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, key) for item in node.value]
    out: dict[str, Any] = {}
    for k, v in node.value:
        name = k.value if isinstance(k, yaml.ScalarNode) else str(_construct(k))
        out[name] = _construct(v, "lock-version" if key == _ROOT and name == "version" else name)  # the format's
    return out


_ROOT = "\0root"


def _loader(text: str) -> Any:
    """A loader of ``text`` that composes nodes and resolves no scalar (every one keeps the default str tag)."""
    import yaml
    from yaml.resolver import BaseResolver

    try:
        from yaml.cyaml import CParser  # type: ignore[attr-defined]
    except ImportError:  # PyYAML without libyaml
        pass
    else:
        class CLoader(CParser, BaseResolver):
            def __init__(self, stream: str) -> None:
                CParser.__init__(self, stream)
                BaseResolver.__init__(self)

        return CLoader(text)

    class PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                   BaseResolver):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            BaseResolver.__init__(self)

    return PyLoader(text)


def load_lock_yaml(text: str) -> Any:
    """The YAML document ``text`` as plain data (dicts, lists, strings; see the module docstring); raises
    ``yaml.YAMLError`` for text that is no YAML. Anchors must have been refused (:func:`refuse_anchors`)."""
    loader = _loader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    return None if node is None else _construct(node, _ROOT)
