"""Bitwise and logical ops: ``&``, ``|``, ``^``, ``~``, ``<<``, ``>>`` on bool and integer tensors (``aten.__and__``
and its ``bitwise_*`` / in-place twins), ``logical_xor``.

Masks are built this way in real models (``(mask > 0) & causal``, ``~padding``). On bool tensors the bitwise ops
are the logical ones; on integers they act on the two's-complement bits, as torch's do. Both run through the
generic "binary"/"unary" kernels (entries ``bitwise_and``, ``bitwise_or``, ``bitwise_xor``, ``bitwise_not``,
``logical_xor`` of their tables).
"""

from __future__ import annotations

from ..registry import register
from .elementwise import _binary, _unary


def _forms(fn: str) -> list:
    """Every spelling torch.export records for one bitwise binary op (``x & y``, ``x &= y``, ``torch.bitwise_and``)."""
    out = []
    for overload in ("Tensor", "Scalar"):
        out += [f"aten.__{fn}__.{overload}", f"aten.__i{fn}__.{overload}",
                f"aten.bitwise_{fn}.{overload}", f"aten.bitwise_{fn}_.{overload}"]
    return out


register(*_forms("and"))(_binary("bitwise_and"))
register(*_forms("or"))(_binary("bitwise_or"))
register(*_forms("xor"))(_binary("bitwise_xor"))
register("aten.bitwise_not.default", "aten.bitwise_not_.default")(_unary("bitwise_not"))
register("aten.logical_xor.default")(_binary("logical_xor"))
for _direction, _dunder in (("left", "lshift"), ("right", "rshift")):
    register(f"aten.__{_dunder}__.Tensor", f"aten.__{_dunder}__.Scalar", f"aten.__i{_dunder}__.Tensor",
             f"aten.__i{_dunder}__.Scalar", f"aten.bitwise_{_direction}_shift.Tensor",
             f"aten.bitwise_{_direction}_shift.Tensor_Scalar", f"aten.bitwise_{_direction}_shift_.Tensor",
             f"aten.bitwise_{_direction}_shift_.Tensor_Scalar")(_binary(f"{_direction}_shift"))
