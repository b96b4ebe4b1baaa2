"""The window-sum engine (layers/_window_sum.py) behind avg, adaptive-avg and LP pooling respects export mode: while
exporting, each pool builds pure-MLX ops (and says it replaced its native kernel when the kernels are built); the
exported function, imported back, gives torch's numbers on sizes that do not divide evenly, batched and unbatched."""

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter.layers as L
from porter.layers import export_mode, native_status

from tests.export.mlxfn_check import assert_close

CASES = {
    "avg": (lambda: L.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
            lambda: torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
            "native avg pool (window sum) -> pure-MLX ops"),
    "adaptive_avg": (lambda: L.AdaptiveAvgPool2d((3, 4)), lambda: torch.nn.AdaptiveAvgPool2d((3, 4)),
                     "native adaptive avg pool (window sum) -> pure-MLX ops"),
    "lp": (lambda: L.LPPool2d(2, 3, 2, ceil_mode=True), lambda: torch.nn.LPPool2d(2, 3, 2, ceil_mode=True),
           "native LP pool (power window sum) -> pure-MLX ops"),
}


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("name", CASES)
def test_window_sum_pools_export_with_torchs_values(name, batched, tmp_path):
    build, build_torch, note = CASES[name]
    pool, torch_pool = build(), build_torch()
    x_t = torch.randn(2, 5, 9, 7, generator=torch.Generator().manual_seed(0)).abs()  # LP p=2 of |x|: no NaN
    x_t = x_t if batched else x_t[0]
    perm = (0, 2, 3, 1) if batched else (1, 2, 0)
    x = mx.array(x_t.permute(*perm).numpy())
    expected = torch_pool(x_t).permute(*perm).numpy()
    path = str(tmp_path / "pool.mlxfn")
    with export_mode() as mode:
        mx.export_function(path, lambda a: pool(a), x)
    (out,) = mx.import_function(path)(x)
    assert_close(np.array(out), expected, rel=1e-5, what=f"exported {name}")
    assert (note in mode.replacements) == native_status()["available"], mode.replacements
    assert_close(np.array(pool(x)), expected, rel=1e-5, what=f"{name} after export mode")
