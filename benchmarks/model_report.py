"""The rows of ``benchmarks/models.py``: one dict per (model, batch, mode) from its torch and MLX rounds, the
Markdown table line, and the summary under the table (geometric mean of the forward ratios per batch, the rows over
the targets)."""

from __future__ import annotations

import math
import statistics

FORWARD_TARGET = 1.0  # issue 15: every forward at or below torch's time
TRAIN_TARGET = 1.2  # and a training step within 1.2x

HEADER = ("| model | batch | mode | torch ms | MLX ms | MLX/torch (range over rounds) | CPU-time MLX/torch | "
          "torch peak rss | MLX peak rss / mlx | torch-free | BLAS (threads) | MLX path | max rel err |")


def make_row(name: str, batch: int, mode: str, torch_rows: list, mlx_rows: list, convert: dict | None) -> dict:
    """Median over all timed runs of all rounds, MLX/torch per round, CPU-time ratio, peak memory (max over rounds)."""
    t = statistics.median([v for r in torch_rows for v in r["times_ms"]])
    m = statistics.median([v for r in mlx_rows for v in r["times_ms"]])
    ratios = [mr["median_ms"] / tr["median_ms"] for tr, mr in zip(torch_rows, mlx_rows)]
    last = mlx_rows[-1]
    return dict(model=name, batch=batch, mode=mode, rounds=len(mlx_rows), torch_ms=t, mlx_ms=m, ratio=m / t,
                ratio_min=min(ratios), ratio_max=max(ratios),
                cpu_ratio=statistics.median(r["cpu_median_ms"] for r in mlx_rows)
                / statistics.median(r["cpu_median_ms"] for r in torch_rows),
                torch_rss_mb=max(r["peak_rss_mb"] for r in torch_rows),
                mlx_rss_mb=max(r["peak_rss_mb"] for r in mlx_rows),
                mlx_peak_mb=max(r["mlx_peak_mb"] for r in mlx_rows),
                torch_free=all(r.get("torch_free", False) for r in mlx_rows),
                blas=last["blas"], threads=last["threads"], path=last["path"],
                max_rel_err=max(r["max_rel_err"] for r in mlx_rows),
                torch_train_params=torch_rows[-1].get("train_params"), mlx_train_params=last.get("train_params"),
                convert_s=(convert or {}).get("convert_s"), load_s=last.get("load_s"), profile=last.get("profile"),
                native=last.get("native"), pure_mlx=any(_pure_mlx(r) for r in mlx_rows), error=None)


def _pure_mlx(mlx_row: dict) -> bool:
    """An MLX worker whose layers wanted Porter's native kernels and found no build (``porter.bench.native_kernels``)."""
    native = mlx_row.get("native") or {}
    return bool(native.get("needed")) and not native.get("available")


def error_row(name: str, batch, mode: str, message: str) -> dict:
    return dict(model=name, batch=batch, mode=mode, error=message)


def format_row(row: dict) -> str:
    if row.get("error"):
        first = row["error"].strip().splitlines()[-1][:200] if row["error"].strip() else "failed"
        return f"| {row['model']} | {row['batch']} | {row['mode']} | FAILED: {first} |"
    err = f"{row['max_rel_err']:.1e}"
    if row["mode"] == "train" and row["mlx_train_params"] is not None \
            and row["mlx_train_params"] != row["torch_train_params"]:
        err += f" (trainable: torch {row['torch_train_params']}, MLX {row['mlx_train_params']})"
    return (f"| {row['model']} | {row['batch']} | {row['mode']} | {row['torch_ms']:.1f} | {row['mlx_ms']:.1f} | "
            f"{row['ratio']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) | {row['cpu_ratio']:.2f} | "
            f"{row['torch_rss_mb']:.0f} MB | {row['mlx_rss_mb']:.0f} / {row['mlx_peak_mb']:.0f} MB | "
            f"{'yes' if row['torch_free'] else 'no'} | {row['blas']} ({row['threads']}) | {row['path']}"
            f"{' [PURE MLX: no native build]' if row.get('pure_mlx') else ''} | {err} |")


def geometric_mean(values: list) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(rows: list) -> list:
    """Lines under the table: per batch the geometric mean of the forward ratios (wall and CPU time), then the rows
    above the targets (forward > 1.0, train > 1.2, by wall-clock ratio) and the failed ones."""
    done = [r for r in rows if not r.get("error")]
    lines = []
    for batch in sorted({r["batch"] for r in done if r["mode"] == "forward"}):
        fwd = [r for r in done if r["mode"] == "forward" and r["batch"] == batch]
        lines.append(f"Forward, batch {batch}: geometric mean of MLX/torch over {len(fwd)} models "
                     f"{geometric_mean([r['ratio'] for r in fwd]):.2f} (CPU time "
                     f"{geometric_mean([r['cpu_ratio'] for r in fwd]):.2f}).")
    over = [r for r in done if r["ratio"] > (TRAIN_TARGET if r["mode"] == "train" else FORWARD_TARGET)]
    lines.append(f"Above {FORWARD_TARGET} (forward) / {TRAIN_TARGET} (train): "
                 + (", ".join(f"{r['model']} b{r['batch']} {r['mode']} {r['ratio']:.2f} (CPU {r['cpu_ratio']:.2f})"
                              for r in over) or "none") + ".")
    pure = [r for r in done if r.get("pure_mlx")]
    if pure:
        lines.append("Pure-MLX layers (no native build for the sources): "
                     + ", ".join(f"{r['model']} b{r['batch']} {r['mode']}" for r in pure) + ".")
    builds = sorted({r["native"]["directory"] for r in done if r.get("native") and r["native"].get("available")})
    if len(builds) > 1:
        lines.append(f"The native build changed during the run ({len(builds)} builds: {', '.join(builds)}).")
    failed = [r for r in rows if r.get("error")]
    if failed:
        lines.append("Failed: " + ", ".join(f"{r['model']} b{r['batch']} {r['mode']}" for r in failed) + ".")
    return lines


def profile_lines(row: dict, top: int = 12) -> list:
    lines = [f"MLX forward of {row['model']} at batch {row['batch']}, per op (each node evaluated alone):"]
    lines += [f"  {op:32s} {ms:8.2f} ms  {100 * share:5.1f}%" for op, ms, share in row["profile"][:top]]
    return lines
