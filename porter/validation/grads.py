"""Gradient parity: gradients of ``sum(output * g)`` (seeded ``g``) w.r.t. the float inputs and every trainable
parameter, torch's against the port's (by torch ``state_dict`` name)."""

from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

from porter.compare import (compare, declared_layouts, inverse_permutation, leaves, mlx_to_numpy, parse_layout,
                            port_inputs, split_call)


def grad_parity(model, ported, xs, rtol: float, atol: float, seed: int) -> Dict[str, Any]:
    """Gradients of ``sum(out_i * g_i)`` w.r.t. float inputs and trainable parameters, torch vs port."""
    import mlx.core as mx
    import torch

    gen = np.random.default_rng(seed + 7)
    xs_t = tuple(x.detach().clone().requires_grad_(x.dtype.is_floating_point) for x in xs)
    params_before = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    t_args, t_kwargs = split_call(ported, xs_t)  # keyword inputs by name (the port's input order otherwise)
    t_leaves = leaves(model(*t_args, **t_kwargs))
    weights = [gen.standard_normal(tuple(t.shape)).astype(np.float32) if t.dtype.is_floating_point else None
               for t in t_leaves]
    loss = sum((t.float() * torch.from_numpy(w)).sum() for t, w in zip(t_leaves, weights) if w is not None)
    loss.backward()
    t_param_grads = {n: p.grad.detach().numpy() for n, p in model.named_parameters()
                     if p.requires_grad and p.grad is not None}
    t_input_grads = [x.grad.detach().numpy() if x.grad is not None else None for x in xs_t]
    for n, p in model.named_parameters():  # leave the model's .grad as we found it
        p.grad = params_before[n]

    xs_mx, in_perms = port_inputs(ported, xs)
    float_idx = [i for i, x in enumerate(xs) if x.dtype.is_floating_point]
    out_layouts = None
    original = ported.trainable_parameters()

    def loss_fn(params, float_inputs):
        nonlocal out_layouts
        ported.update(params)
        args = list(xs_mx)
        for i, v in zip(float_idx, float_inputs):
            args[i] = v
        p_args, p_kwargs = split_call(ported, args)
        outs = leaves(ported(*p_args, **p_kwargs))
        if out_layouts is None:
            out_layouts = declared_layouts(ported, "output_layouts", len(outs))
        total = mx.array(0.0)
        for p, w, lay in zip(outs, weights, out_layouts):
            if w is None:
                continue
            p_t = p.transpose(inverse_permutation(parse_layout(lay, p.ndim))) if p.ndim else p
            total = total + (p_t.astype(mx.float32) * mx.array(w)).sum()
        return total

    try:
        g_params, g_inputs = mx.grad(loss_fn, argnums=(0, 1))(original, [xs_mx[i] for i in float_idx])
        p_param_grads = ported.torch_parameter_grads(g_params)
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
        # A port whose backward cannot run fails gradient parity; the report says why instead of raising.
        return {"ok": False, "input_shapes": [list(x.shape) for x in xs], "inputs": [], "parameters": [],
                "error": f"{type(exc).__name__}: {exc}"}
    finally:
        ported.update(original)

    input_rows = []
    for k, i in enumerate(float_idx):
        expected = t_input_grads[i]
        got = np.transpose(mlx_to_numpy(g_inputs[k]), inverse_permutation(in_perms[i]))
        if expected is None:
            expected = np.zeros_like(got)
        input_rows.append(dict(compare(got, expected, rtol, atol), name=f"input[{i}]"))
    param_rows = []
    for name, expected in t_param_grads.items():
        if name not in p_param_grads:
            param_rows.append({"name": name, "shape": list(expected.shape), "max_abs": math.inf,
                               "max_rel": math.inf, "scale": None, "ok": False, "note": "no gradient in the port"})
            continue
        param_rows.append(dict(compare(np.asarray(p_param_grads[name]), expected, rtol, atol), name=name))
    for name in p_param_grads:
        if name not in t_param_grads:
            got = np.asarray(p_param_grads[name])
            row = compare(got, np.zeros_like(got), rtol, atol)
            row.update(name=name, note="torch has no gradient for it")
            param_rows.append(row)
    ok = all(r["ok"] for r in input_rows + param_rows)
    return {"ok": bool(ok), "input_shapes": [list(x.shape) for x in xs], "inputs": input_rows,
            "parameters": param_rows}
