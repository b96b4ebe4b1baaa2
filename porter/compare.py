"""``porter.compare``: the one place a port is compared with torch.

- The accuracy bar, per compared tensor: ``max|porter - torch| <= max(rtol * max|torch|, atol)``, the error
  relative to the tensor's largest finite magnitude, ``atol`` a floor for tensors that are all (nearly) zero.
  Integer and bool tensors (indices, masks, counts) compare exactly, whatever the tolerances.
- NaN and inf: NaN where torch has NaN is agreement, NaN on one side only an infinite error; an inf of torch's
  sign where torch has one is agreement, any other difference with an inf is an infinite error.
- Layouts: a port declares, per input and output, a layout such as ``"NCHW->NHWC"`` (``ported_array =
  torch_array.transpose(perm)``); inputs are moved into it and outputs back to torch's before comparing.

Used by :func:`porter.validate`, the conversion's own check that a capture reproduces the example
(``converters/capture.py``) and every test that compares. Importing this module imports neither torch nor mlx.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["RTOL", "ATOL", "REPRODUCES_RTOL", "is_exact", "compare", "within_bar", "assert_close", "parse_layout",
           "inverse_permutation", "declared_layouts", "to_port_layout", "to_torch_layout", "leaves", "torch_to_numpy",
           "mlx_to_numpy", "port_inputs", "port_outputs"]

# The bar for floating-point outputs (float32 computed against torch's float32): relative to max|torch| ...
RTOL = 1e-4
# ... with this floor in porter.validate (tests of a single output use atol=0: a pure relative bar).
ATOL = 1e-4
# Conversion checks that the port reproduces the example (a capture at batch two against batch one) this loosely.
REPRODUCES_RTOL = 1e-2


# ---------------------------------------------------------------------------------------------------- the bar
def is_exact(dtype) -> bool:
    """Whether values of this numpy dtype compare exactly (integers, unsigned, bool)."""
    return np.dtype(dtype).kind in "iub"


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> Dict[str, Any]:
    """One row: max abs error, error relative to max|expected|, and the verdict under the bar.

    Args:
        actual (numpy.ndarray): the port's values, in torch's layout.
        expected (numpy.ndarray): torch's values.
        rtol (float, optional): bar relative to ``expected``'s largest finite magnitude. Default: :data:`RTOL`.
        atol (float, optional): floor of the bar. Default: :data:`ATOL`.
    Returns:
        dict: ``shape``, ``max_abs``, ``max_rel``, ``scale`` (max|expected| over finite values), ``ok``; ``exact``
        for integer/bool tensors; ``porter_shape`` and ``note`` when the shapes differ.
    """
    row: Dict[str, Any] = {"shape": list(expected.shape)}
    if actual.shape != expected.shape:
        row.update(porter_shape=list(actual.shape), max_abs=math.inf, max_rel=math.inf, scale=None, ok=False,
                   note="shape differs")
        return row
    exact = is_exact(expected.dtype)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    diff = np.where(both_nan, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only is an infinite error
    finite = np.isfinite(e)
    scale = float(np.max(np.abs(e[finite]))) if finite.any() else 0.0
    same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
    diff = np.where(same_inf, 0.0, diff)
    max_abs = float(diff.max()) if diff.size else 0.0
    ok = max_abs == 0.0 if exact else max_abs <= max(rtol * scale, atol)
    if scale > 0:
        max_rel = max_abs / scale
    else:
        max_rel = 0.0 if max_abs == 0 else math.inf
    row.update(max_abs=max_abs, max_rel=max_rel, scale=scale, ok=bool(ok))
    if exact:
        row["exact"] = True
    return row


def within_bar(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL, atol: float = 0.0) -> bool:
    """Whether ``actual`` meets the bar against ``expected`` (see :func:`compare`)."""
    return compare(actual, expected, rtol, atol)["ok"]


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL, atol: float = 0.0,
                 what: str = "output") -> None:
    """Raise ``AssertionError`` naming ``what`` and the reason when ``actual`` misses the bar (for tests)."""
    row = compare(actual, expected, rtol, atol)
    if row["ok"]:
        return
    if "porter_shape" in row:
        raise AssertionError(f"{what}: shape {tuple(row['porter_shape'])} != torch {tuple(row['shape'])}")
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        raise AssertionError(f"{what}: NaN positions differ from torch's")
    infinite = np.isinf(a) | np.isinf(e)
    if not np.array_equal(a[infinite], e[infinite]):
        raise AssertionError(f"{what}: infinities differ from torch's")
    bound = 0.0 if row.get("exact") else max(rtol * row["scale"], atol)
    raise AssertionError(f"{what}: max abs err {row['max_abs']:.3g} > {bound:.3g} (rtol {rtol:g} * max|torch| "
                         f"{row['scale']:.4g}, atol {atol:g})" + (" [exact dtype]" if row.get("exact") else ""))


# ---------------------------------------------------------------------------------------------------- layouts
def parse_layout(layout: str, rank: int) -> Tuple[int, ...]:
    """The permutation ``p`` with ``ported_array = torch_array.transpose(p)`` for a layout string.

    Accepts ``"as-is"`` (or ``None``), letter forms such as ``"NCHW->NHWC"`` and ``"permute(0,2,3,1)"``.

    Raises:
        ValueError: the text is not a layout, or not one of rank ``rank``.
    """
    text = (layout or "as-is").strip()
    if text == "as-is":
        return tuple(range(rank))
    if "->" in text:
        src, dst = (part.strip() for part in text.split("->"))
        if sorted(src) != sorted(dst) or len(set(src)) != len(src):
            raise ValueError(f"[validate] layout {layout!r} does not name a permutation of one set of axes.")
        perm = tuple(src.index(c) for c in dst)
    else:
        match = re.fullmatch(r"permute\(([\d,\s]*)\)", text)
        if not match:
            raise ValueError(f"[validate] cannot read the layout {layout!r} (expected 'as-is', 'NCHW->NHWC' or "
                             "'permute(0,2,3,1)').")
        perm = tuple(int(v) for v in match.group(1).split(",") if v.strip())
    if len(perm) != rank or sorted(perm) != list(range(rank)):
        raise ValueError(f"[validate] layout {layout!r} does not fit a tensor of rank {rank}.")
    return perm


def inverse_permutation(perm: Sequence[int]) -> Tuple[int, ...]:
    """``q`` with ``array.transpose(perm).transpose(q) == array``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _contiguous(array: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array (a scalar output such as x.max()) into shape (1,)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def to_port_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """A torch-layout numpy array in the port's ``layout`` (contiguous; 0-d arrays stay 0-d)."""
    return _contiguous(np.transpose(array, parse_layout(layout, array.ndim)))


def to_torch_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """A port's array in ``layout`` back in torch's layout (contiguous; 0-d arrays stay 0-d)."""
    return _contiguous(np.transpose(array, inverse_permutation(parse_layout(layout, array.ndim))))


def declared_layouts(ported, name: str, count: int) -> List[str]:
    """The port's ``input_layouts`` or ``output_layouts`` (``name``), padded with ``"as-is"`` to ``count``."""
    layouts = list(getattr(ported, name, None) or [])
    return layouts + ["as-is"] * (count - len(layouts))


# ---------------------------------------------------------------------------------------------------- values
def leaves(tree) -> List[Any]:
    """Tensors/arrays of a nested output in a fixed order (tuples and lists in order, dicts by insertion);
    non-array leaves (None, Python numbers) are left out."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [leaf for v in tree for leaf in leaves(v)]
    return [tree] if hasattr(tree, "shape") and hasattr(tree, "dtype") else []


def torch_to_numpy(t) -> np.ndarray:
    """A torch tensor's values (detached, on the CPU; float16/bfloat16 widened to float32, exactly)."""
    import torch

    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.cpu().numpy()


def mlx_to_numpy(a, widen: bool = True) -> np.ndarray:
    """An MLX array's values; float16/bfloat16 widened to float32 (exactly) unless ``widen=False``
    (bfloat16 is always widened: numpy has no bfloat16)."""
    import mlx.core as mx

    if isinstance(a, mx.array) and (a.dtype == mx.bfloat16 or (widen and a.dtype == mx.float16)):
        a = a.astype(mx.float32)
    return np.array(a)


def split_call(ported, values) -> Tuple[list, dict]:
    """``(args, kwargs)`` calling the port (or the torch model, with torch values) on ``values`` given in the
    port's input order: keyword inputs by name (``PortedModel.split_inputs``); a callable without it positionally."""
    split = getattr(ported, "split_inputs", None)
    return split(list(values)) if split is not None else (list(values), {})


def port_inputs(ported, xs) -> Tuple[list, list]:
    """Torch-layout tensors as the port takes them (its declared ``input_layouts``, dtypes kept, float64 too);
    also returns each input's permutation."""
    import mlx.core as mx
    import torch

    perms, arrays = [], []
    for x, lay in zip(xs, declared_layouts(ported, "input_layouts", len(xs))):
        a = torch_to_numpy(x) if x.dtype.is_floating_point else x.detach().cpu().numpy()
        perm = parse_layout(lay, a.ndim)
        # mx.array reads numpy float64 as float32 unless told
        m = mx.array(_contiguous(np.transpose(a, perm)), dtype=mx.float64 if a.dtype == np.float64 else None)
        if x.dtype == torch.bfloat16:
            m = m.astype(mx.bfloat16)  # widened to float32 for the transpose above: exact both ways
        elif x.dtype == torch.float16:
            m = m.astype(mx.float16)
        perms.append(perm)
        arrays.append(m)
    return arrays, perms


def port_outputs(ported, out, widen: bool = True) -> List[np.ndarray]:
    """The array leaves of the port's output ``out`` (:func:`leaves`) as numpy, back in torch's layout (the
    port's ``output_layouts``, in order)."""
    arrays = leaves(out)
    result = []
    for p, lay in zip(arrays, declared_layouts(ported, "output_layouts", len(arrays))):
        a = mlx_to_numpy(p, widen)
        result.append(to_torch_layout(a, lay))
    return result
