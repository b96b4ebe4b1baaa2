"""Point one loaded library's BLAS calls at another library, leaving every other library's calls alone.

MLX's ``libmlx.so`` calls BLAS and LAPACK through its GOT (one slot per imported function, filled by the dynamic
linker with the bundled reference BLAS/LAPACK). Loading an optimized BLAS with ``RTLD_GLOBAL`` before MLX would make
the linker fill them from it, but it would also put the library in the process's global scope, where torch's
``libtorch_cpu.so`` (which exports and calls its own ``sgemm_``, interposable) binds to it too: torch then runs on
that BLAS, with its own thread pool fighting torch's OpenMP one (2-8x slower forwards). So Porter loads the BLAS
*locally* and writes its function addresses into libmlx's GOT slots for exactly the functions libmlx takes from its
bundled BLAS/LAPACK: MLX gets the fast BLAS, whatever the import order, and nothing else in the process sees it.

Linux only (ELF, ``/proc/self/maps``, ``dladdr``); a GOT slot is one aligned pointer, so the write is atomic.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Iterable

from porter import _elf

PROT_READ, PROT_WRITE = 0x1, 0x2
RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 0x4)
BLAS_NAMES = re.compile(r"^lib(open)?(c)?(blas|lapack)")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def library_of(address: int) -> str | None:
    """The file of the loaded object that contains ``address`` (``dladdr``), or None."""
    info = _DlInfo()
    if not address or not _libc().dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode(errors="replace")


def mappings() -> list[tuple[int, int, str, int, str]]:
    """This process's mappings: (start, end, permissions, file offset, path)."""
    out = []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            out.append((lo, hi, parts[1], int(parts[2], 16), parts[5].strip()))
    return out


def loaded_path(name: str) -> str | None:
    """The path of a loaded library, by its path or file name (``libmlx.so``), or None if it is not loaded."""
    for _, _, _, _, path in mappings():
        if path and (path == name or os.path.basename(path) == name):
            return path
    return None


def load_base(path: str) -> int | None:
    """The load address of a loaded shared library (its mapping at file offset 0)."""
    real = os.path.realpath(path)
    for lo, _, _, offset, mapped in mappings():
        if offset == 0 and mapped and os.path.realpath(mapped) == real:
            return lo
    return None


def slot_values(path: str, symbol: str) -> list[int]:
    """The addresses ``path``'s GOT slots for ``symbol`` hold now (empty if it does not import it or is not
    loaded)."""
    base = load_base(path)
    if base is None:
        return []
    return [ctypes.c_void_p.from_address(base + off).value or 0 for off in _elf.got_slots(path).get(symbol, ())]


def provider(path: str, symbol: str) -> str | None:
    """The library whose ``symbol`` the loaded library ``path`` calls: what its GOT says, so what really runs."""
    values = slot_values(path, symbol)
    return library_of(values[0]) if values else None


def bundled_blas(path: str) -> list[str]:
    """The loaded paths of the BLAS/LAPACK libraries ``path`` links against (``DT_NEEDED`` names such as
    auditwheel's ``libblas-bd8a282c.so.3.10.0``)."""
    found = (loaded_path(name) for name in _elf.needed(path) if BLAS_NAMES.match(name))
    return [p for p in found if p is not None]


def _defined_in(handle, path: str, symbol: str) -> int | None:
    """The address of ``symbol`` as ``handle`` resolves it, if the definition is in the file ``path`` itself (not in
    one of its dependencies, such as libc)."""
    try:
        address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value
    except AttributeError:
        return None
    where = library_of(address)
    return address if where is not None and os.path.realpath(where) == os.path.realpath(path) else None


def _writable(lo: int, hi: int):
    """Pages [lo, hi) made writable for the duration; their protection restored after."""
    page = os.sysconf("SC_PAGE_SIZE")
    start, stop = lo - lo % page, hi + (-hi) % page
    restore = []
    for m_lo, m_hi, perms, _, _ in mappings():
        if m_lo < stop and m_hi > start and "w" not in perms:
            a, b = max(m_lo, start), min(m_hi, stop)
            prot = (PROT_READ if "r" in perms else 0) | (0x4 if "x" in perms else 0)
            restore.append((a, b - a, prot))
    libc = _libc()
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for a, n, prot in restore:
        if libc.mprotect(ctypes.c_void_p(a), n, prot | PROT_WRITE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed on the GOT")
    return restore, libc


def rebind(path: str, provider_handle, provider_path: str, owners: Iterable[str], prefix: str = "") -> int:
    """Write the provider's address of every function that ``path`` imports from one of ``owners`` (loaded library
    paths) into ``path``'s GOT slots, where the provider (``provider_handle``, loaded from ``provider_path``) defines
    it as ``prefix + name`` (scipy-openblas: ``scipy_cblas_sgemm``); returns how many functions were rebound.
    ``path`` must be loaded."""
    base = load_base(path)
    if base is None:
        raise OSError(f"{path} is not loaded")
    owners = [(ctypes.CDLL(o, mode=RTLD_NOLOAD | os.RTLD_LAZY), o) for o in owners]
    plan = []
    for symbol, offsets in _elf.got_slots(path).items():
        if not any(_defined_in(h, o, symbol) for h, o in owners):
            continue
        target = _defined_in(provider_handle, provider_path, prefix + symbol)
        if target:
            plan += [(base + off, target) for off in offsets]
    if not plan:
        return 0
    restore, libc = _writable(min(a for a, _ in plan), max(a for a, _ in plan) + 8)
    try:
        for slot, target in plan:
            ctypes.c_void_p.from_address(slot).value = target
    finally:
        for a, n, prot in restore:
            libc.mprotect(ctypes.c_void_p(a), n, prot)
    return len({t for _, t in plan})
