"""Round-trip YAML edits with ruamel.yaml: comments, key order, quoting, indentation and list positions stay
as they were, so the diff of an edit is exactly the changed values.

Used for recipes/variants.yaml (values at a position of zipped lists) and for a recipe's run
requirements. The structure is read generically: any key, any number of zip_keys groups.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from rocmlock.build.variantkeys import NO_RECIPES_HINT
from rocmlock.errors import InputError


@dataclass
class Document:
    """A YAML file loaded for round-trip editing (mutable on purpose: edits happen in place)."""

    path: Path
    data: Any
    yaml: YAML
    original: str

    def dump(self) -> str:
        """The document as text, byte for byte the original outside the edited values."""
        out = io.StringIO()
        self.yaml.dump(self.data, out)
        return out.getvalue()


# (mapping, sequence, offset) indentations tried in turn; the first that reproduces the file is kept.
_INDENTS = ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (4, 4, 0), (2, 4, 0))


def load(path: Path, text: str | None = None) -> Document:
    """Load ``path`` (or ``text`` standing for it) for round-trip editing.

    The indentation is the one of the file's own layouts that ruamel.yaml reproduces byte for byte; a
    file no layout reproduces is refused rather than reformatted.
    """
    if text is None:
        try:
            with path.open(newline="") as fh:  # as it is: read_text() turns CRLF into LF, which would be written back
                text = fh.read()
        except FileNotFoundError:
            raise InputError(f"{path}: not found", hint=NO_RECIPES_HINT) from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check its permissions") from None
    if "\r" in text:
        raise InputError(f"{path}: holds CR (Windows) line ends, which an edit would write back as LF everywhere",
                         hint="convert it to LF line ends (dos2unix, or git's core.autocrlf=input), then run again")
    for mapping, sequence, offset in _INDENTS:
        yaml = YAML()
        yaml.preserve_quotes = True
        yaml.width = 1 << 16  # never re-wrap a long line
        yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
        try:
            data = yaml.load(text)
        except YAMLError as exc:
            raise InputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})",
                             hint="fix the YAML at that line, or restore it from git") from None
        if not isinstance(data, CommentedMap):
            raise InputError(f"{path}: expected a mapping at the top level",
                             hint="restore recipes/variants.yaml from git")
        doc = Document(path, data, yaml, text)
        if doc.dump() == text:
            return doc
    raise InputError(
        f"{path}: cannot edit without reformatting the file (mixed indentation?)",
        hint="indent mappings by 2 and list items by '  - ' throughout, then retry",
    )


def values(doc: Document, key: str) -> list[str]:
    """The list under ``key`` (a scalar counts as a one-element list), as strings."""
    value = doc.data.get(key)
    if value is None:
        raise InputError(f"{doc.path}: key '{key}' is missing", hint="restore it from git or add it")
    if isinstance(value, CommentedSeq):
        return [str(v) for v in value]
    return [str(value)]


def zip_group(doc: Document, key: str) -> tuple[str, ...]:
    """The zip_keys group ``key`` belongs to (``(key,)`` when it is zipped with nothing)."""
    for group in doc.data.get("zip_keys") or ():
        if key in group:
            return tuple(str(k) for k in group)
    return (key,)


def set_value(doc: Document, key: str, position: int, value: str) -> bool:
    """Put ``value`` at ``position`` of ``key``'s list, quoted like the old value; True if it changed."""
    seq = doc.data.get(key)
    if isinstance(seq, CommentedSeq):
        old = seq[position]
        if str(old) == value:
            return False
        seq[position] = restyle(old, value)
        return True
    if str(seq) == value:
        return False
    doc.data[key] = restyle(seq, value)
    return True


def restyle(old: Any, value: str) -> Any:
    """``value`` quoted like ``old`` was (a plain scalar stays plain; ruamel quotes it if it must)."""
    if isinstance(old, DoubleQuotedScalarString):
        return DoubleQuotedScalarString(value)
    if isinstance(old, SingleQuotedScalarString):
        return SingleQuotedScalarString(value)
    return value
