"""Peak RSS, MLX's peak allocation and CPU time of a saved port in a fresh torch-free process (issue 15).

    PORTER_NUM_THREADS=1 PORTER_BLAS_THREADS=1 python benchmarks/run_memory.py PORT_FOLDER 8 3,224,224 [REPEAT]

Loads the port with ``porter.load``, runs ``REPEAT`` (default 6) forwards on a seeded input of shape (batch, *chw) in
torch's layout (moved to the port's input layout), and prints one JSON line: ``hwm_mb`` (VmHWM, the process's peak
resident size), ``mlx_peak_mb``, ``first_peak_mb`` (the first forward's), ``active_mb`` / ``cache_mb`` after the runs,
``cpu_ms`` / ``wall_ms`` (medians over the forwards after the first), ``torch`` (imported: must be false).
``PORTER_CACHE_LIMIT=1GiB`` gives the policy before issue 15's run-time work (MLX's cache instead of glibc's).
"""

import json
import sys
import time

import numpy as np

import porter  # first: BLAS and allocator policy before mlx.core

import mlx.core as mx  # noqa: E402


def vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def main(argv) -> dict:
    folder, batch, chw = argv[0], int(argv[1]), [int(v) for v in argv[2].split(",")]
    repeat = int(argv[3]) if len(argv) > 3 else 6
    if repeat < 2:
        raise SystemExit("[run_memory] REPEAT must be at least 2")
    model = porter.load(folder)
    mx.eval(model.parameters())
    x = np.random.default_rng(0).standard_normal([batch, *chw]).astype(np.float32)
    perm = model.graph["inputs"][0]["perm"]
    xm = mx.array(np.ascontiguousarray(np.transpose(x, perm)) if perm is not None else x)
    mx.eval(xm)
    mx.reset_peak_memory()
    cpu, wall, first_peak = [], [], None
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        mx.eval(model(xm))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        first_peak = first_peak if first_peak is not None else mx.get_peak_memory() / 2**20
    med = lambda v: sorted(v[1:])[len(v[1:]) // 2] * 1e3  # noqa: E731
    return dict(hwm_mb=vm_hwm_mb(), mlx_peak_mb=mx.get_peak_memory() / 2**20, first_peak_mb=first_peak,
                active_mb=mx.get_active_memory() / 2**20, cache_mb=mx.get_cache_memory() / 2**20,
                cpu_ms=med(cpu), wall_ms=med(wall), torch="torch" in sys.modules)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
