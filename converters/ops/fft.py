"""FFTs as ATen records them (``torch.fft.*``, ``stft`` through torch's decomposition): ``_fft_r2c`` (real to
complex, one-sided or full), ``_fft_c2c`` (forward or inverse), ``_fft_c2r`` (one-sided complex to real).

Layout: torch's (the transformed dims are torch dims). ``normalization`` is ATen's: 0 none, 1 ``1/sqrt(n)``,
2 ``1/n``, with ``n`` the product of the transformed sizes (of the output's for ``c2r``), applied whichever
direction; MLX's inverse transforms divide by ``n`` themselves, which is undone first. Inputs compute in float32 /
complex64 (MLX's FFTs); float64 inputs are refused by name rather than silently rounded.
"""

from __future__ import annotations

import math

import mlx.core as mx

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXES, INT_OR_REF, TENSOR, Bool, Enum, Int, Opt

_NORM = Int(0, 2)


def _scale(y, n: int, normalization: int, undo_inverse: bool):
    factor = float(n) if undo_inverse else 1.0
    factor *= (1.0, 1.0 / math.sqrt(n), 1.0 / n)[normalization] if n else 1.0
    return y if factor == 1.0 else y * factor


def _count(x, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


@kernel("fft", inputs=[TENSOR, Opt(INT_OR_REF)], attrs={"kind": Enum("r2c", "c2c", "c2r"), "axes": AXES,
                                                       "normalization": _NORM, "onesided": Bool(), "forward": Bool()})
def k_fft(x, last_size=None, *, kind, axes, normalization, onesided=True, forward=True):
    """``last_size``: the real output's size along the last transformed dim (``c2r`` only; it may be symbolic)."""
    if x.dtype == mx.float64:
        raise ValueError("fft: float64 inputs are not supported (MLX's FFTs compute in float32)")
    if not axes:
        return x
    if kind == "r2c":
        x = x.astype(mx.float32)
        y = mx.fft.rfftn(x, axes=axes) if onesided else mx.fft.fftn(x.astype(mx.complex64), axes=axes)
        return _scale(y, _count(x, axes), normalization, False)
    if kind == "c2c":
        x = x.astype(mx.complex64)
        y = mx.fft.fftn(x, axes=axes) if forward else mx.fft.ifftn(x, axes=axes)
        return _scale(y, _count(x, axes), normalization, not forward)
    if last_size is None or int(last_size) < 1:
        raise ValueError(f"fft: c2r needs a positive output size, got {last_size}")
    sizes = [x.shape[a] for a in axes[:-1]] + [int(last_size)]
    check_elements([*(x.shape[a] for a in range(x.ndim) if a not in axes), *sizes], "fft")  # before the transform
    y = mx.fft.irfftn(x.astype(mx.complex64), s=sizes, axes=axes)
    return _scale(y, math.prod(sizes), normalization, True)


def _fft(kind):
    def convert_fft(ctx, call):
        x = call.arg("self")
        if ctx.meta(x).dtype in ("float64", "complex128"):  # refused here, not when the port first runs
            call.fail("self", f"a {ctx.meta(x).dtype} FFT: MLX's FFTs compute in float32/complex64 only (convert the "
                              f"model in float32, or compute the FFT outside the converted forward)")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        axes = [d % max(rank, 1) for d in call.arg("dim")]
        attrs = {"kind": kind, "axes": axes, "normalization": call.arg("normalization")}
        inputs = [ctx.tensor(x, ident)]
        if kind == "r2c":
            attrs["onesided"] = bool(call.arg("onesided"))
        elif kind == "c2c":
            attrs["forward"] = bool(call.arg("forward"))
        else:
            inputs.append(ctx.value(call.arg("last_dim_size")))
        ctx.emit("fft", inputs, attrs, perm=ident)

    convert_fft.__name__ = f"convert_fft_{kind}"
    return convert_fft


register("aten._fft_r2c.default")(_fft("r2c"))
register("aten._fft_c2c.default")(_fft("c2c"))
register("aten._fft_c2r.default")(_fft("c2r"))
