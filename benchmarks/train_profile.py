"""Where a training step's time goes: every layer of a converted model timed forward + backward in isolation at the
model's own shapes, MLX (through Porter) against torch, summed by layer type.

    python benchmarks/train_profile.py --models resnet18,mobilenet_v2 --batch 8 --threads 1 [--repeat 5] [--nodes]

Any model of ``benchmarks/model_list.py`` (``convnext_tiny``, ``r3d_18``: the zoo tests' twins), at its own input
shape unless ``--size`` sets the spatial size.

Each node of the converted program (``PortedModel._program``) runs on the inputs it gets in the model's forward:
``mx.vjp`` of the node with respect to its floating inputs and its layer's trainable parameters (not the model's
input image, which needs no gradient in a training step), against a random cotangent; torch runs the module of the
same name (eval mode, parameters requiring grad, ``inplace`` off) on the same data, NCHW, with ``backward``.
Times are the minimum over ``--repeat`` calls of wall clock and of process CPU time. Kernel nodes without a torch
module (residual adds, reshapes) are MLX-only rows. Both frameworks run in this process (Porter's BLAS is private to
MLX, torch keeps its own); the whole step (``porter.bench`` step: forward, backward, SGD) is timed too, so the
isolated sum can be compared with it. Threads are set before MLX, the kernels or torch start.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks.model_list, and tests.zoo.twins for the twins it builds


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=None,
                        help="spatial size (default: the model's own input in benchmarks/model_list.py)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", action="store_true", help="also print every node's row")
    return parser.parse_args(argv)


def _timed(fn, repeat):
    """(min wall ms, min CPU ms) of ``fn()`` over ``repeat`` calls after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return min(wall), min(cpu)


def _mlx_rows(ported, x, repeat):
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from porter.converters.tree import resolve

    program = ported._program
    input_names = {spec["name"] for spec in program.graph["inputs"]}
    env = {spec["name"]: value for spec, value in zip(program.graph["inputs"], (x,))}
    rows = []
    for node, fn in zip(program.graph["nodes"], program.kernels):
        args = [ported._resolve(spec, env) for spec in node["inputs"]]
        layer = None
        if fn is None:
            layer = resolve(ported, program.layer_keys[node["attrs"]["module"]])
            kind = type(layer).__name__ + (f":{layer.fn}" if isinstance(getattr(layer, "fn", None), str) else "")
            call, attrs = layer, {}
        else:
            kind = node["kernel"] + (f":{node['attrs']['fn']}" if "fn" in node["attrs"] else "")
            call, attrs = fn, node["attrs"]
        out = call(*args, **attrs)
        mx.eval(out)
        env[node["outputs"][0]] = out
        # differentiate w.r.t. floating array inputs that are not the model input, and the layer's parameters
        grad_at = [i for i, (a, spec) in enumerate(zip(args, node["inputs"]))
                   if isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating)
                   and not (isinstance(spec, dict) and spec.get("ref") in input_names)]
        params = tree_flatten(layer.trainable_parameters()) if layer is not None else []
        names = [k for k, _ in params]
        primals = [args[i] for i in grad_at] + [v for _, v in params]
        if not isinstance(out, mx.array) or not mx.issubdtype(out.dtype, mx.floating) or not primals:
            continue

        def fun(*prims, args=args, grad_at=grad_at, names=names, layer=layer, call=call, attrs=attrs):
            a = list(args)
            for i, p in zip(grad_at, prims):
                a[i] = p
            if names:
                layer.update(tree_unflatten(list(zip(names, prims[len(grad_at):]))))
            return call(*a, **attrs)

        cot = mx.random.normal(out.shape).astype(out.dtype)
        saved = list(params)
        fwd = _timed(lambda: mx.eval(call(*args, **attrs)), repeat)
        both = _timed(lambda: mx.eval(mx.vjp(fun, primals, [cot])), repeat)
        if layer is not None:
            layer.update(tree_unflatten(saved))
        rows.append(dict(module=node.get("module") or "", kind=kind, shape=tuple(args[0].shape)
                         if isinstance(args[0], mx.array) else None, fwd=fwd, both=both))
    return rows


def _torch_rows(model, x, repeat):
    import torch

    shapes = {}
    leaves = {name: m for name, m in model.named_modules() if not list(m.children())}

    def hook(name):
        def record(module, inputs, output):
            shapes.setdefault(name, (inputs[0].detach().clone(), output.shape))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in leaves.items()]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    rows = {}
    for name, (inp, out_shape) in shapes.items():
        module = leaves[name]
        if hasattr(module, "inplace"):
            module.inplace = False
        needs_input_grad = inp.data_ptr() != x.data_ptr() and not torch.equal(inp, x)
        cot = torch.randn(out_shape)

        def both(module=module, inp=inp, cot=cot, needs=needs_input_grad):
            a = inp.clone().requires_grad_(needs) if needs else inp
            module.zero_grad(set_to_none=True)
            out = module(a)
            if out.requires_grad:
                out.backward(cot)

        def fwd(module=module, inp=inp):
            with torch.no_grad():
                module(inp)

        rows[name] = dict(fwd=_timed(fwd, repeat), both=_timed(both, repeat), kind=type(module).__name__)
    return rows


def profile(name, batch, size, repeat, show_nodes):
    import mlx.core as mx
    import numpy as np
    import torch

    import porter
    from porter.bench import _torch_model, _train_step_mlx, _train_step_torch

    from benchmarks.model_list import MODELS

    if name not in MODELS:
        raise SystemExit(f"--models: {name!r} is not in benchmarks/model_list.py; models: {', '.join(MODELS)}")
    entry = MODELS[name]
    chw = entry["chw"] if size is None else entry["chw"][:-2] + (size, size)
    model = _torch_model(dict(builder=entry["builder"], builder_kwargs=entry["builder_kwargs"]))
    x = np.random.default_rng(0).standard_normal((batch, *chw)).astype(np.float32)
    xt = torch.from_numpy(x)
    ported = porter.convert(model, xt)
    xm = mx.array(np.ascontiguousarray(np.moveaxis(x, 1, -1)))
    step_mlx = _timed(_train_step_mlx(ported, xm), repeat)
    step_torch = _timed(_train_step_torch(model, xt), repeat)
    mrows = _mlx_rows(ported, xm, repeat)
    trows = _torch_rows(model, xt, repeat)
    kinds: dict = {}
    for r in mrows:
        t = trows.get(r["module"])
        k = kinds.setdefault(r["kind"], dict(n=0, mlx=[0.0] * 4, torch=[0.0] * 4, torch_n=0))
        k["n"] += 1
        for i, v in enumerate(r["fwd"] + r["both"]):
            k["mlx"][i] += v
        if t is not None:
            k["torch_n"] += 1
            for i, v in enumerate(t["fwd"] + t["both"]):
                k["torch"][i] += v
        if show_nodes:
            tb = t["both"] if t else (float("nan"),) * 2
            print(f"  {r['module'] or '-':<28} {r['kind']:<22} {str(r['shape']):<22} mlx fwd+bwd wall {r['both'][0]:7.2f} "
                  f"cpu {r['both'][1]:7.2f} | torch wall {tb[0]:7.2f} cpu {tb[1]:7.2f}")
    print(f"\n{name} batch {batch} {'x'.join(map(str, chw[1:]))}, threads {os.environ.get('PORTER_NUM_THREADS')}: whole step "
          f"MLX wall {step_mlx[0]:.1f} cpu {step_mlx[1]:.1f} ms, torch wall {step_torch[0]:.1f} cpu {step_torch[1]:.1f} "
          f"ms (min of {repeat})")
    print("| layer kind | n | MLX fwd wall / cpu | MLX fwd+bwd wall / cpu | torch fwd+bwd wall / cpu | ratio wall / cpu |")
    print("|---|---|---|---|---|---|")
    total = [0.0] * 4
    for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["mlx"][3]):
        m, t = k["mlx"], k["torch"]
        total = [a + b for a, b in zip(total, m)]
        ratio = (f"{m[2] / t[2]:.2f} / {m[3] / t[3]:.2f}" if k["torch_n"] == k["n"] and t[3] > 0 else "-")
        tcol = f"{t[2]:.1f} / {t[3]:.1f}" if k["torch_n"] else "-"
        print(f"| {kind} | {k['n']} | {m[0]:.1f} / {m[1]:.1f} | {m[2]:.1f} / {m[3]:.1f} | {tcol} | {ratio} |")
    print(f"| sum | | {total[0]:.1f} / {total[1]:.1f} | {total[2]:.1f} / {total[3]:.1f} | | |")


def main(argv=None):
    args = _parse(argv if argv is not None else sys.argv[1:])
    n = str(args.threads)
    os.environ.update(PORTER_NUM_THREADS=n, PORTER_BLAS_THREADS=n)  # read when porter and its kernels start
    import porter  # noqa: F401  (first: picks MLX's BLAS)
    import torch

    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        profile(name.strip(), args.batch, args.size, args.repeat, args.nodes)


if __name__ == "__main__":
    main()
