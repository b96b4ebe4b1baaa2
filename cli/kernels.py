"""``porter build-kernels``: compile Porter's native CPU kernels (layers/csrc) against the installed MLX."""

from __future__ import annotations

import click

from .errors import InputError


@click.command("build-kernels")
@click.option("--force", is_flag=True, help="Rebuild even if a build for this MLX, Python and CPU exists.")
@click.option("--verbose", is_flag=True, help="Show the compiler's output.")
def build_kernels(force: bool, verbose: bool) -> None:
    """Build the native CPU pooling kernels for this MLX, Python and CPU (about 30 s; needs a C++20 compiler,
    CMake and nanobind 3). Without them the layers run on slower pure-MLX ops with the same results."""
    import porter  # noqa: F401  (BLAS first)
    from porter.layers import _native_build

    try:
        path = _native_build.build(force=force, verbose=verbose)
    except _native_build.BuildError as exc:
        first, _, rest = str(exc).partition("\n")
        raise InputError(first, details=[line for line in rest.splitlines() if line.strip()][-25:]) from exc
    click.echo(f"native kernels ready: {path}")
