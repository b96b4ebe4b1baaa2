"""Weight transforms between torch's and MLX's parameter layouts, by name, each with its inverse.

A converter picks a transform by op type (a conv weight is a conv weight whatever its shape) and records its name
and attributes with the parameter, so :meth:`PortedModel.torch_parameters` can undo it. The functions work on numpy
arrays and on mx arrays alike (only ``transpose``/``reshape`` are used).
"""

from __future__ import annotations

import numpy as np

# Porter's numpy transforms for conv weights; mx arrays (weights computed in the forward, gradients) use the
# equivalent transpose/reshape below
from porter.layers import conv_weights as _conv_weights

_TRANSFORMS: dict = {}


def _numpy(w) -> bool:
    return isinstance(w, np.ndarray)


def _transform(name):
    def decorate(pair_factory):
        _TRANSFORMS[name] = pair_factory
        return pair_factory

    return decorate


@_transform("identity")
def _identity():
    return (lambda w, **_: w), (lambda w, **_: w)


@_transform("permute")
def _permute():
    """A parameter used directly as a tensor in a non-torch layout (``perm`` as in layout.py)."""

    def forward(w, *, perm):
        return w.transpose(tuple(perm))

    def inverse(w, *, perm):
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return w.transpose(tuple(inv))

    return forward, inverse


@_transform("conv_weight")
def _conv_weight():
    """torch (C_out, C_in/groups, *k) -> MLX (C_out, *k, C_in/groups)."""

    def forward(w, **_):
        if _numpy(w):
            return _conv_weights.torch_conv_weight_to_mlx(w)
        rank = w.ndim
        return w.transpose((0,) + tuple(range(2, rank)) + (1,))

    def inverse(w, **_):
        if _numpy(w):
            return _conv_weights.mlx_conv_weight_to_torch(w)
        rank = w.ndim
        return w.transpose((0, rank - 1) + tuple(range(1, rank - 1)))

    return forward, inverse


@_transform("conv_transpose_weight")
def _conv_transpose_weight():
    """torch (C_in, C_out/groups, *k) -> MLX (C_out, *k, C_in/groups), regrouped per group."""

    def forward(w, *, groups):
        if _numpy(w):
            return _conv_weights.torch_conv_transpose_weight_to_mlx(w, groups)
        c_in, c_out_g, *k = w.shape
        nd = len(k)
        # (G, C_in/G, C_out/G, *k) -> (G, C_out/G, *k, C_in/G) -> (C_out, *k, C_in/G)
        w = w.reshape((groups, c_in // groups, c_out_g, *k))
        w = w.transpose((0, 2) + tuple(range(3, 3 + nd)) + (1,))
        return w.reshape((groups * c_out_g, *k, c_in // groups))

    def inverse(w, *, groups):
        if _numpy(w):
            return _conv_weights.mlx_conv_transpose_weight_to_torch(w, groups)
        c_out, *k, c_in_g = w.shape
        nd = len(k)
        w = w.reshape((groups, c_out // groups, *k, c_in_g))
        w = w.transpose((0, 2 + nd, 1) + tuple(range(2, 2 + nd)))
        return w.reshape((groups * c_in_g, c_out // groups, *k))

    return forward, inverse


def get(name: str):
    """``(forward, inverse)`` for the transform ``name``; both take the array and the recorded attributes."""
    try:
        return _TRANSFORMS[name]()
    except KeyError:
        raise ValueError(f"unknown weight transform {name!r} in the converted graph") from None


def mlx_shape(name: str, attrs: dict, torch_shape) -> list:
    """The MLX-layout shape a transform gives a weight of ``torch_shape``, by arithmetic (nothing is allocated).

    Raises ValueError when the transform cannot apply to that shape.
    """
    shape = list(torch_shape)
    if name == "identity":
        return shape
    if name == "permute":
        perm = list(attrs["perm"])
        if sorted(perm) != list(range(len(shape))):
            raise ValueError(f"permutation {perm} does not fit a weight of shape {shape}")
        return [shape[p] for p in perm]
    if len(shape) < 3:
        raise ValueError(f"a {name} needs at least 3 dims but the weight has shape {shape}")
    if name == "conv_weight":
        return [shape[0], *shape[2:], shape[1]]
    if name == "conv_transpose_weight":
        groups = attrs["groups"]
        if shape[0] % groups:
            raise ValueError(f"{shape[0]} input channels do not split into {groups} groups")
        return [groups * shape[1], *shape[2:], shape[0] // groups]
    raise ValueError(f"unknown weight transform {name!r}")
