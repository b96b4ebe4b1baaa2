"""Just enough ELF reading to see how a loaded shared library is linked: the libraries it names (``DT_NEEDED``) and
the GOT slots through which it calls the functions it imports.

Used by :mod:`porter._bind` to point MLX's BLAS calls at an optimized library without putting that library in the
process's global symbol scope (where torch would pick it up too). 64-bit little-endian ELF only (x86-64, aarch64);
anything else reads as "nothing found". Read from the file, never from memory.
"""

from __future__ import annotations

import functools
import struct

import numpy as np

SHT_DYNSYM, SHT_RELA, SHT_DYNAMIC = 11, 4, 6
DT_NEEDED = 1
# relocation types that fill a GOT slot with a symbol's address: (JUMP_SLOT, GLOB_DAT) per machine
GOT_RELOCS = {62: (7, 6), 183: (1026, 1025)}  # EM_X86_64, EM_AARCH64

_RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])


def _sections(f) -> tuple[int, list[tuple]]:
    """(machine, [(type, offset, size, link), ...]) of a 64-bit little-endian ELF file; (0, []) otherwise."""
    head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return 0, []
    machine, = struct.unpack_from("<H", head, 0x12)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    if not shoff or shentsize < 64:
        return machine, []
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    out = []
    for i in range(shnum):
        _, kind, _, _, offset, size, link = struct.unpack_from("<IIQQQQI", table, i * shentsize)
        out.append((kind, offset, size, link))
    return machine, out


def _read(f, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def _string(table: bytes, at: int) -> str:
    return table[at:table.find(b"\0", at)].decode(errors="replace")


@functools.lru_cache(maxsize=8)
def needed(path: str) -> tuple[str, ...]:
    """The ``DT_NEEDED`` names of a shared library, in link order."""
    with open(path, "rb") as f:
        _, sections = _sections(f)
        for kind, offset, size, link in sections:
            if kind == SHT_DYNAMIC and link < len(sections):
                entries = np.frombuffer(_read(f, offset, size), dtype="<i8").reshape(-1, 2)
                strtab = _read(f, sections[link][1], sections[link][2])
                return tuple(_string(strtab, int(v)) for tag, v in entries if tag == DT_NEEDED)
    return ()


@functools.lru_cache(maxsize=8)
def got_slots(path: str) -> dict[str, tuple[int, ...]]:
    """Function name -> the GOT slots (offsets from the library's load address) that hold its address: the
    ``JUMP_SLOT`` and ``GLOB_DAT`` relocations against dynamic symbols, imported ones and the library's own
    interposable ones (torch's ``sgemm_``) alike: the dynamic linker decides where each slot points."""
    slots: dict[str, list[int]] = {}
    with open(path, "rb") as f:
        machine, sections = _sections(f)
        if machine not in GOT_RELOCS:
            return {}
        for kind, offset, size, link in sections:
            if kind != SHT_RELA or link >= len(sections) or sections[link][0] != SHT_DYNSYM:
                continue
            relocs = np.frombuffer(_read(f, offset, size), dtype=_RELA)
            types = relocs["info"] & 0xFFFFFFFF
            relocs = relocs[np.isin(types, GOT_RELOCS[machine])]
            if not len(relocs):
                continue
            _, sym_off, sym_size, str_link = sections[link]
            symbols = np.frombuffer(_read(f, sym_off, sym_size), dtype=_SYM)
            strtab = _read(f, sections[str_link][1], sections[str_link][2])
            for where, info in zip(relocs["offset"].tolist(), (relocs["info"] >> 32).tolist()):
                if info:
                    slots.setdefault(_string(strtab, int(symbols[info]["name"])), []).append(where)
    return {name: tuple(offsets) for name, offsets in slots.items()}
