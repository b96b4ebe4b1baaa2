"""Time every Porter layer against torch (as users run it: NCHW) on this machine, in one run.

    python benchmarks/layers.py [--filter max_pool] [--repeat 20] [--native off]

Each case lives in a ``benchmarks/cases_<family>.py`` file and registers itself with :func:`case`. For each case the
script prints torch and Porter medians for the forward pass and for forward+backward, and the ratio Porter/torch
(below 1.0 means Porter is faster). Small inputs also get an in-graph figure (16 calls evaluated together, per
call), where MLX's fixed per-eval cost is shared as it is inside a model. Porter's pooling layers take the native CPU kernels when they are built
(``porter build-kernels``); ``--native off`` times the pure-MLX path that GPUs and machines without them use.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import porter  # noqa: E402,F401  (first: gives MLX its optimized BLAS, which must happen before mlx.core loads)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from porter.bench import time_fn  # noqa: E402
from porter.layers import _native  # noqa: E402


@dataclass
class Case:
    name: str
    shape: tuple  # torch layout (N, C, *spatial)
    make_torch: Callable[[], Callable]  # returns f(x_nchw) -> tensor or tuple
    make_porter: Callable[[], Callable]  # returns f(x_nhwc) -> array or tuple
    backward: bool = True


CASES: list[Case] = []
GRAPH_MAX_ELEMENTS = 1 << 18  # inputs up to this size also get the in-graph timing
GRAPH_CALLS = 16


def case(name: str, shape: tuple, make_torch: Callable, make_porter: Callable, backward: bool = True) -> None:
    if any(c.name == name for c in CASES):
        raise ValueError(f"benchmark case {name!r} registered twice")
    CASES.append(Case(name, tuple(shape), make_torch, make_porter, backward))


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _median_ms(fn: Callable, repeat: int) -> float:
    return time_fn(fn, warmup=3, repeat=repeat)["median_ms"]


def run_case(c: Case, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(c.shape).astype(np.float32)
    xt = torch.from_numpy(x_np)
    xm = mx.array(np.ascontiguousarray(np.moveaxis(x_np, 1, -1)))
    ft, fm = c.make_torch(), c.make_porter()
    row = {"name": c.name, "shape": c.shape}
    with torch.no_grad():
        row["torch_fwd"] = _median_ms(lambda: _first(ft(xt)), repeat)
    row["porter_fwd"] = _median_ms(lambda: mx.eval(_first(fm(xm))), repeat)
    if x_np.size <= GRAPH_MAX_ELEMENTS:
        # in a model a layer is one node of a larger graph, evaluated once: the per-eval fixed cost (a hand-off to
        # MLX's stream thread, 15-70 us on this VM depending on where the threads land) is shared. Time 16
        # independent calls in one eval (torch: 16 calls) to show the per-layer cost in that setting.
        xs = [xm + 0 for _ in range(GRAPH_CALLS)]
        ts = [xt.clone() for _ in range(GRAPH_CALLS)]
        mx.eval(xs)
        with torch.no_grad():
            row["torch_graph"] = _median_ms(lambda: [_first(ft(t)) for t in ts], repeat) / GRAPH_CALLS
        row["porter_graph"] = _median_ms(lambda: mx.eval([_first(fm(a)) for a in xs]), repeat) / GRAPH_CALLS
    if c.backward:
        xg = xt.clone().requires_grad_(True)

        def torch_step():
            xg.grad = None
            _first(ft(xg)).sum().backward()

        # value_and_grad: a linear op's gradient needs no forward values, so mx.grad alone would skip the forward
        grad_fn = mx.value_and_grad(lambda a: _first(fm(a)).sum())
        row["torch_bwd"] = _median_ms(torch_step, repeat)
        row["porter_bwd"] = _median_ms(lambda: mx.eval(grad_fn(xm)), repeat)
    return row


def load_cases() -> None:
    # run as a script this module is `__main__`; make `from benchmarks.layers import case` register here, not in a
    # second copy of the module
    sys.modules.setdefault("benchmarks.layers", sys.modules[__name__])
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "cases_*.py"))):
        importlib.import_module(f"benchmarks.{os.path.basename(path)[:-3]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter", default="", help="run only cases whose name contains this text")
    parser.add_argument("--repeat", type=int, default=20, help="timed repetitions per measurement (median)")
    parser.add_argument("--native", choices=("auto", "off"), default="auto",
                        help="auto: the native CPU kernels when built (what users get); off: the pure-MLX path")
    args = parser.parse_args(argv)
    with _native.use_native(args.native == "auto"):
        return _run(args)


def _run(args) -> int:
    load_cases()
    selected = [c for c in CASES if args.filter in c.name]
    if not selected:
        print(f"no benchmark case matches --filter {args.filter!r}", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), mlx {mx.__version__} on {mx.default_device()}")
    native = _native.status()
    if _native.active():
        print(f"porter pooling + depthwise conv: native CPU kernels ({native['threads']} threads)")
    else:
        print(f"porter pooling + depthwise conv: pure MLX ops ({'--native off' if native['available'] else native['reason']})")
    head = f"{'case':44s} {'shape (torch layout)':22s} {'fwd torch':>9s} {'porter':>8s} {'ratio':>6s}"
    head += f" {'f+b torch':>9s} {'porter':>8s} {'ratio':>6s}"
    print(head)
    print("-" * len(head))
    floor = mx.zeros((2, 28, 28, 16))
    mx.eval(floor)
    floor_ms = _median_ms(lambda: mx.eval(floor + 1), args.repeat * 5)
    print(f"(MLX's fixed cost of one mx.eval of a single small op here: {floor_ms:.3f}ms; small inputs also get an "
          f"'in-graph' figure: {GRAPH_CALLS} calls in one eval, per call)")
    for c in selected:
        r = run_case(c, args.repeat)
        line = f"{r['name']:44s} {str(r['shape']):22s} {r['torch_fwd']:8.2f}ms {r['porter_fwd']:6.2f}ms"
        line += f" {r['porter_fwd'] / r['torch_fwd']:5.2f}x"
        if "torch_bwd" in r:
            line += f" {r['torch_bwd']:7.2f}ms {r['porter_bwd']:6.2f}ms {r['porter_bwd'] / r['torch_bwd']:5.2f}x"
        if "torch_graph" in r:
            line += (f"   in-graph fwd {r['torch_graph']:.3f}ms {r['porter_graph']:.3f}ms "
                     f"{r['porter_graph'] / r['torch_graph']:5.2f}x")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
