"""quantize_model: ``mlx.nn.quantize`` that quantizes what it can and says, per layer path, what stayed float and why.

``nn.quantize(model)`` calls ``to_quantized`` on every leaf module that has one; a Linear whose input size is not a
multiple of the group size makes it raise halfway. This helper asks each module first (a conv through
:func:`porter.layers.quantized_conv.conv_quantization_problem`, a ``Linear``/``Embedding`` through the same rule
MLX's ``mx.quantize`` applies), quantizes the rest in one ``nn.quantize`` call, and returns a
:class:`QuantizationReport` (the CLI prints it; ``report.config()`` is the mlx-lm style ``"quantization"`` block).
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .conv import _ConvNd
from .quantized_conv import BITS, GROUP_SIZES, MODES, conv_quantization_problem


@dataclasses.dataclass
class QuantizationReport:
    """What :func:`quantize_model` did.

    ``quantized``: layer paths now quantized (``"features.0"``, MLX's dotted module paths); ``skipped``:
    ``{path: reason}`` for the layers left in float.
    """

    group_size: int
    bits: int
    mode: str
    quantized: list = dataclasses.field(default_factory=list)
    skipped: dict = dataclasses.field(default_factory=dict)

    def config(self) -> dict:
        """mlx-lm's ``"quantization"`` block: the defaults, and ``path: False`` for every layer left in float."""
        block = {"group_size": self.group_size, "bits": self.bits, "mode": self.mode}
        block.update({path: False for path in self.skipped})
        return block

    def summary(self) -> str:
        lines = [f"quantized {len(self.quantized)} layers ({self.bits}-bit, group size {self.group_size}, "
                 f"{self.mode}); {len(self.skipped)} left in float"]
        lines += [f"  {path}: {reason}" for path, reason in self.skipped.items()]
        return "\n".join(lines)


def _module_problem(module: nn.Module, group_size: int, bits: int, mode: str) -> str | None:
    """Why a module with ``to_quantized`` (not a Porter conv) cannot be quantized, or ``None``."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        if mode not in MODES:  # MLX knows more modes; Porter records and tests affine only
            return f"'mode' must be one of {MODES}, but got mode={mode!r}"
        if bits not in BITS:
            return f"'bits' must be one of {BITS}, but got bits={bits!r}"
        if group_size not in GROUP_SIZES:
            return f"'group_size' must be one of {GROUP_SIZES}, but got group_size={group_size!r}"
        size = module.weight.shape[-1]
        if size % group_size:
            what = "input_dims" if isinstance(module, nn.Linear) else "dims"
            return f"{what}={size} is not divisible by group_size={group_size}"
    return None


def quantize_model(model: nn.Module, group_size: int = 64, bits: int = 4, mode: str = "affine", *,
                   convs: bool = True, linear: bool = True) -> QuantizationReport:
    """Quantize ``model`` in place: Porter's ``Conv1d/2d/3d`` (``convs``), MLX's ``Linear``/``Embedding``
    (``linear``) and any other leaf with ``to_quantized``, each only where it can be.

    Args:
        model (nn.Module): modified in place.
        group_size (int, optional): 32, 64 or 128. Default: ``64``.
        bits (int, optional): 4 or 8. Default: ``4``.
        mode (str, optional): ``'affine'``. Default: ``'affine'``.
        convs (bool, optional): quantize convolutions. Default: ``True``.
        linear (bool, optional): quantize ``Linear`` and ``Embedding`` layers. Default: ``True``.

    Returns:
        QuantizationReport: quantized paths and ``{path: reason}`` for the layers left in float (including
        layers with a float weight that have no quantized form, e.g. transposed convolutions).

    Example:
        >>> report = quantize_model(model, group_size=64, bits=8)
        >>> print(report.summary())      # "features.0: the reduction length ... is not divisible by group_size=64"
    """
    if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
        raise ValueError(f"[quantize_model] 'group_size' must be one of {GROUP_SIZES}, but got {group_size!r}.")
    if isinstance(bits, bool) or bits not in BITS:
        raise ValueError(f"[quantize_model] 'bits' must be one of {BITS}, but got {bits!r}.")
    if mode not in MODES:
        raise ValueError(f"[quantize_model] 'mode' must be one of {MODES}, but got {mode!r}.")
    report = QuantizationReport(group_size, bits, mode)

    def predicate(path: str, module: nn.Module) -> bool:
        if not hasattr(module, "to_quantized"):
            if _has_float_weight(module):
                report.skipped[path] = f"{type(module).__name__} has no quantized form"
            return False
        if isinstance(module, _ConvNd):
            problem = None if convs else "convs=False"
            problem = problem or conv_quantization_problem(module, group_size, bits, mode)
        else:
            problem = None if linear else "linear=False"
            problem = problem or _module_problem(module, group_size, bits, mode)
        if problem:
            report.skipped[path] = problem
            return False
        report.quantized.append(path)
        return True

    nn.quantize(model, group_size, bits, mode=mode, class_predicate=predicate)
    return report


def _has_float_weight(module: nn.Module) -> bool:
    """A leaf whose weight is a matrix or a kernel (norms have vectors; quantized layers have uint32)."""
    weight = dict(tree_flatten(module.parameters())).get("weight")
    return weight is not None and weight.ndim >= 2 and mx.issubdtype(weight.dtype, mx.floating)
