"""Special functions: ``lgamma``, ``digamma``, ``polygamma``, ``i0``, ``special_i0e``/``i1``/``i1e``,
``special_erfcx``, ``special_log_ndtr``, ``special_ndtri``, ``special_bessel_j0``/``j1``/``y0``/``y1``,
``special_spherical_bessel_j0``, ``special_modified_bessel_i0``/``i1``/``k0``/``k1`` (and scaled ``k0``/``k1``),
``special_zeta`` (what ``torch.distributions`` log-probs, von Mises, normal CDF/quantile layers and Poisson NLL with
``full=True`` call).

Elementwise, any layout (the output takes its input's; ``zeta`` aligns its two operands as binary ops do). The math
is MLX ops in ``_special_gamma``, ``_special_bessel`` and ``_special_normal`` (each following torch's CPU kernel:
domains, poles, branches and measured accuracy are in their docstrings); dtypes and gradients in
``_special_functions``. Composites torch decomposes reach these: ``mvlgamma``/``multigammaln`` (a sum of lgamma),
``gammaln``/``psi``/``multigammaln``/``polygamma`` aliases; ``ndtr``, ``xlogy``, ``xlog1py``, ``entr`` and ``sinc`` are
torch's own decompositions into ``erf``, ``log``, ``where``, ... (eager torch computes ``ndtr`` the same way).
"""

from __future__ import annotations

import mlx.core as mx

from ..ir import Ref
from ..registry import kernel, register
from ..spec import SCALAR, TENSOR, Enum, Int, SpecError
from . import _special_functions as S
from .elementwise import _as_array, _both, aligned_inputs

MAX_ORDER = 10_000  # polygamma's n: n! is inf in float64 from 171 on; the graph does not grow with n


def _check_special(inputs, attrs):
    if ("n" in attrs) != (attrs["fn"] == "polygamma"):
        raise SpecError("the order 'n' is given with fn 'polygamma' and only with it", "")


@kernel("special", inputs=[TENSOR], attrs={"fn": Enum(*S.FUNCTIONS), "n": Int(0, MAX_ORDER)}, check=_check_special)
def k_special(x, *, fn, n=None):
    return S.apply(fn, x, n)


@kernel("zeta", inputs=[SCALAR, SCALAR])
def k_zeta(x, q):
    like = x if isinstance(x, mx.array) else q
    return S.zeta(_as_array(x, like), _as_array(q, like))


def _special(fn):
    def convert_special(ctx, call):
        x = call.arg("self") if call.has("self") else call.arg("x")  # spherical_bessel_j0 names it x
        ctx.emit("special", [ctx.tensor(x)], {"fn": fn}, perm=ctx.perm(x))

    convert_special.__name__ = f"convert_{fn}"
    return convert_special


register(*_both("aten.lgamma.default"))(_special("lgamma"))
register(*_both("aten.digamma.default"))(_special("digamma"))
register(*_both("aten.i0.default"))(_special("i0"))
for _fn in ("i0e", "i1", "i1e", "erfcx", "log_ndtr", "ndtri", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
            "spherical_bessel_j0",
            "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
            "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"):
    register(f"aten.special_{_fn}.default")(_special(_fn))


@register("aten.polygamma.default", "aten.polygamma_.default")
def convert_polygamma(ctx, call):
    """``polygamma(n, x)``: ``n`` must be a known non-negative int (torch refuses a negative one)."""
    n, x = call.arg("n"), call.arg("self")
    if isinstance(n, Ref) or not isinstance(n, int) or isinstance(n, bool):
        call.fail("n", "the order must be a Python int known at conversion")
    if not 0 <= n <= MAX_ORDER:
        call.fail("n", f"the order must be in [0, {MAX_ORDER}] (torch refuses a negative one); got {n}")
    ctx.emit("special", [ctx.tensor(x)], {"fn": "polygamma", "n": n}, perm=ctx.perm(x))


@register("aten.special_zeta.default", "aten.special_zeta.self_scalar", "aten.special_zeta.other_scalar")
def convert_zeta(ctx, call):
    """Hurwitz ``zeta(self, other)``; either may be a Python number."""
    specs, perm = aligned_inputs(ctx, call, [call.arg("self"), call.arg("other")])
    ctx.emit("zeta", specs, perm=perm)
