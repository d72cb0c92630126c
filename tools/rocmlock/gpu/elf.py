"""The SONAME and NEEDED entries of an ELF shared library, with the standard library only.

doctor asks which HIP runtime a MAGMA library links (``libamdhip64.so.6`` is ROCm 6's, ``.so.7`` ROCm 7's), and
``recipes/rocm-build-env.sh`` runs this file as a script for the same answer inside a build, where rocmlock itself is
not installed: ``python elf.py FILE`` prints ``soname <name>`` and one ``needed <name>`` line per entry.
Libraries of this size (a ROCm MAGMA is over 1 GB) are mapped, not read.
"""

from __future__ import annotations

import mmap
import struct
import sys
from pathlib import Path
from typing import NamedTuple

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14


class ElfError(Exception):
    """The file is not a 64-bit little-endian ELF with a dynamic section."""


class Dynamic(NamedTuple):
    soname: str | None
    needed: tuple[str, ...]


def _segments(data: mmap.mmap) -> list[tuple[int, int, int, int]]:
    """(type, file offset, virtual address, file size) of every program header."""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        out.append((p_type, offset, vaddr, filesz))
    return out


def _string(data: mmap.mmap, offset: int) -> str:
    end = data.find(b"\0", offset)
    if end < 0:
        raise ElfError("truncated or damaged ELF file (a string of its dynamic section runs past its end)")
    return data[offset:end].decode("utf-8", "replace")


def read_dynamic(path: str | Path) -> Dynamic:
    """The DT_SONAME and DT_NEEDED strings of ``path`` (symlinks followed); ElfError when it has none to read."""
    with open(path, "rb") as f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file
            raise ElfError(f"{path}: not an ELF file") from exc
    with data:
        if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
            raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
        try:
            return _dynamic(data)
        except ElfError as exc:
            raise ElfError(f"{path}: {exc}") from None
        except struct.error:  # a header or entry past the end of the file: cut off (an interrupted copy) or damaged
            raise ElfError(f"{path}: truncated or damaged ELF file (its headers point past its end)") from None


def _dynamic(data: mmap.mmap) -> Dynamic:
    segments = _segments(data)
    dynamic = next(((off, size) for typ, off, _va, size in segments if typ == _PT_DYNAMIC), None)
    if dynamic is None:
        raise ElfError("no dynamic section (a static library or executable)")
    entries: list[tuple[int, int]] = []
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab_va = next((v for t, v in entries if t == _DT_STRTAB), None)
    # DT_STRTAB is an address: the PT_LOAD segment holding it says where that is in the file.
    load = next(((off, va) for typ, off, va, size in segments
                 if typ == _PT_LOAD and strtab_va is not None and va <= strtab_va < va + size), None)
    if strtab_va is None or load is None:
        raise ElfError("no string table for its dynamic section")
    strtab = strtab_va - load[1] + load[0]
    soname = next((_string(data, strtab + v) for t, v in entries if t == _DT_SONAME), None)
    return Dynamic(soname, tuple(_string(data, strtab + v) for t, v in entries if t == _DT_NEEDED))


def main(argv: list[str]) -> int:
    """``elf.py FILE``: ``soname``/``needed`` lines on stdout; a one-line error and exit 1 when unreadable."""
    if len(argv) != 1:
        print("usage: elf.py FILE", file=sys.stderr)
        return 2
    try:
        dyn = read_dynamic(argv[0])
    except (OSError, ElfError) as exc:
        print(f"elf.py: {exc}", file=sys.stderr)
        return 1
    if dyn.soname:
        print(f"soname {dyn.soname}")
    for name in dyn.needed:
        print(f"needed {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
