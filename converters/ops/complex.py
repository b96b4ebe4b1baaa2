"""Complex tensors as rotary embeddings use them (Meta's LLaMA ``apply_rotary_emb``): ``view_as_complex``,
``view_as_real``, ``polar``, ``complex``, ``real``/``imag``, ``angle``, ``conj``; products and sums of complex tensors go through the
ordinary elementwise ops (MLX's ``complex64``, torch's ``complex64``).

Layout: torch's. ``view_as_complex`` reads a float tensor whose last dim is 2 (real, imaginary) and drops it;
``view_as_real`` adds it back.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import TENSOR, Enum

_COMPLEX_FNS = ("from_pair", "to_pair", "polar", "complex", "real", "imag", "angle", "conj")


def _from_pair(x):
    if x.ndim == 0 or x.shape[-1] != 2:
        raise ValueError(f"view_as_complex: the last dim must have size 2, got shape {tuple(x.shape)}")
    return x[..., 0].astype(mx.float32) + 1j * x[..., 1].astype(mx.float32)


@kernel("complex", inputs=[TENSOR], more=TENSOR, attrs={"fn": Enum(*_COMPLEX_FNS)})
def k_complex(x, *rest, fn):
    if fn == "from_pair":
        return _from_pair(x)
    if fn == "to_pair":
        return mx.stack([mx.real(x), mx.imag(x)], axis=-1)
    if fn == "real":
        return mx.real(x) if x.dtype == mx.complex64 else x
    if fn == "conj":
        return mx.conjugate(x) if x.dtype == mx.complex64 else x
    if fn == "angle":
        if x.dtype == mx.complex64:
            return mx.arctan2(mx.imag(x), mx.real(x))
        # a real input: 0 or pi by sign, NaN stays NaN (torch)
        return mx.where(x < 0, mx.array(mx.pi, x.dtype), mx.where(mx.isnan(x), x, mx.zeros_like(x)))
    if fn == "imag":
        if x.dtype != mx.complex64:
            raise ValueError("imag: the input is not complex")
        return mx.imag(x)
    (other,) = rest
    if fn == "polar":  # torch: abs * cos(angle) + i abs * sin(angle)
        return x * mx.cos(other) + 1j * (x * mx.sin(other))
    return x + 1j * other  # complex(real, imag)


def _complex_op(fn, *names):
    def convert_complex(ctx, call):
        values = [call.arg(n) for n in names]
        rank = max(ctx.meta(v).rank for v in values)
        specs = [ctx.tensor(v, L.identity(ctx.meta(v).rank)) for v in values]
        ctx.emit("complex", specs, {"fn": fn}, perm=L.identity(call.meta.rank if call.meta.rank is not None
                                                              else rank))

    convert_complex.__name__ = f"convert_{fn}"
    return convert_complex


register("aten.view_as_complex.default")(_complex_op("from_pair", "self"))
register("aten.view_as_real.default")(_complex_op("to_pair", "self"))
register("aten.polar.default")(_complex_op("polar", "abs", "angle"))
register("aten.complex.default")(_complex_op("complex", "real", "imag"))
register("aten.real.default")(_complex_op("real", "self"))
register("aten.imag.default")(_complex_op("imag", "self"))
register("aten.angle.default")(_complex_op("angle", "self"))
register("aten._conj.default", "aten.conj_physical.default")(_complex_op("conj", "self"))
