"""Pooling output sizes that stay symbolic while ``torch.export`` captures (imports torch; conversion only).

Three places in torch fixed something about an input size that the port does not need fixed:

- **Ceil-mode pooling** (max, avg and LP pools, 1-d to 3-d). Torch's shape rule (``_meta_registrations.
  pooling_output_shape_pad_lr``) computes ``O = (L + pl + pr - d(k-1) - 1 + s - 1) // s + 1`` and then *branches*:
  ``if (O - 1) * s >= L + pl: O -= 1`` (the last window must start inside the input or its left padding). On a
  symbolic ``L`` the branch became a guard on the example's side of it, a parity or a modulus of the size, so a port
  converted at one size refused sizes where the branch goes the other way. During a capture the rule is written
  without the branch: ``O = min(O, ceil((L + pl) / s))``. The same number at every size: ``O - 1 =
  ceil((L + pl + pr - d(k-1) - 1) / s) <= ceil((L + pl) / s)`` whenever ``pr <= d(k-1) + 1`` (torch's own check
  allows at most half the effective kernel), so the branch lowers ``O`` exactly when ``O - 1`` equals the second
  term, to that term, and otherwise ``O`` is the smaller one. When ``s <= d(k-1) + 1 - pr`` (GoogLeNet's and
  SqueezeNet's ``MaxPool2d(3, 2, ceil_mode=True)``, any stride-1 pool) the two terms never meet, and ``O`` is
  written alone (torch's guard there held at every size: those models were never refused). Porter's pooling layers
  compute the ceil-mode size themselves, as torch does (docs/SEMANTICS.md), so nothing else depended on the guard.
  Outside that range, on concrete sizes or without ceil mode, torch's rule runs unchanged.

- **Adaptive max pooling with a ``None`` output size** (``nn.AdaptiveMaxPool2d((None, 7))``). ``None`` means "the
  input's size", and the C++ op takes the output size as plain ints, so export read the symbolic size as a number
  and pinned that input dim. Along such a dim every window is one element wide, so the pool is the adaptive pool of
  the other dims alone: during a capture the ``None`` dims are moved next to the batch, folded into it, the rest
  pooled by torch's op of that rank, and the result unfolded and moved back (symbolic sizes throughout). With
  ``return_indices=True`` torch's function runs unchanged (the indices would have to be rebuilt over the whole
  plane; that dim stays pinned).

- **1-d max pooling** (``nn.MaxPool1d``, ``F.max_pool1d``). Torch's composite C++ body checks the arguments and
  computes the output length on plain ints, so the capture pinned the input's length. During a capture
  ``aten.max_pool1d`` and ``aten.max_pool1d_with_indices`` get a Python kernel that does what that body does for
  autograd and non-CPU tensors: ``max_pool2d_with_indices`` over the length as a ``(1, L)`` plane (a window's index
  into ``1 x L`` is its index into ``L``), whose shape rule above keeps ``L`` symbolic.

Torch's functions are restored when the capture ends.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from .capture_kernels import composite_kernels


def _symbolic(*values) -> bool:
    return any(isinstance(v, torch.SymInt) for v in values)


def ceil_mode_size(size, kernel: int, pad_l: int, pad_r: int, stride: int, dilation: int):
    """Torch's ceil-mode pooling output size of ``size`` (an int or a SymInt) without a branch on it; needs
    ``stride > 0`` and ``pad_r <= dilation * (kernel - 1) + 1`` (see the module's docstring)."""
    span = dilation * (kernel - 1) + 1
    full = (size + pad_l + pad_r - span + stride - 1) // stride + 1
    if stride <= span - pad_r:  # then O - 1 < ceil((L + pl) / s) at every L: the branch never lowers O
        return full
    inside = (size + pad_l + stride - 1) // stride  # windows that start inside the input or left padding
    return torch.sym_min(full, inside)


def _branch_free(original):
    def pooling_output_shape_pad_lr(inputSize, kernelSize, pad_l, pad_r, stride, dilation, ceil_mode):  # noqa: N803
        numbers = (kernelSize, pad_l, pad_r, stride, dilation)
        if not (ceil_mode and _symbolic(inputSize) and all(type(v) is int for v in numbers)
                and stride > 0 and 0 <= pad_r <= dilation * (kernelSize - 1) + 1):
            return original(inputSize, kernelSize, pad_l, pad_r, stride, dilation, ceil_mode)
        return ceil_mode_size(inputSize, kernelSize, pad_l, pad_r, stride, dilation)

    return pooling_output_shape_pad_lr


def _keeping_none_dims(dispatch, n: int):
    """``F.adaptive_max_pool{n}d`` (``dispatch``) with ``None`` output sizes over symbolic input dims pooled without
    reading those sizes as numbers."""

    def pool(input, output_size, return_indices=False):
        sizes = list(output_size) if isinstance(output_size, (list, tuple)) else []  # None only inside a tuple
        kept = [d for d, v in enumerate(sizes) if v is None]
        if (return_indices or not kept or len(sizes) != n or not isinstance(input, torch.Tensor)
                or input.dim() not in (n + 1, n + 2)
                or not _symbolic(*(input.shape[input.dim() - n + d] for d in kept))):
            return dispatch(input, output_size, return_indices)
        lead = input.dim() - n
        pooled = [d for d in range(n) if d not in kept]
        order = list(range(lead)) + [lead + d for d in kept] + [lead + d for d in pooled]
        folded = input.permute(order)
        outer = folded.shape[:lead + len(kept)]
        if not pooled:  # every window one element wide: the input's values
            return input.clone()
        folded = folded.flatten(0, lead + len(kept) - 1)  # (B, *pooled sizes): torch's unbatched form
        adaptive = (None, F.adaptive_max_pool1d, F.adaptive_max_pool2d)[len(pooled)]
        out = adaptive(folded, [sizes[d] for d in pooled]).unflatten(0, outer)
        return out.permute([order.index(d) for d in range(input.dim())])

    return pool


def _max_pool1d_with_indices(input, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    if input.dim() not in (2, 3):  # torch's check
        raise RuntimeError(f"max_pool1d() Expected 2D or 3D input tensor, but got {list(input.shape)}")
    stride = stride if len(stride) else kernel_size  # torch's default: the kernel size
    out, indices = torch.ops.aten.max_pool2d_with_indices(input.unsqueeze(-2), [1, *kernel_size], [1, *stride],
                                                          [0, *padding], [1, *dilation], ceil_mode)
    return out.squeeze(-2), indices.squeeze(-2)


def _max_pool1d(input, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)[0]


_KERNELS = {torch.ops.aten.max_pool1d.default: _max_pool1d,
            torch.ops.aten.max_pool1d_with_indices.default: _max_pool1d_with_indices}


@contextlib.contextmanager
def symbolic_pool_sizes():
    """Ceil-mode pooling, ``None`` adaptive max pool sizes and 1-d max pools without size guards, for one capture
    (torch's functions restored afterwards)."""
    import torch._meta_registrations as meta

    saved = [(meta, "pooling_output_shape_pad_lr", getattr(meta, "pooling_output_shape_pad_lr"))]
    meta.pooling_output_shape_pad_lr = _branch_free(saved[0][2])
    for n in (2, 3):  # the ranks whose output size may hold None (torch's ``_list_with_default``)
        name = f"adaptive_max_pool{n}d"
        saved.append((F, name, getattr(F, name)))
        setattr(F, name, _keeping_none_dims(getattr(F, name), n))
    try:
        with composite_kernels(_KERNELS):
            yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
