"""``porter doctor``: what MLX runs on here (BLAS and how it was chosen, native kernels, cache limit, MLX version,
device, CPU)."""

from __future__ import annotations

import json

import click


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_info(info: dict) -> str:
    """The readable form of :func:`porter.runtime_info`."""
    blas = info["blas"]
    if blas["library"]:
        blas_line = f"{blas['source']}: {blas['library']}"
    else:
        blas_line = {"bundled": "MLX's bundled reference BLAS (slow)"}.get(blas["source"], blas["source"])
    lines = [
        f"porter          {info['porter']} (python {info['python']}, {info['platform']})",
        f"mlx             {info['mlx']}, device {info['device']}",
        f"blas            {blas_line}",
        f"  chosen by     {blas['reason']}",
    ]
    if blas["config"]:
        lines.append(f"  build         {blas['config']}")
    if blas["threads"]:
        lines.append(f"  threads       {blas['threads']}")
    provider = info.get("blas_symbol_provider")
    if info["platform"].startswith("Linux"):
        lines.append(f"  MLX calls     cblas_sgemm in {provider or 'an unknown library'}")
    for skipped in blas["skipped"]:
        lines.append(f"  skipped       {skipped['source']}: {skipped['path']} ({skipped['why']})")
    lines += [
        f"cache limit     {_size(info['cache_limit'])} ({info['cache_limit_how']}; memory limit "
        f"{_size(info['memory_limit'])})",
        f"cpu             {info['cpu_count']} cores usable; flags: {' '.join(info['cpu_flags']) or '-'}",
    ]
    native = info.get("native_kernels")
    if native is not None:
        if native["available"]:
            state = "in use on the CPU" if native["enabled"] else "built, but disabled"
            lines.append(f"native kernels  {state}, {native['threads']} threads ({native['directory']})")
            cache = native.get("winograd_cache")
            if cache is not None:
                lines.append(f"winograd cache  {cache['entries']} weights, {cache['bytes'] / 2**20:.1f} MB held, "
                             f"limit {cache['limit'] / 2**20:.0f} MB (PORTER_WINOGRAD_CACHE_MB)")
        else:
            lines.append(f"native kernels  not used: {native['reason']}")
    if blas["hint"]:
        lines.append(f"hint            {blas['hint']}")
    return "\n".join(lines)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the information as JSON.")
def doctor(as_json: bool) -> None:
    """Show which BLAS MLX uses, the cache limit, the MLX version and device, and relevant CPU flags."""
    import porter

    info = porter.runtime_info()
    click.echo(json.dumps(info, indent=2) if as_json else format_info(info))
