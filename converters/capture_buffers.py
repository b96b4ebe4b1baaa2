"""The model's buffers as they were before Porter's probing forwards (conversion time, imports torch).

The train-mode probe (``capture_train.py``) and the dropout survey (``capture_dropout_sites.py``) run the user's
model eagerly in training mode, which updates running statistics and other buffers in place. :class:`BufferSnapshot`
puts them back, writing only the buffers a probe changed (their version counter moved or their values differ): an
unconditional ``copy_`` into every buffer would bump the version of buffers nothing touched, and a tensor the model
computed from one of them before the conversion and saved for backward (timm TinyViT's and LeViT's eval-mode cache of
``attention_biases[:, attention_bias_idxs]``) could then no longer be differentiated in torch ("modified by an
inplace operation").
"""

from __future__ import annotations

import torch


class BufferSnapshot:
    """Every buffer of ``model`` with its version and a copy; :meth:`restore` writes back the changed ones."""

    def __init__(self, model: torch.nn.Module):
        self._saved = [(b, b._version, b.detach().clone()) for b in model.buffers()]

    def restore(self) -> None:
        with torch.no_grad():
            for buffer, version, saved in self._saved:
                if buffer._version != version or not _same(buffer, saved):
                    buffer.copy_(saved)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (NaN equal to NaN). The version counter alone is not enough: batch norm's kernel updates its
    running statistics in place without always moving it."""
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.equal(torch.isnan(a), torch.isnan(b))) and bool(
        torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)))
