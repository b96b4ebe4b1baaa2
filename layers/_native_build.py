"""Building Porter's native CPU kernels: where a build lives, and compiling and self-testing one.

The ``_porter_kernels`` MLX extension (``layers/csrc``) is C++ built against the installed MLX, on the user's
machine, once: ``porter build-kernels`` (``cli/kernels.py``; ``scripts/setup.sh`` runs it) calls :func:`build`.
Loading the module and calling its kernels is ``layers/_native.py``'s job; this module never loads it into the
calling process (the self-test runs in a fresh interpreter).

Where builds live: ``$PORTER_KERNEL_DIR`` or ``~/.cache/porter/kernels`` (``$XDG_CACHE_HOME`` respected), one folder
per build *tag*: the MLX version, the Python ABI, the CPU (the build uses ``-march=native``) and a hash of every file
in :data:`SOURCES`, so a build is never loaded into an MLX or a CPU it was not built for, and an out-of-date build is
simply not found.

The build: CMake (``csrc/CMakeLists.txt``, Ninja when installed) with nanobind 3; the per-family sources compile as
one unity translation unit (CMakeLists.txt says why); the result is checked in a fresh interpreter before it is moved
into place.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Optional

import mlx.core as mx

MODULE = "_porter_kernels"
ENV_DIR = "PORTER_KERNEL_DIR"
SOURCE_DIR = Path(__file__).resolve().parent / "csrc"
# every file the build reads (the tag hashes them all): the build, the shared headers, then per family its kernel
# header (loop nests) and its *_ops.cpp (primitives, ops, bind_<family>)
SOURCES = (
    "CMakeLists.txt", "bindings.cpp", "ops_common.h", "dispatch.h", "parallel.h", "windows.h", "conv_params.h", "simd.h",
    "exp_poly.h", "half_rows.h",
    "activation_kernels.h", "softmax_kernels.h", "activation_ops.cpp", "conv_kernels.h", "conv_ops.cpp",
    "elementwise_kernels.h", "elementwise_ops.cpp", "grouped_conv_kernels.h", "grouped_conv_ops.cpp",
    "norm_kernels.h", "normalize_kernels.h", "norm_ops.cpp", "pool_kernels.h", "pool_ops.cpp", "quantize_kernels.h",
    "quantize_ops.cpp",
    "winograd_kernels.h", "winograd_ops.cpp", "winograd_cache.h", "conv3d_kernels.h", "conv3d_fused_kernels.h",
    "conv3d_columns_kernels.h", "conv3d_ops.cpp",
    "weight_flip_kernels.h", "weight_flip_ops.cpp", "linear_kernels.h", "linear_ops.cpp",
    "resample_kernels.h", "resample_ops.cpp",
    "col2im_kernels.h", "col2im_ops.cpp", "concat_kernels.h", "concat_ops.cpp",
    "shuffle_kernels.h", "shuffle_ops.cpp", "matmul_kernels.h", "matmul_ops.cpp",
    "strided_copy.h", "reshape_ops.cpp", "binary_kernels.h", "binary_ops.cpp",
    "roll_kernels.h", "roll_ops.cpp",
)
# nanobind major version whose ABI matches the MLX release line Porter supports (mlx 0.32: nanobind 3.x)
NANOBIND_REQUIREMENT = "nanobind>=3,<4"


# ---------------------------------------------------------------------------------------------------- where
def _cpu_fingerprint() -> str:
    """What ``-march=native`` depends on: the CPU's feature flags (Linux) or its model (elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() + " " + platform.processor()


def build_tag() -> str:
    """The folder name a build for this MLX, Python, CPU and source tree lives under."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode())
        digest.update((SOURCE_DIR / name).read_bytes())
    digest.update(_cpu_fingerprint().encode())
    py = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
    return f"mlx{mx.__version__}-{py}-{platform.machine()}-{digest.hexdigest()[:16]}"


def kernel_root() -> Path:
    """Where builds live: ``$PORTER_KERNEL_DIR``, else ``$XDG_CACHE_HOME/porter/kernels`` (``~/.cache``)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "porter" / "kernels"


def kernel_dir() -> Path:
    """The folder of the build for this MLX, Python, CPU and source tree (it may not exist yet)."""
    return kernel_root() / build_tag()


def module_file(folder: Path) -> Optional[Path]:
    """The extension module in ``folder`` (any of this Python's extension suffixes), or ``None``."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / (MODULE + suffix)
        if candidate.is_file():
            return candidate
    return None



# ---------------------------------------------------------------------------------------------------- build
class BuildError(RuntimeError):
    """The native kernels could not be built; the message says which step failed and how to fix it."""


def _tool(name: str) -> Optional[str]:
    found = shutil.which(name)
    if found:
        return found
    # pip's cmake/ninja wheels install next to the interpreter
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None


def _nanobind_dir() -> str:
    try:
        import nanobind
    except ImportError as exc:
        raise BuildError(
            f"building the native kernels needs nanobind ({NANOBIND_REQUIREMENT}): "
            f"pip install '{NANOBIND_REQUIREMENT}'"
        ) from exc
    major = int(nanobind.__version__.split(".")[0])
    if major != 3:
        raise BuildError(
            f"nanobind {nanobind.__version__} does not match MLX {mx.__version__}'s ABI: "
            f"pip install '{NANOBIND_REQUIREMENT}'"
        )
    return nanobind.cmake_dir()


def _arch_flags() -> str:
    if platform.system() == "Darwin":
        return ""
    return "-march=native"


def build(force: bool = False, verbose: bool = False) -> Path:
    """Compile the kernels for this MLX/Python/CPU into :func:`kernel_dir`; returns the module's path.

    The module is built in a temporary folder and checked in a fresh interpreter (an ABI mismatch must not crash the
    caller) before it is moved into place, so a failed build never leaves a half-written module behind.
    """
    target = kernel_dir()
    existing = module_file(target)
    if existing is not None and not force:
        return existing
    cmake = _tool("cmake")
    if cmake is None:
        raise BuildError("building the native kernels needs CMake >= 3.24 on PATH (apt install cmake, or pip install cmake)")
    nanobind_dir = _nanobind_dir()
    mlx_root = Path(importlib.util.find_spec("mlx").submodule_search_locations[0])
    ninja = _tool("ninja")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="porter-kernels-", dir=target.parent) as tmp:
        build_dir = Path(tmp) / "build"
        configure = [
            cmake, "-S", str(SOURCE_DIR), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}", f"-DMLX_ROOT={mlx_root}", f"-Dnanobind_ROOT={nanobind_dir}",
            f"-DPORTER_ARCH_FLAGS={_arch_flags()}",
        ]
        if ninja:
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        steps = [("configure", configure), ("compile", [cmake, "--build", str(build_dir), "--parallel"])]
        for step, cmd in steps:
            run = subprocess.run(cmd, capture_output=not verbose, text=True)
            if run.returncode != 0:
                tail = "" if verbose else "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
                raise BuildError(f"native kernels: the {step} step failed (exit {run.returncode})\n{tail}")
        built = module_file(build_dir)
        if built is None:
            raise BuildError(f"native kernels: the build finished but produced no {MODULE} module in {build_dir}")
        staged = Path(tmp) / "staged"
        staged.mkdir()
        shutil.copy2(built, staged / built.name)
        _self_test(staged)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)
    return module_file(target)


_SELF_TEST = """
import sys, importlib.util
import mlx.core as mx
spec = importlib.util.spec_from_file_location("_porter_kernels", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
x = mx.array([[[1.0], [3.0], [2.0]]])
v, i = m.window_max(x, [[0, 1]], [[2, 3]], [1], True)
assert v.tolist() == [[[3.0], [3.0]]] and i.tolist() == [[[1], [1]]], (v, i)
"""


def _self_test(folder: Path) -> None:
    path = module_file(folder)
    env = dict(os.environ, PORTER_NATIVE="0")
    run = subprocess.run([sys.executable, "-c", _SELF_TEST, str(path)], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-15:])
        raise BuildError(f"native kernels: the built module failed its self-test (not installed)\n{tail}")
