"""The one torch-vs-Porter reference check used by every layer test.

Torch is the oracle: each check runs torch and Porter on the same data inside the test. Layout conversion
(torch's ``(N, C, *spatial)`` / ``(C, *spatial)`` to Porter's channels-last) happens here and nowhere else.
"""

from __future__ import annotations

from typing import Callable, Optional

import mlx.core as mx
import numpy as np
import torch

TORCH_TO_MX = {
    torch.float32: mx.float32,
    torch.float16: mx.float16,
    torch.bfloat16: mx.bfloat16,
    torch.float64: mx.float64,  # MLX computes float64 on the CPU (Porter's convs too: layers/_conv_f64.py)
    torch.int64: mx.int64,
    torch.int32: mx.int32,
    torch.uint8: mx.uint8,
    torch.int8: mx.int8,
    torch.int16: mx.int16,
}


# ---------------------------------------------------------------------------------------------------- layout
def to_channels_last(a: np.ndarray, batched: bool) -> np.ndarray:
    """``(N, C, *S)`` -> ``(N, *S, C)``; unbatched ``(C, *S)`` -> ``(*S, C)``."""
    return np.moveaxis(a, 1 if batched else 0, -1)


def to_channels_first(a: np.ndarray, batched: bool) -> np.ndarray:
    """Inverse of :func:`to_channels_last`."""
    return np.moveaxis(a, -1, 1 if batched else 0)


def torch_to_mx(t: torch.Tensor, batched: bool, channels_last: bool = True) -> mx.array:
    """A torch tensor as an MLX array with the same values, in Porter's layout."""
    t = t.detach()
    a = (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # bfloat16 -> float32 is exact
    if channels_last:
        a = to_channels_last(a, batched)
    out = mx.array(np.ascontiguousarray(a), dtype=mx.float64 if t.dtype == torch.float64 else None)
    return out.astype(mx.bfloat16) if t.dtype == torch.bfloat16 else out


def mx_to_numpy(a: mx.array, batched: bool, channels_last: bool = True) -> np.ndarray:
    """An MLX result in torch's layout, as numpy (bfloat16 is widened to float32 exactly)."""
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
    out = np.array(a)
    return to_channels_first(out, batched) if channels_last else out


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


# ---------------------------------------------------------------------------------------------------- compare
def assert_close(actual: np.ndarray, expected: np.ndarray, *, atol: float, rtol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != torch {expected.shape}"
    if atol == 0 and rtol == 0:
        same = (actual == expected) | (np.isnan(actual) & np.isnan(expected)) if actual.dtype.kind == "f" else (
            actual == expected
        )
        if not np.all(same):
            bad = np.argwhere(~same)[:5]
            raise AssertionError(
                f"{what}: {int((~same).sum())} of {same.size} elements differ (exact compare); first at "
                f"{bad.tolist()}: porter {[actual[tuple(b)] for b in bad]} torch {[expected[tuple(b)] for b in bad]}"
            )
        return
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True, err_msg=what)


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for float comparisons at ``dtype``."""
    if dtype == torch.float16:
        return 2e-3, 2e-3
    if dtype == torch.bfloat16:
        return 2e-2, 2e-2
    if dtype == torch.float64:
        return 1e-12, 1e-12
    return 1e-5, 1e-5


# ---------------------------------------------------------------------------------------------------- main check
def check_against_torch(
    torch_fn: Callable,
    porter_fn: Callable,
    x: torch.Tensor,
    *,
    nd: int,
    exact: bool = False,
    grad: bool = True,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    grad_atol: Optional[float] = None,
    grad_rtol: Optional[float] = None,
    extra_inputs: tuple = (),
    params: Optional[dict] = None,
    seed: int = 0,
) -> None:
    """Run ``torch_fn(x)`` and ``porter_fn(x_channels_last)`` and compare everything they return.

    ``x`` is in torch's layout (batched ``(N, C, *S)`` when ``x.ndim == nd + 2``, else unbatched ``(C, *S)``).
    Both functions may return a tensor or a tuple whose first element is the output; further float elements are
    compared as values, integer elements (indices) exactly. Shape and dtype are checked before values.
    ``exact``: values compare with atol=rtol=0 (max-type ops). ``grad``: the input gradient of
    ``sum(out * g)`` for a seeded random ``g`` must match torch's autograd.
    ``extra_inputs``: further torch tensors passed to both functions after ``x`` (converted to channels-last when
    they have the input's rank, e.g. unpool indices).
    ``params``: parameters whose gradients are compared too, ``{name: (torch_leaf, porter_array, to_torch)}``:
    ``torch_leaf`` is a tensor with ``requires_grad`` that ``torch_fn`` uses (e.g. a module's weight),
    ``porter_array`` its Porter counterpart, ``to_torch`` maps a Porter-layout numpy array to torch's layout
    (``None``: same layout). ``porter_fn`` then gets the dict ``{name: porter_array}`` as its last argument and must
    compute with those arrays (for a module: ``module.update(p)`` first), so that MLX can differentiate them.
    """
    batched = x.ndim == nd + 2
    floating = x.dtype.is_floating_point
    d_atol, d_rtol = default_tolerance(x.dtype)
    atol = 0.0 if exact else (d_atol if atol is None else atol)
    rtol = 0.0 if exact else (d_rtol if rtol is None else rtol)

    xt = x.detach().clone().requires_grad_(grad and floating)
    xm = torch_to_mx(x, batched)
    extras_t = tuple(e.detach().clone() if isinstance(e, torch.Tensor) else e for e in extra_inputs)
    extras_m = tuple(
        torch_to_mx(e, batched) if isinstance(e, torch.Tensor) and e.ndim == x.ndim else
        (torch_to_mx(e, batched, channels_last=False) if isinstance(e, torch.Tensor) else e)
        for e in extra_inputs
    )

    params = params or {}
    params_m = {name: p_m for name, (_, p_m, _) in params.items()}
    for leaf, _, _ in params.values():
        leaf.grad = None
    call_extras_m = extras_m + ((params_m,) if params else ())

    out_t = torch_fn(xt, *extras_t)
    out_m = porter_fn(xm, *call_extras_m)
    tup_t = out_t if isinstance(out_t, tuple) else (out_t,)
    tup_m = out_m if isinstance(out_m, tuple) else (out_m,)
    assert len(tup_t) == len(tup_m), f"torch returned {len(tup_t)} outputs, porter {len(tup_m)}"

    for i, (a_t, a_m) in enumerate(zip(tup_t, tup_m)):
        what = "output" if i == 0 else f"output[{i}]"
        assert isinstance(a_m, mx.array), f"{what}: porter returned {type(a_m).__name__}, not mx.array"
        expected_dtype = TORCH_TO_MX[a_t.dtype]
        assert a_m.dtype == expected_dtype, f"{what}: dtype {a_m.dtype} != torch {a_t.dtype}"
        actual = mx_to_numpy(a_m, batched, channels_last=a_t.ndim == x.ndim)
        expected = torch_to_numpy(a_t)
        is_int = not a_t.dtype.is_floating_point
        assert_close(actual, expected, atol=0 if is_int else atol, rtol=0 if is_int else rtol, what=what)

    if not (grad and floating) or tup_t[0].numel() == 0:
        return
    rng = np.random.default_rng(seed)
    g_np = rng.standard_normal(tuple(tup_t[0].shape)).astype(np.float32)
    g_t = torch.from_numpy(g_np).to(tup_t[0].dtype)
    (tup_t[0].float() * g_t.float()).sum().backward()
    g_m = torch_to_mx(g_t, batched) if tup_t[0].ndim == x.ndim else torch_to_mx(g_t, batched, False)

    def loss(inp, p):
        o = porter_fn(inp, *extras_m, *((p,) if params else ()))
        o = o[0] if isinstance(o, tuple) else o
        return (o.astype(mx.float32) * g_m.astype(mx.float32)).sum()

    grad_m, grad_p = mx.grad(loss, argnums=(0, 1))(xm, params_m)
    ga, gr = default_tolerance(x.dtype)
    cmp = np.float64 if x.dtype == torch.float64 else np.float32  # gradients compare at float32 unless float64
    if grad_atol is None:
        grad_atol = ga if not exact else max(ga, 1e-6)
    if grad_rtol is None:
        grad_rtol = gr if not exact else max(gr, 1e-6)
    assert_close(
        mx_to_numpy(grad_m, batched).astype(cmp),
        torch_to_numpy(xt.grad).astype(cmp),
        atol=grad_atol,
        rtol=grad_rtol,
        what="input gradient",
    )
    for name, (leaf, _, to_torch) in params.items():
        g = mx_to_numpy(grad_p[name], batched, channels_last=False).astype(cmp)
        assert leaf.grad is not None, f"torch computed no gradient for parameter {name!r}"
        assert_close(
            to_torch(g) if to_torch is not None else g,
            torch_to_numpy(leaf.grad).astype(cmp),
            atol=grad_atol,
            rtol=grad_rtol,
            what=f"gradient of {name!r}",
        )
