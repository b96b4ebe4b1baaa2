"""Weight layout transforms between torch's conv layers and Porter's (numpy in, numpy out; no torch import).

Porter stores every conv weight, transposed or not, as ``(C_out, *kernel, C_in/groups)`` (MLX's conv layout).

* ``nn.ConvNd`` weight ``(C_out, C_in/groups, *k)``: move the channel axis last.
* ``nn.ConvTransposeNd`` weight ``(C_in, C_out/groups, *k)``: per group ``g`` the block
  ``w[g*C_in/G:(g+1)*C_in/G]`` maps that group's inputs to its ``C_out/G`` outputs. Regroup to
  ``(G, C_in/G, C_out/G, *k)``, move the ``C_in/G`` axis last, and merge ``(G, C_out/G)`` into ``C_out``. With
  ``groups=1`` this is a plain transpose; with groups it is not, so the converter must pass the layer's ``groups``.

Bias vectors ``(C_out,)`` need no change.
"""

from __future__ import annotations

import numpy as np


def torch_conv_weight_to_mlx(w) -> np.ndarray:
    """``nn.ConvNd.weight`` ``(C_out, C_in/groups, *k)`` -> Porter ``(C_out, *k, C_in/groups)``."""
    w = np.asarray(w)
    _check_rank(w, "torch_conv_weight_to_mlx")
    return np.ascontiguousarray(np.moveaxis(w, 1, -1))


def mlx_conv_weight_to_torch(w) -> np.ndarray:
    """Inverse of :func:`torch_conv_weight_to_mlx`."""
    w = np.asarray(w)
    _check_rank(w, "mlx_conv_weight_to_torch")
    return np.ascontiguousarray(np.moveaxis(w, -1, 1))


def torch_conv_transpose_weight_to_mlx(w, groups: int = 1) -> np.ndarray:
    """``nn.ConvTransposeNd.weight`` ``(C_in, C_out/groups, *k)`` -> Porter ``(C_out, *k, C_in/groups)``."""
    w = np.asarray(w)
    _check_rank(w, "torch_conv_transpose_weight_to_mlx")
    groups = _check_groups(w.shape[0], groups, "torch_conv_transpose_weight_to_mlx", "dimension 0 (C_in)")
    c_in, c_out_g, kernel = w.shape[0], w.shape[1], w.shape[2:]
    w = w.reshape(groups, c_in // groups, c_out_g, *kernel)
    w = np.moveaxis(w, 1, -1)  # (G, C_out/G, *k, C_in/G)
    return np.ascontiguousarray(w.reshape(groups * c_out_g, *kernel, c_in // groups))


def mlx_conv_transpose_weight_to_torch(w, groups: int = 1) -> np.ndarray:
    """Inverse of :func:`torch_conv_transpose_weight_to_mlx`: ``(C_out, *k, C_in/G)`` -> ``(C_in, C_out/G, *k)``."""
    w = np.asarray(w)
    _check_rank(w, "mlx_conv_transpose_weight_to_torch")
    groups = _check_groups(w.shape[0], groups, "mlx_conv_transpose_weight_to_torch", "dimension 0 (C_out)")
    c_out, kernel, c_in_g = w.shape[0], w.shape[1:-1], w.shape[-1]
    w = w.reshape(groups, c_out // groups, *kernel, c_in_g)
    w = np.moveaxis(w, -1, 1)  # (G, C_in/G, C_out/G, *k)
    return np.ascontiguousarray(w.reshape(groups * c_in_g, c_out // groups, *kernel))


def _check_rank(w: np.ndarray, func: str) -> None:
    if not 3 <= w.ndim <= 5:
        raise ValueError(f"[{func}] expected a 1d/2d/3d conv weight (rank 3 to 5), but got shape {w.shape}.")


def _check_groups(size: int, groups, func: str, where: str) -> int:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups <= 0:
        raise ValueError(f"[{func}] 'groups' must be a positive int, but got {groups!r}.")
    if size % groups:
        raise ValueError(f"[{func}] {where} of size {size} is not divisible by groups={groups}.")
    return int(groups)
