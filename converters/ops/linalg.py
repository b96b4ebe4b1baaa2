"""Linear algebra: ``torch.linalg`` ``inv``, ``solve``, ``solve_triangular``, ``cholesky``, ``det``, ``slogdet``,
``svdvals``, ``svd``, ``eigvalsh``, ``eigh``, and ``torch.inverse / det / logdet / slogdet / cholesky /
cholesky_solve``.

Every tensor stays in torch's layout, ``(*, m, n)`` with the matrix in the last two dims. The ops are kept whole
(a converter each, so ``capture_decompose`` never splits ``linalg_inv`` into ``linalg_inv_ex`` and the effectful
``_linalg_check_errors``) and run on MLX's LAPACK (CPU stream, also under a GPU default device) with torch's
gradients (``_linalg_grads.py``; ``svd`` and ``eigh`` vectors have none: MLX raises on their VJP).

Where torch differs:
* float16/bfloat16 inputs (torch's CPU linalg refuses them; a port can meet them after ``ported.astype``) are
  computed in float32 and cast back;
* torch raises at run time for a singular ``inv``/``solve`` input; the port's MLX raises a ``RuntimeError`` when the
  result is evaluated. A matrix that is not positive-definite gets a NaN Cholesky factor (torch raises);
* ``det``/``slogdet`` of a singular matrix give torch's 0 / (0, -inf), but their gradients there are not finite
  (torch's falls back to an SVD).
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import TENSOR, Bool, Enum
from . import _linalg_grads as G
from ._layers import export_note, exporting

_HALF = (mx.float16, mx.bfloat16)


def _lapack_dtype(*arrays):
    """The dtype MLX's LAPACK computes these in (float32 for half inputs), and the dtype to return."""
    dtype = arrays[0].dtype
    for a in arrays[1:]:
        dtype = (mx.zeros((), dtype) + mx.zeros((), a.dtype)).dtype  # MLX's promotion
    if not mx.issubdtype(dtype, mx.floating):
        raise TypeError(f"linear algebra needs floating-point input, got {dtype}")
    return (mx.float32 if dtype in _HALF else dtype), dtype


def _run(name, *arrays):
    """``_linalg_grads``'s ``name`` on ``arrays`` in a LAPACK dtype; the plain forward while exporting."""
    work, out = _lapack_dtype(*arrays)
    arrays = [a.astype(work) for a in arrays]
    if exporting():
        export_note(f"{name}: custom gradient -> forward only")
        result = G.PLAIN[name](*arrays)
    else:
        result = G.DIFFERENTIABLE[name](*arrays)
    if isinstance(result, (tuple, list)):
        return [r.astype(out) for r in result]
    return result.astype(out)


def _check_square(x, what):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{what}: A must be batches of square matrices, but they are {tuple(x.shape)}")


MATRIX_FNS = Enum("inv", "det", "slogdet", "logdet", "svdvals")


@kernel("matrix_fn", inputs=[TENSOR], attrs={"fn": MATRIX_FNS})
def k_matrix_fn(x, *, fn):
    """``(*, m, n)`` -> ``inv``: ``(*, n, n)``; ``det``/``logdet``: ``(*)``; ``slogdet``: ``[sign, logabsdet]``;
    ``svdvals``: ``(*, min(m, n))``."""
    if fn == "svdvals":
        if x.ndim < 2:
            raise ValueError(f"svdvals: the input must have at least 2 dims, got {tuple(x.shape)}")
        if x.size == 0:
            return mx.zeros((*x.shape[:-2], min(x.shape[-2:])), dtype=x.dtype)
        return _run("svdvals", x)
    _check_square(x, fn)
    if x.size == 0:  # LAPACK is never called on an empty batch or a 0x0 matrix: torch's values
        batch = x.shape[:-2]
        if fn == "inv":
            return x
        if fn == "slogdet":
            return [mx.ones(batch, dtype=x.dtype), mx.zeros(batch, dtype=x.dtype)]
        return mx.ones(batch, dtype=x.dtype) if fn == "det" else mx.zeros(batch, dtype=x.dtype)
    if fn in ("inv", "det"):
        return _run(fn, x)
    sign, logabs = _run("slogdet", x)
    if fn == "slogdet":
        return [sign, logabs]
    # torch's logdet: log|det| for a positive determinant, NaN for a negative one, -inf for zero
    return mx.where(sign < 0, mx.array(float("nan"), dtype=logabs.dtype), logabs)


@kernel("cholesky", inputs=[TENSOR], attrs={"upper": Bool()})
def k_cholesky(x, *, upper):
    """``(*, n, n)`` -> the lower factor ``L`` (``upper``: ``L^T``), read from the lower triangle."""
    _check_square(x, "cholesky")
    if x.size == 0:
        return x
    lower = _run("cholesky", x)
    return G.mT(lower) if upper else lower


def _broadcast_pair(a, b):
    batch = mx.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return mx.broadcast_to(a, (*batch, *a.shape[-2:])), mx.broadcast_to(b, (*batch, *b.shape[-2:]))


def _solve_shapes(a, b, left, what, vectors=True):
    """``a``, ``b`` as broadcast matrices for ``A X = B`` (``left=False``: ``X A = B`` transposed), and whether ``b``
    was a vector (torch's rule: 1-d, or one dim less than ``A`` with ``A``'s leading shape)."""
    _check_square(a, what)
    vector = vectors and (b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1])))
    if vector:
        b = b[..., None] if left else b[..., None, :]
    if b.ndim < 2 or b.shape[-2 if left else -1] != a.shape[-1]:
        raise ValueError(f"{what}: incompatible shapes of A {tuple(a.shape)} and B {tuple(b.shape)}")
    if not left:  # X A = B  <=>  A^T X^T = B^T
        a, b = G.mT(a), G.mT(b)
    a, b = _broadcast_pair(a, b)
    return a, b, vector


def _solve_result(x, left, vector):
    if not left:
        x = G.mT(x)
    if vector:
        x = x[..., 0] if left else x[..., 0, :]
    return x


@kernel("solve", inputs=[TENSOR, TENSOR], attrs={"left": Bool()})
def k_solve(a, b, *, left):
    a, b, vector = _solve_shapes(a, b, left, "solve")
    x = b if b.size == 0 or a.size == 0 else _run("solve", a, b)
    return _solve_result(x, left, vector)


@kernel("solve_triangular", inputs=[TENSOR, TENSOR], attrs={"upper": Bool(), "left": Bool(),
                                                            "unitriangular": Bool()})
def k_solve_triangular(a, b, *, upper, left, unitriangular):
    a, b, _ = _solve_shapes(a, b, left, "solve_triangular", vectors=False)  # B is always a matrix here
    if b.size == 0:
        return _solve_result(b, left, False)
    work, out = _lapack_dtype(a, b)
    x = G.solve_triangular(a.astype(work), b.astype(work), upper != (not left), unitriangular,
                           differentiable=not exporting())
    return _solve_result(x.astype(out), left, False)


@kernel("cholesky_solve", inputs=[TENSOR, TENSOR], attrs={"upper": Bool()})
def k_cholesky_solve(b, factor, *, upper):
    """``X`` with ``A X = B``, ``A = L L^T`` given by its lower factor ``L`` (``upper``: by ``U = L^T``)."""
    _check_square(factor, "cholesky_solve")
    if b.ndim < 2 or b.shape[-2] != factor.shape[-1]:
        raise ValueError(f"cholesky_solve: incompatible shapes of B {tuple(b.shape)} and the factor "
                         f"{tuple(factor.shape)}")
    b, factor = _broadcast_pair(b, factor)
    if b.size == 0:
        return b
    return _run("cholesky_solve", b, G.mT(factor) if upper else factor)


@kernel("eigvalsh", inputs=[TENSOR], attrs={"uplo": Enum("L", "U"), "vectors": Bool()})
def k_eigvalsh(x, *, uplo, vectors):
    """``(*, n, n)`` -> eigenvalues ascending ``(*, n)`` (``vectors``: ``[values, vectors]``, no gradient)."""
    _check_square(x, "eigvalsh")
    work, out = _lapack_dtype(x)
    if vectors:
        w, v = mx.linalg.eigh(x.astype(work), UPLO=uplo, stream=G.CPU)
        return [w.astype(out), v.astype(out)]
    return G.eigvalsh(x.astype(work), uplo, differentiable=not exporting()).astype(out)


@kernel("svd", inputs=[TENSOR], attrs={"full_matrices": Bool()})
def k_svd(x, *, full_matrices):
    """``(*, m, n)`` -> ``[U, S, Vh]`` (no gradient); ``full_matrices=False``: the first ``min(m, n)`` columns/rows."""
    if x.ndim < 2:
        raise ValueError(f"svd: the input must have at least 2 dims, got {tuple(x.shape)}")
    work, out = _lapack_dtype(x)
    u, s, vt = mx.linalg.svd(x.astype(work), compute_uv=True, stream=G.CPU)
    if not full_matrices:
        k = s.shape[-1]
        u, vt = u[..., :, :k], vt[..., :k, :]
    return [u.astype(out), s.astype(out), vt.astype(out)]


# ---------------------------------------------------------------------------------------------------- converters
def _torch_layout(ctx, call, *names):
    return [ctx.tensor(call.arg(n), L.identity(ctx.meta(call.arg(n)).rank)) for n in names]


def _items(call):
    from ..convert import Info

    return [Info(m, L.identity(m.rank)) for m in call.meta.items]


def _matrix_fn(fn, arg):
    def convert(ctx, call):
        inputs = _torch_layout(ctx, call, arg)
        if fn == "slogdet":
            return ctx.emit("matrix_fn", inputs, {"fn": fn}, items=_items(call))
        return ctx.emit("matrix_fn", inputs, {"fn": fn}, perm=L.identity(call.meta.rank))

    convert.__name__ = f"convert_{fn}"
    return convert


register("aten.linalg_inv.default")(_matrix_fn("inv", "A"))
register("aten.inverse.default")(_matrix_fn("inv", "self"))
register("aten.linalg_det.default")(_matrix_fn("det", "A"))
register("aten.det.default")(_matrix_fn("det", "self"))
register("aten.linalg_slogdet.default")(_matrix_fn("slogdet", "A"))
register("aten.slogdet.default")(_matrix_fn("slogdet", "self"))
register("aten.logdet.default")(_matrix_fn("logdet", "self"))


@register("aten.linalg_svdvals.default")
def convert_svdvals(ctx, call):
    if call.has("driver") and call.arg("driver") is not None:
        call.fail("driver", "a LAPACK driver can be chosen on CUDA only")
    ctx.emit("matrix_fn", _torch_layout(ctx, call, "A"), {"fn": "svdvals"}, perm=L.identity(call.meta.rank))


@register("aten.linalg_svd.default")
def convert_svd(ctx, call):
    if call.has("driver") and call.arg("driver") is not None:
        call.fail("driver", "a LAPACK driver can be chosen on CUDA only")
    ctx.emit("svd", _torch_layout(ctx, call, "A"), {"full_matrices": call.arg("full_matrices")},
             items=_items(call))


@register("aten.linalg_cholesky.default", "aten.cholesky.default")
def convert_cholesky(ctx, call):
    upper = call.arg("upper") if call.has("upper") else False
    ctx.emit("cholesky", _torch_layout(ctx, call, "self"), {"upper": bool(upper)}, perm=L.identity(call.meta.rank))


@register("aten.linalg_solve.default")
def convert_solve(ctx, call):
    left = call.arg("left") if call.has("left") else True
    ctx.emit("solve", _torch_layout(ctx, call, "A", "B"), {"left": bool(left)}, perm=L.identity(call.meta.rank))


@register("aten.linalg_solve_triangular.default")
def convert_solve_triangular(ctx, call):
    attrs = {"upper": bool(call.arg("upper")),
             "left": bool(call.arg("left")) if call.has("left") else True,
             "unitriangular": bool(call.arg("unitriangular")) if call.has("unitriangular") else False}
    ctx.emit("solve_triangular", _torch_layout(ctx, call, "self", "B"), attrs, perm=L.identity(call.meta.rank))


@register("aten.cholesky_solve.default")
def convert_cholesky_solve(ctx, call):
    upper = call.arg("upper") if call.has("upper") else False
    ctx.emit("cholesky_solve", _torch_layout(ctx, call, "self", "input2"), {"upper": bool(upper)},
             perm=L.identity(call.meta.rank))


@register("aten.linalg_eigvalsh.default")
def convert_eigvalsh(ctx, call):
    uplo = call.arg("UPLO") if call.has("UPLO") else "L"
    ctx.emit("eigvalsh", _torch_layout(ctx, call, "self"), {"uplo": uplo, "vectors": False},
             perm=L.identity(call.meta.rank))


@register("aten.linalg_eigh.default")
def convert_eigh(ctx, call):
    uplo = call.arg("UPLO") if call.has("UPLO") else "L"
    ctx.emit("eigvalsh", _torch_layout(ctx, call, "self"), {"uplo": uplo, "vectors": True}, items=_items(call))
