"""More linear algebra: ``torch.linalg`` ``pinv`` (and ``torch.pinverse``), ``qr``, ``lu_factor``/``lu_factor_ex``,
``lu``, ``lu_solve`` (and ``torch.lu_solve``), ``torch.lu_unpack`` and ``matrix_exp``.

Every tensor stays in torch's layout, ``(*, m, n)``. Each op is kept whole (a converter each: ``capture_decompose``
never splits ``linalg_lu_factor`` into ``linalg_lu_factor_ex`` and the effectful ``_linalg_check_errors``) and runs on
MLX's LAPACK (CPU stream) with torch's gradients (``_linalg_factor_grads.py``). ``qr`` and ``lu_factor`` are LAPACK's
own (``geqrf``/``orgqr``, ``getrf``), so ``Q``, ``R``, ``LU`` and the pivots are torch's, signs included; pivots come
out as torch's 1-based ``int32``.

Where torch differs:
* float16/bfloat16 inputs (torch's CPU linalg refuses them) are computed in float32 and cast back;
* ``qr(mode="complete")`` of a tall matrix (``m > n``) is the QR of ``[A | 0]`` (MLX returns a reduced ``Q`` only):
  the zero columns add identity reflectors, so ``Q`` is LAPACK's ``orgqr`` one, torch's; its gradient raises as
  torch's does;
* ``lu_factor(pivot=False)`` is refused as on torch's CPU; a singular matrix gives a zero on ``U``'s diagonal as
  torch's ``lu_factor_ex`` does (``lu_factor`` raises there), and ``lu_solve`` with it gives NaN for the whole
  solution of that matrix (torch: inf/NaN from its division by the zero pivot);
* gradients: ``lu_factor``/``lu`` of a non-square matrix raise (square ones follow torch);
* ``.mlxfn`` export: ``pinv`` and ``qr`` export their plain forwards; ``lu_factor``/``lu`` are refused by name (MLX
  cannot serialize its LU factorization) and ``matrix_exp`` fails (it reads its number of squarings with ``.item()``).
"""

from __future__ import annotations

import mlx.core as mx

from ..registry import kernel, register
from ..spec import SCALAR, TENSOR, Bool, Enum, Opt
from . import _linalg_factor_grads as F
from ._layers import exporting
from ._linalg_grads import mT, solve_triangular
from .linalg import _check_square, _items, _lapack_dtype, _torch_layout


def _as_work(x, what):
    if x.ndim < 2:
        raise ValueError(f"{what}: the input must have at least 2 dims, got {tuple(x.shape)}")
    work, out = _lapack_dtype(x)
    return x.astype(work), out


def _tolerance(value, like, batch):
    """An ``atol``/``rtol`` (None, a number or a tensor) as an array broadcast to ``batch``."""
    value = mx.array(0.0 if value is None else value, dtype=like.dtype)
    return mx.broadcast_to(value.astype(like.dtype), batch)


@kernel("pinv", inputs=[TENSOR, Opt(SCALAR), Opt(SCALAR)], attrs={"hermitian": Bool()})
def k_pinv(x, atol=None, rtol=None, *, hermitian):
    """``(*, m, n)`` -> ``(*, n, m)``; singular values at most ``max(atol, rtol * s_max)`` dropped. Without
    ``rtol``, torch's default: ``eps * max(m, n)``, or 0 where ``atol`` is given and positive."""
    a, out = _as_work(x, "pinv")
    if hermitian:
        _check_square(x, "pinv")
    m, n = a.shape[-2:]
    if a.size == 0:
        return mx.zeros((*a.shape[:-2], n, m), dtype=out)
    batch = a.shape[:-2]
    default = float(mx.finfo(a.dtype).eps) * max(m, n)
    given = atol is not None
    atol = _tolerance(atol, a, batch)
    if rtol is None:  # torch's get_atol_rtol: the default rtol only where atol is absent or not positive
        rtol = mx.where(atol > 0, mx.zeros_like(atol), mx.full(batch, default, dtype=a.dtype)) if given else default
    rtol = _tolerance(rtol, a, batch)
    return F.pinv(a, atol, rtol, hermitian, differentiable=not exporting()).astype(out)


@kernel("qr", inputs=[TENSOR], attrs={"mode": Enum("reduced", "complete", "r")})
def k_qr(x, *, mode):
    """``(*, m, n)`` -> ``[Q (*, m, k), R (*, k, n)]``, ``k = min(m, n)`` (``complete``: ``Q`` square, ``R``
    ``(*, m, n)``, the same as reduced for ``m <= n``; ``r``: an empty ``Q``)."""
    a, out = _as_work(x, "qr")
    m, n = a.shape[-2:]
    if mode == "complete" and m > n:
        q, r = F.qr_complete_tall_plain(a) if exporting() else F.qr_complete_tall(a)
    else:
        q, r = F.qr_reduced(a, differentiable=not exporting())
    if mode == "r":
        return [mx.zeros((0,), dtype=out), r.astype(out)]
    return [q.astype(out), r.astype(out)]


@kernel("lu_factor", inputs=[TENSOR], attrs={"outputs": Enum("factor", "factor_ex", "plu")})
def k_lu_factor(x, *, outputs):
    """``(*, m, n)`` -> ``factor``: ``[LU (*, m, n), pivots (*, k) int32, 1-based]``; ``factor_ex``: and ``info``
    (``(*)`` int32 zeros: MLX does not report a zero pivot); ``plu``: ``[P (*, m, m), L (*, m, k), U (*, k, n)]``."""
    a, out = _as_work(x, "lu_factor")
    if exporting():
        raise ValueError("lu_factor: MLX 0.32 cannot serialize its LU factorization, so a port using it cannot be "
                         "exported as .mlxfn (it runs as a port: porter.load)")
    m, n = a.shape[-2:]
    k = min(m, n)
    lu, pivots = F.lu_factor(a, differentiable=not exporting())
    if outputs == "plu":
        lower, upper = F.unpack(lu, k)
        p = F.permutation_matrix(F.permutation(pivots, m), out)
        return [p, lower.astype(out), upper.astype(out)]
    result = [lu.astype(out), pivots.astype(mx.int32) + 1]
    return result + [mx.zeros(a.shape[:-2], dtype=mx.int32)] if outputs == "factor_ex" else result


def _order(pivots, m, what):
    """torch's 1-based pivots (checked to lie in ``[1, m]``) as the row order of ``P^T``."""
    if pivots.size and (mx.min(pivots).item() < 1 or mx.max(pivots).item() > m):
        raise ValueError(f"{what}: pivots must lie in [1, {m}], got values in [{mx.min(pivots).item()}, "
                         f"{mx.max(pivots).item()}]")
    return F.permutation(pivots.astype(mx.int32) - 1, m)


@kernel("lu_solve", inputs=[TENSOR, TENSOR, TENSOR], attrs={"left": Bool(), "adjoint": Bool()})
def k_lu_solve(lu, pivots, b, *, left, adjoint):
    """``X`` with ``A X = B`` (``adjoint``: ``A^T X = B``; ``left=False``: ``X A = B`` / ``X A^T = B``), ``A = P L U``
    given as ``lu_factor``'s ``LU`` ``(*, n, n)`` and pivots ``(*, n)``; ``B`` ``(*, n, k)`` (``(*, k, n)`` right)."""
    _check_square(lu, "lu_solve")
    n = lu.shape[-1]
    if pivots.shape[-1:] != (n,) or b.ndim < 2 or b.shape[-2 if left else -1] != n:
        raise ValueError(f"lu_solve: incompatible shapes of LU {tuple(lu.shape)}, pivots {tuple(pivots.shape)} and "
                         f"B {tuple(b.shape)}")
    work, out = _lapack_dtype(lu, b)
    lu, b = lu.astype(work), b.astype(work)
    batch = mx.broadcast_shapes(lu.shape[:-2], pivots.shape[:-1], b.shape[:-2])
    lu = mx.broadcast_to(lu, (*batch, n, n))
    # MLX's triangular solve inverts U and raises for a zero pivot, where torch's trsm divides by it (inf/NaN): such
    # a U is solved with ones in place of its zeros and the whole solution of that matrix made NaN
    zero = mx.diagonal(lu, axis1=-2, axis2=-1) == 0
    singular = mx.any(zero, axis=-1)[..., None, None]
    lu = lu + mx.stop_gradient(mx.where(zero, 1, 0).astype(work)[..., None] * mx.eye(n, dtype=work))
    perm = mx.broadcast_to(_order(pivots, n, "lu_solve"), (*batch, n))
    if not left:  # X A = B  <=>  A^T X^T = B^T
        b, adjoint = mT(b), not adjoint
    b = mx.broadcast_to(b, (*batch, *b.shape[-2:]))
    diff = not exporting()
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        y = mx.take_along_axis(b, perm[..., :, None], axis=-2)
        y = solve_triangular(lu, y, upper=False, unitriangular=True, differentiable=diff)
        x = solve_triangular(lu, y, upper=True, unitriangular=False, differentiable=diff)
    else:  # A^T = U^T L^T P^T: X = P L^-T U^-T B
        y = solve_triangular(mT(lu), b, upper=False, unitriangular=False, differentiable=diff)
        y = solve_triangular(mT(lu), y, upper=True, unitriangular=True, differentiable=diff)
        x = mx.take_along_axis(y, mx.argsort(perm, axis=-1)[..., :, None], axis=-2)
    x = mx.where(singular, mx.array(float("nan"), dtype=work), x)
    return (x if left else mT(x)).astype(out)


@kernel("lu_unpack", inputs=[TENSOR, TENSOR], attrs={"unpack_data": Bool(), "unpack_pivots": Bool()})
def k_lu_unpack(lu, pivots, *, unpack_data, unpack_pivots):
    """``[P (*, m, m), L (*, m, k), U (*, k, n)]`` from a packed ``LU`` ``(*, m, n)`` and 1-based pivots ``(*, k)``;
    an output not asked for is empty, as in torch."""
    if lu.ndim < 2:
        raise ValueError(f"lu_unpack: LU must have at least 2 dims, got {tuple(lu.shape)}")
    m, n = lu.shape[-2:]
    k = min(m, n)
    if unpack_data:
        lower, upper = F.unpack(lu, k)
    else:
        lower = upper = mx.zeros((0,), dtype=lu.dtype)
    if unpack_pivots:
        if pivots.shape[-1:] != (k,):
            raise ValueError(f"lu_unpack: pivots must have {k} entries in their last dim, got {tuple(pivots.shape)}")
        p = F.permutation_matrix(_order(pivots, m, "lu_unpack"), lu.dtype)
    else:
        p = mx.zeros((0,), dtype=lu.dtype)
    return [p, lower, upper]


@kernel("matrix_exp", inputs=[TENSOR])
def k_matrix_exp(x):
    """``(*, n, n)`` -> ``exp(A)``, torch's degree-18 Taylor polynomial with scaling and squaring."""
    _check_square(x, "matrix_exp")
    if x.size == 0:
        return x
    work, out = _lapack_dtype(x)
    a = x.astype(work)
    return (F.matrix_exp_plain(a) if exporting() else F.matrix_exp(a)).astype(out)


# ---------------------------------------------------------------------------------------------------- converters
def _scalar(ctx, call, name):
    if not call.has(name) or call.arg(name) is None:
        return None
    return ctx.tensor(call.arg(name))


@register("aten.linalg_pinv.atol_rtol_tensor", "aten.linalg_pinv.atol_rtol_float")
def convert_pinv(ctx, call):
    inputs = _torch_layout(ctx, call, "self") + [_scalar(ctx, call, "atol"), _scalar(ctx, call, "rtol")]
    hermitian = bool(call.arg("hermitian")) if call.has("hermitian") else False
    ctx.emit("pinv", inputs, {"hermitian": hermitian}, perm=tuple(range(call.meta.rank)))


@register("aten.linalg_pinv.default", "aten.linalg_pinv.rcond_tensor")
def convert_pinv_rcond(ctx, call):
    """The deprecated ``rcond``: an ``rtol`` with ``atol = 0``."""
    hermitian = bool(call.arg("hermitian")) if call.has("hermitian") else False
    ctx.emit("pinv", _torch_layout(ctx, call, "self") + [0.0, ctx.tensor(call.arg("rcond"))],
             {"hermitian": hermitian}, perm=tuple(range(call.meta.rank)))


@register("aten.linalg_qr.default")
def convert_qr(ctx, call):
    mode = call.arg("mode") if call.has("mode") else "reduced"
    if mode not in ("reduced", "complete", "r"):
        call.fail("mode", "torch accepts 'reduced', 'complete' or 'r'")
    ctx.emit("qr", _torch_layout(ctx, call, "A"), {"mode": mode}, items=_items(call))


def _pivot(call):
    if call.has("pivot") and not call.arg("pivot"):
        call.fail("pivot", "LU without pivoting is not implemented on the CPU (torch's CPU refuses it too)")


def _lu(outputs):
    def convert(ctx, call):
        _pivot(call)
        if call.has("check_errors"):
            call.arg("check_errors")  # MLX reports no zero pivot: info is all zeros, nothing to check
        ctx.emit("lu_factor", _torch_layout(ctx, call, "A"), {"outputs": outputs}, items=_items(call))

    convert.__name__ = f"convert_lu_{outputs}"
    return convert


register("aten.linalg_lu_factor.default")(_lu("factor"))
register("aten.linalg_lu_factor_ex.default")(_lu("factor_ex"))
register("aten.linalg_lu.default")(_lu("plu"))


@register("aten.linalg_lu_solve.default")
def convert_lu_solve(ctx, call):
    attrs = {"left": bool(call.arg("left")) if call.has("left") else True,
             "adjoint": bool(call.arg("adjoint")) if call.has("adjoint") else False}
    ctx.emit("lu_solve", _torch_layout(ctx, call, "LU", "pivots", "B"), attrs, perm=tuple(range(call.meta.rank)))


@register("aten.lu_solve.default")
def convert_torch_lu_solve(ctx, call):
    ctx.emit("lu_solve", _torch_layout(ctx, call, "LU_data", "LU_pivots", "self"), {"left": True, "adjoint": False},
             perm=tuple(range(call.meta.rank)))


@register("aten.lu_unpack.default")
def convert_lu_unpack(ctx, call):
    attrs = {"unpack_data": bool(call.arg("unpack_data")) if call.has("unpack_data") else True,
             "unpack_pivots": bool(call.arg("unpack_pivots")) if call.has("unpack_pivots") else True}
    ctx.emit("lu_unpack", _torch_layout(ctx, call, "LU_data", "LU_pivots"), attrs, items=_items(call))


@register("aten.linalg_matrix_exp.default", "aten.matrix_exp.default")
def convert_matrix_exp(ctx, call):
    ctx.emit("matrix_exp", _torch_layout(ctx, call, "self"), {}, perm=tuple(range(call.meta.rank)))
