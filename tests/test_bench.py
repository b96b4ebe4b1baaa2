"""porter.bench: timing helpers and the isolated torch / MLX worker processes."""

import os

import pytest

from porter import bench
from tests.paths import REPO_ROOT



def conv_to_mlx(model, x):
    """Converter used by the worker test: a torch Conv2d as an MLX NHWC forward (plain mx ops)."""
    import mlx.core as mx

    w = mx.array(model.weight.detach().permute(0, 2, 3, 1).numpy())
    b = mx.array(model.bias.detach().numpy())
    return lambda x: mx.conv2d(x, w, padding=model.padding) + b


def test_time_fn_counts_and_orders():
    calls = []
    t = bench.time_fn(lambda: calls.append(1), warmup=2, repeat=5)
    assert len(calls) == 7 and len(t["times_ms"]) == 5
    assert t["min_ms"] <= t["p10_ms"] <= t["median_ms"] <= t["p90_ms"]


def test_load_spec():
    assert bench.load_spec("os.path:join") is os.path.join
    with pytest.raises(ValueError, match="expected 'module:function'"):
        bench.load_spec("os.path.join")


def test_isolated_workers_agree_with_torch():
    spec = dict(builder="torch.nn:Conv2d", builder_kwargs=dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
                shape=[2, 3, 10, 9], repeat=3, warmup=1, converter="tests.test_bench:conv_to_mlx", sys_path=[REPO_ROOT])
    torch_row = bench.benchmark_isolated(dict(spec, framework="torch"))
    mlx_row = bench.benchmark_isolated(dict(spec, framework="mlx"))
    assert torch_row["framework"] == "torch" and len(torch_row["times_ms"]) == 3
    assert mlx_row["framework"] == "mlx" and mlx_row["max_rel_err"] < 1e-5  # checked against torch in the worker
    assert mlx_row["peak_rss_mb"] > 0 and mlx_row["mlx_peak_mb"] > 0 and mlx_row["blas"]
    with pytest.raises(RuntimeError, match="the mlx worker failed"):
        bench.benchmark_isolated(dict(spec, framework="mlx", converter="tests.test_bench:missing"))


def tiny_net():
    import torch

    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GELU(), torch.nn.Conv2d(8, 8, 3, groups=2),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))


def test_training_step_and_op_profile():
    """Train mode times forward + backward + SGD in both workers; the MLX one also attributes time to ops."""
    spec = dict(builder="tests.test_bench:tiny_net", shape=[2, 3, 12, 10], repeat=2, warmup=1, sys_path=[REPO_ROOT],
                mode="train")
    torch_row = bench.benchmark_isolated(dict(spec, framework="torch"))
    mlx_row = bench.benchmark_isolated(dict(spec, framework="mlx", profile=True))
    assert torch_row["mode"] == mlx_row["mode"] == "train" and len(mlx_row["times_ms"]) == 2
    assert mlx_row["max_rel_err"] < 1e-5
    ops = {op for op, _, _ in mlx_row["profile"]}
    assert "unary:gelu" in ops and any(op.startswith("conv") for op in ops), ops
    assert abs(sum(share for _, _, share in mlx_row["profile"]) - 1) < 1e-6


def test_train_step_updates_the_converted_model():
    import mlx.core as mx
    import numpy as np
    import torch

    import porter

    torch.manual_seed(0)
    model = tiny_net().eval()
    x = torch.randn(2, 3, 12, 10)
    ported = porter.convert(model, (x,))
    from mlx.utils import tree_flatten

    before = {k: np.array(v) for k, v in tree_flatten(ported.trainable_parameters())}
    xm = mx.array(x.numpy().transpose(0, 2, 3, 1))
    step = bench._train_step_mlx(ported, xm, lr=0.01)
    first, second = float(step()), float(step())
    after = dict(tree_flatten(ported.trainable_parameters()))
    assert any(not np.array_equal(before[k], np.array(after[k])) for k in before) and second < first
