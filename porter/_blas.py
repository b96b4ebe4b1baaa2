"""Give MLX an optimized BLAS on Linux, chosen when :mod:`porter` is imported, without changing torch's.

The ``mlx[cpu]`` wheel for Linux ships the reference (netlib) BLAS, which makes every convolution and matmul tens of
times slower than torch. Porter loads an optimized BLAS *locally* (``RTLD_LOCAL``: not in the process's global symbol
scope) and points the GOT slots through which ``libmlx.so`` calls its bundled BLAS/LAPACK at it (see
:mod:`porter._bind`). Loading it globally before MLX, as Porter once did, also rebound torch's own interposable
``sgemm_`` to it and made torch's forward 2-8x slower; now torch keeps its BLAS whatever the import order, and MLX
gets the fast one even when ``mlx.core`` was imported before Porter.

Candidates, in this order (the first that is present, safe on this CPU and loads, wins):

1. ``PORTER_BLAS=/path/to/libblas.so``: an explicit library. ``PORTER_BLAS=none`` keeps MLX's bundled BLAS and
   disables everything below (silently).
2. The system's OpenBLAS (Debian/Ubuntu ``libopenblas0-pthread`` and friends, Fedora ``openblas``): an install the
   machine's owner chose, built for every x86-64 CPU (``DYNAMIC_ARCH``) and for any thread count.
3. ``cmeel-openblas`` installed by pip in this environment (``pip install 'porter-mlx[fast-cpu]'``): an AVX-512
   build (at most 4 threads), the fastest pip build on CPUs that have AVX-512.
4. ``scipy-openblas32`` installed by pip (also in the ``fast-cpu`` extra): the OpenBLAS NumPy and SciPy ship, built
   for every CPU of its architecture (``DYNAMIC_ARCH``: AVX2 x86-64 such as AMD Zen, older Intel, aarch64). Its
   symbols carry a ``scipy_`` prefix (``scipy_cblas_sgemm``); MLX's calls are bound to the prefixed names.
5. MKL installed by pip or conda in this environment (``libmkl_rt``). Last on purpose: on an AMD Zen 3 (AVX2) the
   pip ``mkl==2026.2.0`` ran the sgemm shapes of ViT/ResNet-50/ConvNeXt 1.1-2x slower than scipy-openblas
   (``benchmarks/gemm.py``, 1 thread), and torch's own MKL is linked statically, out of Porter's reach.

"Safe on this CPU": an OpenBLAS built for one CPU family (not ``DYNAMIC_ARCH``) is loaded only if ``/proc/cpuinfo``
has the instruction sets that family needs; an AVX-512 build on a CPU without ``avx512f`` would die with SIGILL on
its first call. If nothing is found, MLX keeps its reference BLAS and a one-line warning says how to get the fast path.
On macOS MLX uses Accelerate and this module does nothing.

Idle BLAS threads sleep at once: OpenBLAS's workers otherwise busy-wait about 2**28 cycles (~0.1 s) after each
call, so between two GEMMs of a forward they hold every other core while MLX's stream thread and Porter's own kernel
pool need them. Porter loads the library with ``OPENBLAS_THREAD_TIMEOUT=4`` (2**4 cycles) unless the user set it or
``GOTO_THREAD_TIMEOUT``; the variable is removed again after loading (the library reads it once, when loaded), so
no other library sees it. Measured on a 2-core AMD Zen 3, batch 1, 2 threads, loaded ports (``docs/BENCHMARKS.md``,
session 13): Swin-T 189 -> 159 ms and 374 -> 259 ms of CPU, ConvNeXt-T 158 -> 132 ms, ResNet-50 107 -> 103 ms, ViT-B/16
unchanged within noise.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import struct
import sys
import sysconfig
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

ENV_BLAS = "PORTER_BLAS"
ENV_THREADS = "PORTER_BLAS_THREADS"
THREAD_TIMEOUT_VARS = ("OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT")
THREAD_TIMEOUT = "4"  # log2 of the cycles an idle OpenBLAS worker spins before it sleeps (OpenBLAS's minimum)
DISABLE_VALUES = ("none", "off", "0", "reference")
HINT = (
    "porter: MLX is using its bundled reference BLAS, which is 10-50x slower on CPU. "
    "Install an optimized one with `pip install 'porter-mlx[fast-cpu]'` (or `apt install libopenblas0-pthread`), "
    "point PORTER_BLAS at a BLAS library, or set PORTER_BLAS=none to silence this."
)

# OpenBLAS targets whose kernels need more than baseline x86-64 / armv8, and the /proc/cpuinfo flags they use.
_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
TARGET_FLAGS: dict[str, tuple[str, ...]] = {
    "SKYLAKEX": _AVX512,
    "COOPERLAKE": _AVX512 + ("avx512_bf16",),
    "SAPPHIRERAPIDS": _AVX512 + ("avx512_bf16",),
    "HASWELL": ("avx2", "fma"),
    "ZEN": ("avx2", "fma"),
    "SANDYBRIDGE": ("avx",),
    "A64FX": ("sve",),
    "ARMV8SVE": ("sve",),
    "NEOVERSEV1": ("sve",),
    "NEOVERSEV2": ("sve",),
    "NEOVERSEN2": ("sve",),
}
# Targets that run on any CPU of their architecture.
BASELINE_TARGETS = ("GENERIC", "PRESCOTT", "CORE2", "PENRYN", "NEHALEM", "ATOM", "BARCELONA", "BOBCAT", "OPTERON",
                    "ARMV8", "CORTEXA53", "CORTEXA57", "CORTEXA72", "CORTEXA73", "NEOVERSEN1", "THUNDERX")
# Symbol prefixes a BLAS may export its functions under ("" = the standard names; scipy-openblas: "scipy_").
SYMBOL_PREFIXES = ("", "scipy_")
# Flags shown by `porter doctor`.
RELEVANT_FLAGS = ("sse4_2", "avx", "fma", "avx2") + _AVX512 + ("avx512_bf16", "avx512_vnni", "amx_tile", "asimd", "sve")


@dataclass(frozen=True)
class Candidate:
    """One BLAS library that may be loaded.

    Args:
        source (str): where it comes from: ``"PORTER_BLAS"``, ``"system-openblas"``, ``"cmeel-openblas"``,
            ``"scipy-openblas"``, ``"mkl"``.
        path (str): the shared library.
    """

    source: str
    path: str


@dataclass
class BlasChoice:
    """What :func:`configure` decided. ``library`` is None when MLX keeps the BLAS it ships with."""

    library: str | None = None
    source: str = "bundled"
    reason: str = "not configured yet"
    config: str | None = None  # e.g. OpenBLAS's own build description
    threads: int | None = None
    prefix: str = ""  # the prefix of the library's symbol names ("scipy_" for scipy-openblas)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (source, path, why)
    hint: str | None = None

    def to_dict(self) -> dict:
        return {
            "library": self.library,
            "source": self.source,
            "reason": self.reason,
            "config": self.config,
            "threads": self.threads,
            "symbol_prefix": self.prefix,
            "skipped": [{"source": s, "path": p, "why": w} for s, p, w in self.skipped],
            "hint": self.hint,
        }


CHOICE = BlasChoice()


# --------------------------------------------------------------------------- the CPU


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """Instruction-set flags of this CPU (``flags`` on x86, ``Features`` on ARM); empty if unreadable."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


# --------------------------------------------------------------------------- the library


def _rodata(path: str) -> bytes:
    """The ``.rodata`` section of an ELF64 little-endian library (where OpenBLAS keeps its build strings), read
    without loading it; the whole file if the section table cannot be read."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] == b"\x7fELF" and head[4] == 2 and head[5] == 1:  # ELFCLASS64, little endian
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            if shoff and shentsize >= 64 and 0 < shstrndx < shnum:
                f.seek(shoff)
                table = f.read(shentsize * shnum)
                sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
                _, _, _, _, names_off, names_size = sections[shstrndx]
                f.seek(names_off)
                names = f.read(names_size)
                for name, _, _, _, offset, size in sections:
                    if names[name:names.find(b"\0", name)] == b".rodata":
                        f.seek(offset)
                        return f.read(size)
        f.seek(0)
        return f.read()


def openblas_target(path: str) -> str | None:
    """The CPU family an OpenBLAS library was built for: ``"DYNAMIC_ARCH"`` (picks kernels at run time), a target
    name such as ``"SKYLAKEX"``, ``"unknown"``, or None if the file is not a recognisable OpenBLAS.

    Read from the file, without loading it: loading a build for the wrong CPU is what must be avoided. A single-target
    build holds its target's name once, as the string ``openblas_get_corename()`` returns; a DYNAMIC_ARCH build says so
    in its configuration string (``openblas_get_config()``).
    """
    data = _rodata(path)
    if b"OpenBLAS" not in data:
        return None
    if b"DYNAMIC_ARCH" in data:
        return "DYNAMIC_ARCH"
    for name in (*TARGET_FLAGS, *BASELINE_TARGETS):
        if b"\0" + name.encode() + b"\0" in data:
            return name
    return "unknown"


def unsafe_reason(candidate: Candidate, flags: frozenset[str], *, explicit: bool = False) -> str | None:
    """Why ``candidate`` must not be loaded on a CPU with ``flags``, or None if it is safe."""
    if not os.path.isfile(candidate.path):
        return "no such file"
    name = os.path.basename(candidate.path)
    if name.startswith("libmkl_rt"):
        return None  # MKL dispatches on the CPU at run time
    try:
        target = openblas_target(candidate.path)
    except (OSError, ValueError) as err:
        return f"unreadable ({err})"
    if target is None:
        # Not OpenBLAS: something the user named explicitly (BLIS, another build); their call.
        return None if explicit else "not an OpenBLAS library"
    if target == "DYNAMIC_ARCH" or target in BASELINE_TARGETS:
        return None
    if target == "unknown":
        return None if explicit else "OpenBLAS built for a CPU target Porter does not know; set PORTER_BLAS to use it"
    missing = [flag for flag in TARGET_FLAGS[target] if flag not in flags]
    if missing:
        return f"built for {target}, this CPU lacks {', '.join(missing)}"
    return None


# --------------------------------------------------------------------------- where to look


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and path not in dirs:
            dirs.append(path)
    return dirs


def _multiarch() -> str:
    return sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"


def find_candidates(
    env: Mapping[str, str] | None = None,
    site_dirs: Sequence[str] | None = None,
    root: str = "/",
    prefixes: Sequence[str] | None = None,
) -> list[Candidate]:
    """Every candidate BLAS present, in the documented order (see the module docstring). The explicit setting
    (if any, and not a "none" value) comes first, whether or not its file exists.

    Args:
        env (Mapping, optional): environment variables. Default: ``os.environ``.
        site_dirs (Sequence[str], optional): where pip installs packages. Default: ``sys.path`` and site-packages.
        root (str, optional): filesystem root for the system libraries (tests use a fake tree). Default: ``"/"``.
        prefixes (Sequence[str], optional): environment prefixes for MKL. Default: ``sys.prefix``, ``sys.base_prefix``.
    """
    env = os.environ if env is None else env
    site_dirs = _site_dirs() if site_dirs is None else site_dirs
    prefixes = list(dict.fromkeys([sys.prefix, sys.base_prefix])) if prefixes is None else prefixes
    found: list[Candidate] = []

    explicit = env.get(ENV_BLAS, "").strip()
    if explicit and explicit.lower() not in DISABLE_VALUES and explicit.lower() != "auto":
        found.append(Candidate(ENV_BLAS, explicit))

    lib_dirs = [f"usr/lib/{_multiarch()}", "usr/lib64", "usr/lib"]
    for lib_dir in lib_dirs:
        base = os.path.join(root, lib_dir)
        # The alternatives-managed name first (the variant the admin chose), then Debian's variants by preference.
        for rel in ("libopenblas.so.0", "openblas-pthread/libopenblas.so.0", "openblas-openmp/libopenblas.so.0",
                    "libopenblasp.so.0", "libopenblaso.so.0", "openblas-serial/libopenblas.so.0"):
            found.append(Candidate("system-openblas", os.path.join(base, rel)))

    for site in site_dirs:
        found.append(Candidate("cmeel-openblas", os.path.join(site, "cmeel.prefix", "lib", "libopenblas.so.0")))

    for site in site_dirs:
        for path in sorted(glob.glob(os.path.join(site, "scipy_openblas32", "lib", "libscipy_openblas*.so*"))):
            found.append(Candidate("scipy-openblas", path))

    for prefix in prefixes:
        for rel in ("lib/libmkl_rt.so.3", "lib/libmkl_rt.so.2", "lib/libmkl_rt.so"):  # .so.3: mkl >= 2025.3 wheels
            found.append(Candidate("mkl", os.path.join(prefix, rel)))

    seen: set[str] = set()
    unique = []
    for c in found:
        key = os.path.realpath(c.path) if c.source != ENV_BLAS else c.path
        if key in seen or (c.source != ENV_BLAS and not os.path.isfile(c.path)):
            continue
        seen.add(key)
        unique.append(c)
    return unique


# --------------------------------------------------------------------------- loading


def _load_global(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _load_local(path: str) -> ctypes.CDLL:
    """Loaded for MLX only: not in the global scope, so no other library (torch) binds to its symbols. Its idle
    threads sleep at once (:data:`THREAD_TIMEOUT`) unless the user chose a timeout."""
    with _thread_timeout(os.environ):
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)


class _thread_timeout:
    """Sets ``OPENBLAS_THREAD_TIMEOUT`` in ``environ`` while the library loads, when neither it nor
    ``GOTO_THREAD_TIMEOUT`` is set, and removes it afterwards (other libraries never see Porter's choice)."""

    def __init__(self, environ):
        self.environ = environ
        self.added = False

    def __enter__(self):
        if not any(self.environ.get(name, "").strip() for name in THREAD_TIMEOUT_VARS):
            self.environ[THREAD_TIMEOUT_VARS[0]] = THREAD_TIMEOUT
            self.added = True
        return self

    def __exit__(self, *exc):
        if self.added:
            self.environ.pop(THREAD_TIMEOUT_VARS[0], None)
        return False


def symbol_prefix(lib) -> str | None:
    """The prefix under which the loaded library ``lib`` exports the standard BLAS names (one of
    :data:`SYMBOL_PREFIXES`, judged by ``cblas_sgemm``), or None if it exports them under none."""
    for prefix in SYMBOL_PREFIXES:
        if hasattr(lib, prefix + "cblas_sgemm"):
            return prefix
    return None


def bind_mlx(lib, path: str, prefix: str = "") -> str | None:
    """Point MLX's BLAS/LAPACK calls at the loaded library ``lib`` (file ``path``, exporting each function as
    ``prefix + name``); returns why not, or None."""
    import mlx.core  # noqa: F401  (loads libmlx.so and the BLAS it bundles)

    from porter import _bind

    mlx_lib = _bind.loaded_path("libmlx.so")
    if mlx_lib is None:
        return "libmlx.so is not loaded (an MLX built without a separate libmlx)"
    owners = _bind.bundled_blas(mlx_lib)
    if not owners:
        return "libmlx.so links no BLAS library that Porter can replace"
    if _bind.rebind(mlx_lib, lib, path, owners, prefix=prefix) == 0:
        return "provides none of the BLAS functions MLX calls"
    return None


def mlx_provider(symbol: str = "cblas_sgemm") -> str | None:
    """The library MLX's ``symbol`` calls go to (read from libmlx's GOT), or None if that cannot be read."""
    import mlx.core  # noqa: F401

    from porter import _bind

    mlx_lib = _bind.loaded_path("libmlx.so")
    return _bind.provider(mlx_lib, symbol) if mlx_lib else None


def _gfortran_from_mlx() -> str | None:
    """The libgfortran the mlx-cpu wheel bundles (renamed by auditwheel, e.g. ``libgfortran-f7379c93.so.5.0.0``)."""
    for site in _site_dirs():
        hits = sorted(glob.glob(os.path.join(site, "mlx_cpu.libs", "libgfortran-*.so.5*")))
        if hits:
            return hits[0]
    return None


def provide_gfortran(bundled: str, load: Callable[[str], object] = _load_global) -> None:
    """Make ``libgfortran.so.5`` resolvable in this process from the copy mlx-cpu bundles.

    The dynamic linker satisfies a library's ``NEEDED libgfortran.so.5`` with an already-loaded object only if that
    object's SONAME is ``libgfortran.so.5``; auditwheel renamed the bundled one's SONAME. So an in-memory copy
    (memfd, nothing written to disk) with the SONAME string rewritten in place (same offsets, NUL padded) is loaded
    globally. Its own dependency (the bundled libquadmath, found through ``$ORIGIN`` normally) is loaded first.
    """
    libs_dir = os.path.dirname(bundled)
    for quadmath in sorted(glob.glob(os.path.join(libs_dir, "libquadmath-*.so*"))):
        load(quadmath)
    with open(bundled, "rb") as f:
        data = f.read()
    old = os.path.basename(bundled).encode() + b"\0"
    new = b"libgfortran.so.5".ljust(len(old), b"\0")
    if data.find(old) < 0 or len(new) > len(old):
        raise OSError(f"cannot find the SONAME {old[:-1].decode()!r} in {bundled}")
    fd = os.memfd_create("libgfortran.so.5")
    try:
        os.write(fd, data.replace(old, new))
        load(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def load_candidate(candidate: Candidate, load: Callable[[str], object] = _load_local):
    """Load ``candidate`` (locally by default); if it lacks ``libgfortran.so.5`` (cmeel-openblas on a machine without
    gfortran), borrow mlx-cpu's copy and retry. Raises OSError if it cannot be loaded."""
    try:
        return load(candidate.path)
    except OSError as err:
        bundled = _gfortran_from_mlx()
        if "libgfortran.so.5" not in str(err) or bundled is None:
            raise
        # global (found by SONAME from the BLAS's DT_NEEDED); it defines no BLAS symbol, so torch is unaffected
        provide_gfortran(bundled, _load_global if load is _load_local else load)
        return load(candidate.path)


def _describe(lib, prefix: str = "") -> tuple[str | None, int | None]:
    """OpenBLAS's build string and thread count, or MKL's thread count, where the library tells."""
    config = threads = None
    try:
        get_config = getattr(lib, prefix + "openblas_get_config")
        get_config.restype = ctypes.c_char_p
        config = get_config().decode(errors="replace")
        threads = int(getattr(lib, prefix + "openblas_get_num_threads")())
    except (AttributeError, TypeError):
        try:
            threads = int(lib.MKL_Get_Max_Threads())
            config = "MKL"
        except (AttributeError, TypeError):
            pass
    return config, threads


def _set_threads(lib, env: Mapping[str, str], prefix: str = "") -> None:
    """Use every core this process may run on, unless the user set a thread count (the BLAS's own variables, read by
    the library at load time, or PORTER_BLAS_THREADS)."""
    wanted = env.get(ENV_THREADS, "").strip()
    if wanted:
        try:
            n = int(wanted)
        except ValueError:
            warnings.warn(f"porter: {ENV_THREADS}={wanted!r} is not an integer; ignored", stacklevel=3)
            return
    elif any(env.get(v) for v in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return
    else:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = max(1, n)
    for setter in (prefix + "openblas_set_num_threads", "MKL_Set_Num_Threads"):
        fn = getattr(lib, setter, None)
        if fn is not None:
            fn(ctypes.c_int(n))
            return


def choose(
    env: Mapping[str, str] | None = None,
    *,
    system: str | None = None,
    preloaded: str | None | bool = None,
    flags: frozenset[str] | None = None,
    candidates: Iterable[Candidate] | None = None,
    load: Callable[[str], object] = _load_local,
    bind: Callable[[object, str, str], str | None] = bind_mlx,
) -> BlasChoice:
    """Decide (and load) the BLAS for MLX. Every input is injectable so the logic is testable without side effects.

    Args:
        env (Mapping, optional): environment. Default: ``os.environ``.
        system (str, optional): ``platform.system()``. Default: this machine's.
        preloaded (str or False, optional): a BLAS already in the global scope (``LD_PRELOAD``), which MLX then
            uses and Porter leaves alone; False for none. Default: looked up (:func:`global_provider`).
        flags (frozenset, optional): CPU flags. Default: from ``/proc/cpuinfo``.
        candidates (Iterable[Candidate], optional): Default: :func:`find_candidates`.
        load (callable, optional): loads a library (locally); raises OSError on failure.
        bind (callable, optional): ``bind(lib, path, prefix)`` points MLX's BLAS calls at the loaded library
            (whose functions are named ``prefix + name``); returns why it could not, or None. Default:
            :func:`bind_mlx`.
    """
    env = os.environ if env is None else env
    system = platform.system() if system is None else system
    setting = env.get(ENV_BLAS, "").strip()

    if system == "Darwin":
        return BlasChoice(source="Accelerate", reason="macOS: MLX uses Accelerate")
    if system != "Linux":
        return BlasChoice(reason=f"{system}: Porter does not change MLX's BLAS here")
    if setting.lower() in DISABLE_VALUES:
        return BlasChoice(reason=f"disabled by {ENV_BLAS}={setting}")
    flags = cpu_flags() if flags is None else flags
    candidates = find_candidates(env) if candidates is None else list(candidates)
    preloaded = global_provider() if preloaded is None else preloaded
    if preloaded:
        return BlasChoice(library=preloaded, source="preloaded",
                          reason="a BLAS was already in the global scope (LD_PRELOAD?); MLX uses it")

    skipped: list[tuple[str, str, str]] = []
    for c in candidates:
        why = unsafe_reason(c, flags, explicit=c.source == ENV_BLAS)
        if why is None:
            try:
                lib = load_candidate(c, load)
            except OSError as err:
                why = f"failed to load: {err}"
            else:
                prefix = symbol_prefix(lib)
                if prefix is None:
                    names = " or ".join(p + "cblas_sgemm" for p in SYMBOL_PREFIXES)
                    why = f"loaded, but exports no {names}, so MLX would not use it"
                else:
                    why = bind(lib, c.path, prefix)
            if why is None:
                _set_threads(lib, env, prefix)
                config, threads = _describe(lib, prefix)
                how = f"{ENV_BLAS}={setting}" if c.source == ENV_BLAS else "first safe candidate found"
                return BlasChoice(library=c.path, source=c.source, reason=how, config=config, threads=threads,
                                  prefix=prefix, skipped=skipped)
        skipped.append((c.source, c.path, why))
        if c.source == ENV_BLAS:
            warnings.warn(f"porter: {ENV_BLAS}={c.path} not used ({why}); looking for another BLAS", stacklevel=3)
    hint = HINT
    if skipped:  # e.g. the fast-cpu extra is installed but is an AVX-512 build on a CPU without it
        hint += " Skipped: " + "; ".join(f"{source} ({why})" for source, _, why in skipped) + "."
    return BlasChoice(reason="no optimized BLAS found", skipped=skipped, hint=hint)


def configure() -> BlasChoice:
    """Run once from ``porter/__init__.py``: choose and load the BLAS, warn once if MLX stays on the slow path."""
    global CHOICE
    if CHOICE.reason != "not configured yet":
        return CHOICE
    CHOICE = choose()
    if CHOICE.hint:
        warnings.warn(CHOICE.hint, RuntimeWarning, stacklevel=3)
    return CHOICE


def global_provider(symbol: str = "cblas_sgemm") -> str | None:
    """The file that provides ``symbol`` in the process's global scope, where MLX looks first; None if none does
    (MLX then uses the library it ships). A check of what actually happened, independent of :data:`CHOICE`."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    try:
        fn = getattr(ctypes.CDLL(None), symbol)
        info = DlInfo()
        if not ctypes.CDLL(None).dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)):
            return None
        return info.dli_fname.decode(errors="replace") if info.dli_fname else None
    except (AttributeError, OSError):
        return None
