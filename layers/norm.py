"""Batch normalization with torch's train and eval behaviour, channels-last.

``mlx.nn.BatchNorm`` takes at most 4-d input (no ``BatchNorm3d`` for video) and has no cumulative-average mode
(torch's ``momentum=None``). :class:`BatchNorm` is a drop-in subclass that follows ``torch.nn.BatchNorm{1,2,3}d``:

* training: normalize with the batch's biased variance; update ``running_mean``/``running_var`` with the batch's
  unbiased variance as ``(1 - m) * running + m * batch`` where ``m = momentum``, or ``1 / num_batches_tracked``
  when ``momentum is None``; count ``num_batches_tracked`` (unless ``count_batches=False``: a subclass whose forward
  calls ``F.batch_norm`` itself leaves torch's counter where it was);
* eval (or ``track_running_stats=False`` in training): running statistics (or batch statistics when there are none).
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _native
from ._batch_norm_train import batch_norm_train
from . import _export
from ._precision import upcast

FUSED_ACTIVATIONS = ("relu", "relu6", "silu", "hardswish")  # BatchNorm.eval_activation

__all__ = ["BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]


class BatchNorm(nn.BatchNorm):
    """torch.nn.BatchNorm over the last (channel) axis of ``(N, *spatial, C)`` or ``(N, C)`` input.

    Args:
        num_features (int): ``C``.
        eps (float, optional): added to the variance. Default: ``1e-5``.
        momentum (float or None, optional): running-statistics factor; ``None`` for a cumulative average.
            Default: ``0.1``.
        affine (bool, optional): learnable ``weight`` and ``bias``. Default: ``True``.
        track_running_stats (bool, optional): keep ``running_mean``, ``running_var`` and ``num_batches_tracked``.
            Default: ``True``.
        count_batches (bool, optional): add one to ``num_batches_tracked`` per training call (torch's
            ``BatchNorm``); ``False`` for a torch forward that calls ``F.batch_norm`` with a fixed momentum and
            never counts (then ``momentum`` must not be ``None``). Default: ``True``.

    Shape: ``(N, C)`` or ``(N, *spatial, C)`` -> same. Parameters carry torch's ``state_dict`` names.

    Example:
        >>> bn = BatchNorm(8)
        >>> bn.train(); y = bn(mx.random.normal((4, 5, 5, 8)))   # updates running statistics as torch does
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, count_batches: bool = True):
        if not isinstance(num_features, int) or isinstance(num_features, bool) or num_features <= 0:
            raise ValueError(f"[BatchNorm] 'num_features' must be a positive int but got {num_features!r}.")
        if momentum is not None and not 0.0 <= float(momentum) <= 1.0:
            raise ValueError(f"[BatchNorm] 'momentum' must be in [0, 1] or None but got {momentum!r}.")
        if not isinstance(count_batches, bool) or (momentum is None and not count_batches):
            raise ValueError(f"[BatchNorm] 'count_batches' must be a bool, and True when 'momentum' is None (the "
                             f"cumulative average divides by the count), but got {count_batches!r}.")
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats)
        self.count_batches = count_batches
        if track_running_stats:
            self.num_batches_tracked = mx.array(0, dtype=mx.int64)
            self.freeze(keys=["running_mean", "running_var", "num_batches_tracked"], recurse=False)

    def loaded_problem(self):
        """``(leaf, problem)`` for a loaded buffer torch never holds, else ``None``: a negative ``num_batches_tracked``
        (at -1, ``momentum=None``'s first training step divided by a count of 0: torch raises, the statistics became
        inf/NaN). The loader names the file and the array (``converters/tree.py``)."""
        if self.track_running_stats and self.num_batches_tracked.ndim == 0 and self.num_batches_tracked.item() < 0:
            return "num_batches_tracked", (f"must be >= 0 (a count of training batches) but is "
                                           f"{self.num_batches_tracked.item()}")
        return None

    def unfreeze(self, *args, **kwargs):
        """Running statistics stay frozen (they are buffers in torch)."""
        super().unfreeze(*args, **kwargs)
        if self.track_running_stats:
            self.freeze(keys=["running_mean", "running_var", "num_batches_tracked"], recurse=False)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2:
            raise ValueError(f"[BatchNorm] expected (N, C) or (N, *spatial, C) input but got shape {x.shape}.")
        if x.shape[-1] != self.num_features:
            raise ValueError(f"[BatchNorm] expected {self.num_features} channels (last axis) but got shape {x.shape}.")
        use_batch = self.training or not self.track_running_stats
        if use_batch:
            count = 1
            for size in x.shape[:-1]:
                count *= size
            if count == 1 and self.training:
                raise ValueError(
                    f"[BatchNorm] expected more than 1 value per channel when training, got input size {x.shape}")
            if count == 0:  # an empty batch: torch's empty output, counted, statistics kept; no kernel runs on it
                if self.training and self.track_running_stats and self.count_batches:
                    self.num_batches_tracked = self.num_batches_tracked + 1
                return mx.zeros(x.shape, dtype=x.dtype)
            # statistics in float32 at least, as torch computes them for half inputs; torch's backward formula
            # (saves the input only, _batch_norm_train.py)
            y, mean, var = batch_norm_train(x, self.get("weight"), self.get("bias"), self.eps)
            if self.training and self.track_running_stats:
                if self.count_batches:
                    self.num_batches_tracked = self.num_batches_tracked + 1
                factor = (1.0 / self.num_batches_tracked.astype(mx.float32) if self.momentum is None
                          else self.momentum)
                unbiased = var * (count / max(count - 1, 1))
                self.running_mean = ((1 - factor) * self.running_mean + factor * mx.stop_gradient(mean)
                                     ).astype(self.running_mean.dtype)
                self.running_var = ((1 - factor) * self.running_var + factor * mx.stop_gradient(unbiased)
                                    ).astype(self.running_var.dtype)
        else:
            return self._eval_affine(x)
        return y.astype(x.dtype)  # rounded once, as torch's half kernels do

    def eval_activation(self, x: mx.array, activation: str):
        """This layer's eval forward followed by ``activation`` (``"relu"``, ``"relu6"``, ``"silu"`` or
        ``"hardswish"``, torch's, applied to the stored output) in one native pass, or ``None`` where that pass does not apply (training, batch
        statistics, float64, no native kernels, an input the layer refuses): the caller then runs the two layers.
        Used by a converted model's runtime for a batch norm whose only reader is that activation (eval only: the
        module tree and training are unchanged)."""
        if activation not in FUSED_ACTIVATIONS or not self._eval_pass_applies(x, f"batch norm + {activation}"):
            return None
        alpha, beta = self._alpha_beta()
        return _native.channel_affine(x, alpha, beta, activation=activation)

    def eval_residual(self, x: mx.array, res: mx.array, activation: Optional[str]):
        """This layer's eval forward plus ``res`` (a residual block's skip connection), then ``activation``
        (``None`` or ``"relu"``) in one native pass, or ``None`` where that pass does not apply (training, batch
        statistics, float64, no native kernels, ``res`` not of x's shape and dtype, an input the layer refuses): the
        caller then runs the nodes. Used by a converted model's runtime for ``relu(bn(x) + res)`` and ``bn(x) + res``
        where the batch norm's output and the sum have no other reader (eval only)."""
        if (activation not in (None, "relu") or not isinstance(res, mx.array) or res.shape != x.shape
                or res.dtype != x.dtype or not self._eval_pass_applies(x, "batch norm + residual add")):
            return None
        alpha, beta = self._alpha_beta()
        return _native.channel_affine_residual(x, alpha, beta, res, activation=activation or "none")

    def _eval_pass_applies(self, x: mx.array, kernel: str) -> bool:
        """Whether the eval forward on ``x`` can be a native channel-affine pass (``eval_activation``,
        ``eval_residual``): eval mode with running statistics, ``(N, ..., C)`` input of this layer's channels, float32
        or 16-bit, native kernels active (``kernel`` names the pass for export mode's list)."""
        return (not self.training and self.track_running_stats and x.ndim >= 2 and x.shape[-1] == self.num_features
                and x.dtype in (mx.float32, mx.float16, mx.bfloat16) and _native.active(kernel))

    def _alpha_beta(self):
        """The eval forward's per-channel ``alpha = weight / sqrt(var + eps)`` and ``beta = bias - mean * alpha`` (float32
        for 16-bit statistics), ``(C,)`` each. Kept while the running statistics, weight and bias are the same arrays
        and eps the same value: a plain eval call then builds none of these ops again (a training step, an update or
        an assignment makes new arrays, and a gradient call passes its own). Not kept while exporting (the weights may
        be the exported function's inputs)."""
        arrays = (self.running_mean, self.running_var, self.get("weight"), self.get("bias"))
        kept = self.__dict__.get("_alpha_beta_kept")
        if kept is not None and kept[1] == self.eps and all(a is b for a, b in zip(kept[0], arrays)):
            return kept[2]
        mean, var = upcast(self.running_mean), upcast(self.running_var)
        alpha = mx.rsqrt(var + self.eps)
        if "weight" in self:
            alpha = alpha * upcast(self.weight)
        beta = upcast(self.bias) - mean * alpha if "bias" in self else -mean * alpha
        if not _export.active():
            object.__setattr__(self, "_alpha_beta_kept", (arrays, self.eps, (alpha, beta)))  # not a tree entry
        return alpha, beta

    def _eval_affine(self, x: mx.array) -> mx.array:
        # torch's CPU eval kernel: per-channel alpha = weight / sqrt(var + eps), beta = bias - mean * alpha, then one
        # multiply-add over the activation (one native multi-threaded pass where the kernels are built)
        # alpha/beta in float32 for 16-bit statistics too (torch's half kernels; eps=1e-5 is subnormal in float16)
        alpha, beta = self._alpha_beta()
        # the native pass takes float32 alpha/beta: float64 keeps the MLX ops
        if x.dtype in (mx.float32, mx.float16, mx.bfloat16) and _native.active("batch norm (channel affine)"):
            return _native.channel_affine(x, alpha, beta)
        return (upcast(x) * alpha + beta).astype(x.dtype)


# torch's three classes differ only in the rank they accept; channels-last input makes them one layer
BatchNorm1d = BatchNorm
BatchNorm2d = BatchNorm
BatchNorm3d = BatchNorm
