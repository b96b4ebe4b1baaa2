"""Torch's other dropouts as port layers (``Dropout1d/2d/3d``, ``AlphaDropout``, ``FeatureAlphaDropout``). Torch-free.

Identity in eval. In training, as ATen's ``_dropout_impl`` computes them: a Bernoulli(``1 - p``) ``noise`` drawn per
element (``alpha``) or per (example, channel) (``feature``, ``feature_alpha``: torch's dims 0 and 1 of the ATen op's
input; ``Dropout1d/2d/3d`` add the batch dim to unbatched input before it), then ``x * noise / (1 - p)``; the alpha
kinds keep SELU's mean and variance: ``a = 1 / sqrt((alpha^2 p + 1)(1 - p))``, ``x * (a noise) + (noise - 1) alpha a
+ alpha a p`` with ``alpha = 1.7580993408473766``. The arrays may be in any layout: ``axes`` are the array axes of
torch's dims 0 and 1.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

KINDS = ("feature", "alpha", "feature_alpha")
_ALPHA = 1.7580993408473766


class TorchDropout(nn.Module):
    """Dropout of kind ``kind`` with rate ``p`` (``0 <= p < 1``), in training mode only.

    Args:
        p (float): the drop probability.
        kind (str): ``"feature"`` (``Dropout1d/2d/3d``), ``"alpha"`` (``AlphaDropout``) or ``"feature_alpha"``.
        axes (tuple of int): the array axes of torch's dims 0 (batch) and 1 (channels): where the feature kinds'
            noise varies. Default: ``(0, 1)``.

    Shape: any array of rank >= 2 (feature kinds) -> the same.
    """

    def __init__(self, p: float, kind: str = "feature", axes=(0, 1)):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"[TorchDropout] 'kind' must be one of {KINDS} but got {kind!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"[TorchDropout] 'p' must be in [0, 1) but got {p!r}")
        axes = tuple(axes)
        if len(axes) != 2 or axes[0] == axes[1] or any(isinstance(a, bool) or not isinstance(a, int) or a < 0
                                                       for a in axes):
            raise ValueError(f"[TorchDropout] 'axes' must be two distinct non-negative axes but got {axes!r}")
        object.__setattr__(self, "p", float(p))
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "axes", axes)

    def _extra_repr(self) -> str:
        return f"p={self.p}, kind={self.kind!r}, axes={self.axes}"

    def __call__(self, x: mx.array) -> mx.array:
        if not self.training or self.p == 0.0 or x.size == 0:
            return x
        if self.kind == "alpha":
            shape = x.shape
        else:
            if x.ndim <= max(self.axes):
                raise ValueError(f"[TorchDropout] a {x.ndim}-d input has no axes {self.axes}")
            shape = [1] * x.ndim
            for a in self.axes:
                shape[a] = x.shape[a]
        noise = mx.random.bernoulli(1.0 - self.p, tuple(shape)).astype(x.dtype)
        if self.kind == "feature":
            return x * (noise / (1.0 - self.p))
        a = 1.0 / math.sqrt((_ALPHA * _ALPHA * self.p + 1.0) * (1.0 - self.p))
        b = (noise - 1.0) * (_ALPHA * a) + _ALPHA * a * self.p
        return x * (noise * a) + b
