"""Forward CPU time of the unseen-model twins (``tests/models/unseen.py``, their small test sizes): torch against the
port, in one process, alternated, best of ``--rounds`` x ``--repeat`` calls, process CPU time.

Run single-threaded for figures that survive a shared machine:
``PORTER_NUM_THREADS=1 PORTER_BLAS_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/unseen_models.py [names]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _best_cpu_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1e3


def main(argv=None) -> None:
    import mlx.core as mx
    import torch

    import porter
    from porter.compare import port_inputs
    from tests.models import make_inputs
    from tests.models.unseen import UNSEEN

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"twins (default: all of {', '.join(UNSEEN)})")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of torch and port")
    parser.add_argument("--repeat", type=int, default=7, help="calls per round (the best one counts)")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    print(f"{'model':16s} {'inputs':40s} {'torch ms':>9s} {'port ms':>9s} {'ratio':>6s}")
    for name in args.names or list(UNSEEN):
        spec = UNSEEN[name]
        model, xs = spec.builder(), make_inputs(spec.inputs)
        ported = porter.convert(model, xs)
        args_mx, _ = port_inputs(ported, xs)

        def run_port():
            mx.eval(ported(*args_mx))

        def run_torch():
            with torch.no_grad():
                model(*xs)

        run_port(), run_torch()
        t_torch, t_port = [], []
        for _ in range(args.rounds):
            t_torch.append(_best_cpu_ms(run_torch, args.repeat))
            t_port.append(_best_cpu_ms(run_port, args.repeat))
        shapes = " ".join(str(tuple(x.shape)) for x in xs)
        print(f"{name:16s} {shapes:40s} {min(t_torch):9.2f} {min(t_port):9.2f} {min(t_port) / min(t_torch):6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
