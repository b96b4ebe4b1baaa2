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


def test_apply_switches_sets_porter_bool_switches_only(monkeypatch):
    from porter.converters import static_values

    monkeypatch.setattr(static_values, "ENABLED", True)
    assert bench.apply_switches("porter.converters.static_values:ENABLED=0") == {
        "porter.converters.static_values:ENABLED": False}
    assert static_values.ENABLED is False
    for bad, match in [("os:sep=1", "expected 'porter.module:ATTR"), ("porter.bench:SWITCHES_ENV=1", "not a bool"),
                       ("porter.converters.static_values:ENABLED=yes", "expected"),
                       ("porter.converters.static_values:MISSING=1", "not a bool")]:
        with pytest.raises(ValueError, match=match):
            bench.apply_switches(bad)


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


# ---------------------------------------------------------------- the converted model, saved and loaded torch-free
ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """tiny_net converted and saved once by the converter process, with torch's outputs at batches 2 and 3."""
    return bench.benchmark_isolated(dict(framework="convert", builder="tests.test_bench:tiny_net", chw=[3, 12, 10],
                                         batches=[2, 3], out=str(tmp_path_factory.mktemp("port")), sys_path=[ROOT]))


@pytest.mark.slow
def test_loaded_worker_runs_the_saved_port_without_torch(converted):
    """The converter saves one artifact (batch stays dynamic) and torch's output per batch; each loaded process
    matches torch's output at its batch, never imports torch, and trains the same parameters as torch."""
    import numpy as np

    convert = converted
    assert convert["artifacts"]["2"] == convert["artifacts"]["3"]  # one conversion serves both batches
    assert np.load(convert["refs"]["3"]).shape == (3, 5) and convert["artifact_mb"] > 0
    for batch, mode in ((2, "forward"), (3, "train")):
        spec = dict(builder="tests.test_bench:tiny_net", shape=[batch, 3, 12, 10], repeat=1, warmup=0,
                    sys_path=[ROOT], mode=mode)
        row = bench.benchmark_isolated(dict(spec, framework="loaded", artifact=convert["artifacts"][str(batch)],
                                            ref=convert["refs"][str(batch)], profile=mode == "forward"))
        torch_row = bench.benchmark_isolated(dict(spec, framework="torch"))
        assert row["torch_free"] is True and row["path"] == "porter.load" and row["mode"] == mode
        assert row["max_rel_err"] < 1e-5 and row["peak_rss_mb"] > 0 and row["mlx_peak_mb"] > 0
        assert row["train_params"] == torch_row["train_params"] == convert["train_params"]
    ops = {op for op, _, _ in bench.benchmark_isolated(dict(
        spec, framework="loaded", mode="forward", artifact=convert["artifacts"]["2"], ref=convert["refs"]["2"],
        shape=[2, 3, 12, 10], profile=True))["profile"]}
    assert "unary:gelu" in ops and any(op.startswith("conv") for op in ops), ops


@pytest.mark.slow
def test_loaded_worker_checks_torch_and_the_reference(converted, tmp_path):
    """In a process that holds torch (this one) the loaded worker refuses to report; a reference of another shape
    (another model's output) is an error, not a silent comparison."""
    import numpy as np

    convert = converted
    spec = dict(builder="tests.test_bench:tiny_net", shape=[2, 3, 12, 10], repeat=1, warmup=0,
                artifact=convert["artifacts"]["2"], ref=convert["refs"]["2"])
    with pytest.raises(RuntimeError, match="imported torch"):
        bench.run_loaded(spec)
    np.save(tmp_path / "wrong.npy", np.zeros((2, 4), np.float32))
    with pytest.raises(RuntimeError, match="output has shape"):
        bench.benchmark_isolated(dict(spec, framework="loaded", ref=str(tmp_path / "wrong.npy"), sys_path=[ROOT]))


def test_time_fn_stops_at_max_seconds():
    import time

    t = bench.time_fn(lambda: time.sleep(0.02), warmup=0, repeat=50, max_seconds=0.05)
    assert 1 <= len(t["times_ms"]) <= 4


def test_first_output_of_dicts_and_tuples():
    assert bench._first({"out": 1, "aux": 2}) == 1 and bench._first(((3, 4), 5)) == 3 and bench._first(6) == 6


# ---------------------------------------------------------------- benchmarks/models.py: registry, groups, summary
def test_model_groups_and_registry():
    from benchmarks.model_list import GROUPS, MODELS, select
    from tests.zoo.twins import CASES

    assert select("all") == list(MODELS)
    assert set(select("video")) == {"r3d_18", "mc3_18", "r2plus1d_18", "s3d"}
    assert select("segmentation") == ["fcn_resnet50", "deeplabv3_resnet50", "lraspp_mobilenet_v3_large"]
    assert select("resnet18,classification,resnet18")[0] == "resnet18"
    assert len(select("resnet18,classification")) == len(select("classification"))
    assert {m["group"] for m in MODELS.values()} == set(GROUPS)
    for name in ("alexnet", "densenet121", "inception_v3", "shufflenet_v2_x1_0", "maxvit_t", "swin_v2_t", "vit_b_16"):
        assert name in MODELS
    for name, m in MODELS.items():  # every twin the registry names exists, at torchvision's structure
        if m["builder"] == "benchmarks.twins:build":
            assert m["builder_kwargs"]["name"] == name and name in CASES
    with pytest.raises(ValueError, match="--models: unknown model or group 'resnet9'"):
        select("resnet18,resnet9")


def _row(model, batch, mode, ratio, cpu):
    return dict(model=model, batch=batch, mode=mode, ratio=ratio, cpu_ratio=cpu, error=None)


def test_summary_geometric_mean_and_rows_over_target():
    from benchmarks.model_report import summary

    rows = [_row("a", 1, "forward", 0.5, 0.4), _row("b", 1, "forward", 2.0, 1.6), _row("c", 1, "forward", 1.01, 1.0),
            _row("a", 8, "forward", 0.9, 0.9), _row("a", 8, "train", 1.1, 1.0), _row("b", 8, "train", 1.3, 1.2),
            dict(model="d", batch=1, mode="forward", error="boom")]
    lines = summary(rows)
    assert lines[0].startswith("Forward, batch 1: geometric mean of MLX/torch over 3 models 1.00 (CPU time 0.86)")
    assert lines[1].startswith("Forward, batch 8: geometric mean of MLX/torch over 1 models 0.90")
    over = lines[2]
    assert "b b1 forward 2.00" in over and "c b1 forward 1.01" in over and "b b8 train 1.30" in over
    assert "a b8 train" not in over and "a b1" not in over
    assert lines[3] == "Failed: d b1 forward."


@pytest.mark.slow
def test_models_main_end_to_end(tmp_path, monkeypatch):
    """A tiny registered model through benchmarks/models.py: table, summary and the JSON rows agree."""
    import json

    from benchmarks import model_list, models

    monkeypatch.setitem(model_list.MODELS, "tiny", dict(builder="tests.test_bench:tiny_net", builder_kwargs={},
                                                        chw=(3, 12, 10), group="classification", zoo=None))
    lines = []
    path = tmp_path / "rows.json"
    rows = models.main(["--models", "tiny", "--batches", "1,2", "--rounds", "1", "--repeat", "1", "--warmup", "0",
                        "--json", str(path)], out=lines.append)
    saved = json.loads(path.read_text())
    assert [(r["model"], r["batch"], r["mode"]) for r in saved["rows"]] == [("tiny", 1, "forward"), ("tiny", 2, "forward")]
    assert all(r["error"] is None and r["torch_free"] and r["max_rel_err"] < 1e-5 for r in rows)
    assert sum(line.startswith("| tiny |") for line in lines) == 2 and "| yes |" in lines[2]
    assert saved["summary"][0] == f"Forward, batch 1: geometric mean of MLX/torch over 1 models {rows[0]['ratio']:.2f}" \
                                  f" (CPU time {rows[0]['cpu_ratio']:.2f})."
    assert saved["summary"] == lines[-len(saved["summary"]):]


def test_torch_worker_runs_with_torchs_own_blas_and_allocator(monkeypatch):
    # the worker imports porter.bench; Porter's CPU defaults (its BLAS, glibc tuned to keep freed blocks) would
    # change how fast torch runs there, so the torch baseline is measured with both left as torch has them
    seen = {}

    class Done:
        returncode, stdout, stderr = 0, '{"ok": 1}', ""

    def fake_run(cmd, env=None, **kwargs):
        seen.update(env)
        return Done()

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.delenv("PORTER_CACHE_LIMIT", raising=False)
    bench.benchmark_isolated({"framework": "torch"})
    assert seen["PORTER_BLAS"] == "none" and seen["PORTER_CACHE_LIMIT"] == "mlx"
    seen.clear()
    bench.benchmark_isolated({"framework": "loaded"})
    assert "PORTER_CACHE_LIMIT" not in seen  # the MLX side keeps Porter's defaults
    seen.clear()
    bench.benchmark_isolated({"framework": "torch"}, env={"PORTER_CACHE_LIMIT": "512MB"})
    assert seen["PORTER_CACHE_LIMIT"] == "512MB"  # an explicit setting wins


# ---------------------------------------------------------------- a missing or stale native build is never timed silently
@pytest.fixture(scope="module")
def no_build(tmp_path_factory):
    """What a fresh interpreter finds when no native build exists for the current sources (an empty kernel root, as
    after a ``layers/csrc`` edit: the build tag hashes the sources, so a stale build is simply not found)."""
    root = str(tmp_path_factory.mktemp("no-kernels"))
    return root, bench.benchmark_isolated({"framework": "native"}, env={"PORTER_KERNEL_DIR": root})


def test_native_state_of_a_missing_build(no_build):
    root, state = no_build
    assert state["needed"] is True and state["available"] is False and state["directory"].startswith(root)
    problem = bench.native_problem(state)
    assert "not built for the current sources" in problem and state["directory"] in problem
    assert "porter build-kernels" in problem
    assert bench.native_problem(dict(state, available=True)) is None
    assert bench.native_problem(dict(state, needed=False)) is None  # PORTER_NATIVE=0 / a GPU: pure MLX on purpose
    off = bench.benchmark_isolated({"framework": "native"}, env={"PORTER_KERNEL_DIR": root, "PORTER_NATIVE": "0"})
    assert off["needed"] is False and bench.native_problem(off) is None


def test_mlx_worker_refuses_a_missing_build_when_required(no_build):
    """require_native: the worker fails naming the missing build and the command; without it the row records it."""
    root, _ = no_build
    spec = dict(builder="torch.nn:Conv2d", builder_kwargs=dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
                shape=[1, 3, 6, 5], repeat=1, warmup=0, converter="tests.test_bench:conv_to_mlx", sys_path=[REPO_ROOT],
                framework="mlx")
    env = {"PORTER_KERNEL_DIR": root}
    with pytest.raises(RuntimeError, match=r"not built for the current sources(.|\n)*porter build-kernels"):
        bench.benchmark_isolated(dict(spec, require_native=True), env=env)
    row = bench.benchmark_isolated(spec, env=env)
    assert row["native"]["available"] is False and row["native"]["needed"] is True
    assert bench.benchmark_isolated(dict(spec, require_native=True))["native"]["available"] is True  # the real build


def test_models_main_refuses_without_a_build(no_build, tmp_path, monkeypatch, capsys):
    """benchmarks/models.py exits before converting anything, naming the build folder and the command."""
    from benchmarks import models

    root, state = no_build
    monkeypatch.setenv("PORTER_KERNEL_DIR", root)
    with pytest.raises(SystemExit) as exc:
        models.main(["--models", "resnet18", "--batches", "1", "--rounds", "1", "--json", str(tmp_path / "r.json")],
                    out=lambda line: None)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "refusing to time the MLX side" in err and state["directory"] in err and "porter build-kernels" in err
    assert "--allow-pure-mlx" in err and not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_models_main_allow_pure_mlx_warns_and_records(no_build, tmp_path, monkeypatch, capsys):
    import json

    from benchmarks import model_list, models

    root, _ = no_build
    monkeypatch.setenv("PORTER_KERNEL_DIR", root)
    monkeypatch.setitem(model_list.MODELS, "tiny", dict(builder="tests.test_bench:tiny_net", builder_kwargs={},
                                                        chw=(3, 12, 10), group="classification", zoo=None))
    lines = []
    rows = models.main(["--models", "tiny", "--batches", "1", "--rounds", "1", "--repeat", "1", "--warmup", "0",
                        "--allow-pure-mlx", "--json", str(tmp_path / "rows.json")], out=lines.append)
    assert "WARNING" in capsys.readouterr().err
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert saved["native"]["available"] is False and rows[0]["pure_mlx"] is True and rows[0]["error"] is None
    assert "[PURE MLX: no native build]" in lines[2] and any(line.startswith("Pure-MLX layers") for line in lines)


def test_row_of_a_worker_without_the_build_is_marked():
    from benchmarks.model_report import format_row, make_row, summary

    timing = dict(times_ms=[1.0], median_ms=1.0, cpu_median_ms=1.0, peak_rss_mb=1.0, max_rel_err=0.0)
    torch_row = dict(timing)
    mlx_row = dict(timing, mlx_peak_mb=1.0, blas="b", threads=1, path="porter.load", torch_free=True,
                   native=dict(needed=True, available=False, directory="/k/x", reason="not built"))
    row = make_row("m", 1, "forward", [torch_row], [mlx_row], None)
    assert row["pure_mlx"] and "[PURE MLX" in format_row(row)
    assert any(line.startswith("Pure-MLX layers (no native build for the sources): m b1 forward") for line in summary([row]))
    ok = dict(mlx_row, native=dict(needed=True, available=True, directory="/k/a", reason=None))
    rows = [make_row("m", b, "forward", [torch_row], [dict(ok, native=dict(ok["native"], directory=d))], None)
            for b, d in ((1, "/k/a"), (8, "/k/b"))]
    assert not rows[0]["pure_mlx"] and "[PURE" not in format_row(rows[0])
    assert any("native build changed during the run (2 builds" in line for line in summary(rows))
