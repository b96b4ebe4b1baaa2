"""MLX runtime defaults for CPU inference, and :func:`runtime_info` (what ``porter doctor`` prints).

MLX's CPU allocator keeps freed buffers for reuse only up to its cache limit (32 MiB by default on CPU). Above it,
every large temporary (a convolution's im2col buffer is tens of MB at batch 8) is a fresh ``mmap`` that page-faults on
first touch, which costs more than the convolution itself. On Linux with glibc, Porter's CPU default sets MLX's cache
to 0 and lets glibc keep freed blocks instead (``porter/_malloc.py``: no ``mmap``, up to 1 GiB of free heap top kept):
as fast, and the process's resident size follows MLX's live peak rather than the peak plus a cache of buffers whose
sizes later requests do not match (issue 15: ResNet-50 batch 8 854 -> 588 MB). Elsewhere (macOS, musl) Porter raises
MLX's cache limit instead, bounded the same way (1 GiB, at most 1/8 of RAM).

``PORTER_CACHE_LIMIT`` overrides it: a size such as ``512MB``, ``2GiB``, ``1073741824`` (MLX's cache at that size,
glibc left as it is), or ``mlx`` to keep MLX's own default. :func:`set_cache_limit` changes MLX's cache at run time.
"""

from __future__ import annotations

import os
import platform
import re
import sys

from porter import _blas, _malloc

ENV_CACHE = "PORTER_CACHE_LIMIT"
# 1 GiB kept for reuse at most (MLX's cache, or glibc's free heap top); MLX's cache: ResNet-18 b8 needs >= 512 MB
DEFAULT_CACHE_LIMIT = 1 << 30
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
          "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}

_cache = {"limit": None, "how": "not set"}


def parse_size(text: str) -> int:
    """``"512MB"`` -> 512000000, ``"1GiB"`` -> 1073741824, ``"4096"`` -> 4096. Raises ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"[{ENV_CACHE}] expected a size such as 512MB, 1GiB or 1073741824, but got {text!r}.")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_cache_limit() -> int:
    """The most freed memory Porter's CPU default keeps for reuse (MLX's cache limit where glibc cannot keep it, else
    glibc's trim threshold): 1 GiB, or an eighth of physical memory on small machines."""
    total = _total_memory()
    return DEFAULT_CACHE_LIMIT if total is None else min(DEFAULT_CACHE_LIMIT, total // 8)


def set_cache_limit(limit: int | str) -> int:
    """Set MLX's buffer-cache limit in bytes (or a size string such as ``"512MB"``); returns the previous limit.

    Args:
        limit (int or str): bytes kept cached for reuse at most; ``0`` disables the cache.
    """
    import mlx.core as mx

    if isinstance(limit, str):
        limit = parse_size(limit)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"[set_cache_limit] 'limit' must be an int or a size string but got {type(limit).__name__}.")
    if limit < 0:
        raise ValueError(f"[set_cache_limit] 'limit' must be non-negative but got {limit}.")
    previous = mx.set_cache_limit(limit)
    _cache.update(limit=limit, how="set_cache_limit()")
    return previous


def get_cache_limit() -> int:
    """MLX's current buffer-cache limit in bytes."""
    import mlx.core as mx

    current = mx.set_cache_limit(0)  # MLX has no getter: set and put back
    mx.set_cache_limit(current)
    return current


def configure_cache(env=None) -> None:
    """Apply Porter's default cache limit on CPU devices, or ``PORTER_CACHE_LIMIT`` (any device)."""
    import mlx.core as mx

    env = os.environ if env is None else env
    setting = env.get(ENV_CACHE, "").strip()
    if setting.lower() == "mlx":
        _cache.update(limit=get_cache_limit(), how=f"MLX default ({ENV_CACHE}=mlx)")
        return
    if setting:
        try:
            limit = parse_size(setting)
        except ValueError as err:
            import warnings

            warnings.warn(f"porter: {err} Using the default.", RuntimeWarning, stacklevel=3)
        else:
            mx.set_cache_limit(limit)
            _cache.update(limit=limit, how=f"{ENV_CACHE}={setting}")
            return
    if mx.default_device() == mx.cpu:
        limit = default_cache_limit()
        if _malloc.keep_freed_blocks(limit):
            mx.set_cache_limit(0)
            _cache.update(limit=0, how=f"Porter's CPU default: glibc keeps freed blocks, up to {limit >> 20} MiB "
                                       "of free heap top")
        else:
            mx.set_cache_limit(limit)
            _cache.update(limit=limit, how="Porter's CPU default")
    else:
        _cache.update(limit=get_cache_limit(), how="MLX default (GPU device)")


def runtime_info() -> dict:
    """What MLX runs on in this process: BLAS (and how it was chosen), cache limit, MLX version, device, CPU.

    Returns a JSON-serialisable dict; ``porter doctor`` prints it.
    """
    import mlx.core as mx

    flags = _blas.cpu_flags()
    info = {
        "porter": sys.modules["porter"].__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "blas": _blas.CHOICE.to_dict(),
        # what MLX's cblas_sgemm calls go to, read from libmlx's GOT (the bundled libblas when Porter chose none)
        "blas_symbol_provider": _blas.mlx_provider() if platform.system() == "Linux" else None,
        "cache_limit": get_cache_limit(),
        "cache_limit_how": _cache["how"],
        "memory_limit": mx.get_memory_limit(),
        "malloc_trim": _malloc.kept_trim(),  # bytes of free heap top glibc keeps (None: glibc's own policy)
        "cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_flags": [f for f in _blas.RELEVANT_FLAGS if f in flags],
    }
    from porter.layers import native_status

    info["native_kernels"] = native_status()
    return info
