"""Training-time kernels' arguments from a stranger's graph.json (session 17): the random kernels (``drop_block``,
``stochastic_depth``, ``train_dropout``, ``sdpa_dropout``) read their rates and geometry from the file and only use
them in ``train()``, so a bad value used to load fine and then compute garbage with no error (a rate of 2.0 dropped
everything, -1.0 halved every element, ``drop_block`` over axes ``[1, 1]`` dropped rows as blocks) or fail deep in
the kernel (``IndexError``). Each is refused at load, naming the file, the node and the field, an axis past the rank
of the value the node reads too (session 18; known from the example's sizes). A batch norm's counter from the
weights file is checked at load too, naming the weights file."""

import json

import mlx.core as mx
import pytest

import porter
from porter import ArtifactError
from porter.converters.layer_dropout import dropout, stochastic_depth

_DROP_BLOCK = {"drop_prob": 0.1, "block_size": 3, "gamma_scale": 1.0, "axes": [1, 2]}
_DEPTH = {"p": 0.2, "mode": "row", "scale": True, "axis": 0}


def _between_pool_and_conv(kernel, attrs, inputs=None):
    """An edit putting a ``kernel`` node between TinyNet's max pool and its second conv (training follows the root)."""

    def edit(graph):
        at = next(i for i, n in enumerate(graph["nodes"]) if n["outputs"] == ["max_pool2d"]) + 1
        graph["nodes"].insert(at, {"kernel": kernel, "inputs": inputs or [{"ref": "max_pool2d"}], "attrs": attrs,
                                   "outputs": ["evil"], "layout": [0, 2, 3, 1], "op": "", "module": "",
                                   "module_type": ""})
        for node in graph["nodes"][at + 1:]:
            node["inputs"] = [{"ref": "evil"} if x == {"ref": "max_pool2d"} else x for x in node["inputs"]]

    return edit


_QKV = [{"ref": "max_pool2d"}] * 3
_BN_STATS = [{"ref": "max_pool2d"}, None, None]
_BN_RUNNING = [{"ref": "max_pool2d"}, None, None, {"param": "bn1.running_mean"}, {"param": "bn1.running_var"}]
REFUSED_AT_LOAD = {
    "drop_block drop_prob above 1": ("drop_block", {**_DROP_BLOCK, "drop_prob": 2.0}, None, "attrs.drop_prob"),
    "drop_block drop_prob negative": ("drop_block", {**_DROP_BLOCK, "drop_prob": -0.5}, None, "attrs.drop_prob"),
    "drop_block gamma_scale negative": ("drop_block", {**_DROP_BLOCK, "gamma_scale": -1.0}, None,
                                        "attrs.gamma_scale"),
    "drop_block huge block": ("drop_block", {**_DROP_BLOCK, "block_size": 1 << 40}, None, "attrs.block_size"),
    "drop_block one axis twice": ("drop_block", {**_DROP_BLOCK, "axes": [1, 1]}, None, "attrs.axes"),
    "stochastic_depth p above 1": ("stochastic_depth", {**_DEPTH, "p": 2.0}, None, "attrs.p"),
    "stochastic_depth p negative": ("stochastic_depth", {**_DEPTH, "p": -1.0}, None, "attrs.p"),
    "train_dropout p above 1": ("train_dropout", {"p": 2.0}, None, "attrs.p"),
    "train_dropout p negative": ("train_dropout", {"p": -1.0}, None, "attrs.p"),
    "sdpa_dropout rate above 1": ("sdpa_dropout", {"scale": None, "is_causal": False, "dropout": 1.5}, _QKV,
                                  "attrs.dropout"),
    "sdpa_dropout rate negative": ("sdpa_dropout", {"scale": None, "is_causal": False, "dropout": -0.1}, _QKV,
                                   "attrs.dropout"),
    # session 19, torch 2.13's batch_norm: "eps must be positive during training" (batch statistics), "eps must be
    # non-negative" (running statistics); the port computed NaN, or finite wrong values past the variance
    "batch statistics eps 0": ("batch_norm_batch_stats", {"axis": 3, "eps": 0.0}, _BN_STATS, "attrs.eps"),
    "batch statistics eps negative": ("batch_norm_batch_stats", {"axis": 3, "eps": -4.0}, _BN_STATS, "attrs.eps"),
    "running statistics eps negative": ("batch_norm", {"axis": 3, "eps": -4.0}, _BN_RUNNING, "attrs.eps"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_AT_LOAD))
def test_training_kernel_argument_refused_at_load(case, tampered):
    kernel, attrs, inputs, field = REFUSED_AT_LOAD[case]
    with pytest.raises(ArtifactError) as info:
        porter.load(tampered(_between_pool_and_conv(kernel, attrs, inputs)))
    assert info.value.file.endswith("graph.json") and info.value.field == field, str(info.value)
    assert info.value.where == f"node 4 (kernel {kernel!r})", str(info.value)


@pytest.mark.parametrize("kernel,attrs,field", [("drop_block", {**_DROP_BLOCK, "axes": [5, 6]}, "attrs.axes[0]"),
                                                ("stochastic_depth", {**_DEPTH, "axis": 9}, "attrs.axis")])
def test_training_kernel_axis_past_the_input_refused_at_load(kernel, attrs, field, tampered):
    """An axis past the rank of the value the node reads (4-d here; known at load from the example's sizes:
    ``converters/axis_checks.py``). Session 17 refused these only when called, drop_block's in training only."""
    with pytest.raises(ArtifactError, match="axis .* is out of range for a 4-d value") as info:
        porter.load(tampered(_between_pool_and_conv(kernel, attrs)))
    assert info.value.file.endswith("graph.json") and info.value.field == field, str(info.value)
    assert info.value.where == f"node 4 (kernel {kernel!r})", str(info.value)


@pytest.mark.parametrize("kernel,attrs,problem", [
    ("drop_block", {**_DROP_BLOCK, "axes": [1, 5]}, r"\[DropBlock2d\] 'axes' must be two different axes of the 3-d"),
    ("stochastic_depth", {**_DEPTH, "axis": 3}, r"\[StochasticDepth\] a 3-d input has no batch axis 3"),
])
def test_training_kernel_functions_check_the_axis(kernel, attrs, problem):
    """The functions behind the kernels keep their own check (a port built in Python reaches them directly)."""
    from porter.converters.layer_dropblock import drop_block

    x = mx.zeros((2, 4, 4))
    with pytest.raises(ValueError, match=problem):
        if kernel == "drop_block":
            drop_block(x, attrs["drop_prob"], attrs["block_size"], attrs["gamma_scale"], attrs["axes"], True)
        else:
            stochastic_depth(x, attrs["p"], attrs["mode"], attrs["scale"], attrs["axis"], True)


@pytest.mark.parametrize("kernel,attrs,inputs", [
    ("drop_block", _DROP_BLOCK, None), ("stochastic_depth", {**_DEPTH, "p": 1.0}, None),
    ("train_dropout", {"p": 1.0}, None), ("train_dropout", {"p": 0}, None),
    ("batch_norm_batch_stats", {"axis": 3, "eps": 1e-30}, _BN_STATS), ("batch_norm", {"axis": 3, "eps": 0.0},
                                                                       _BN_RUNNING)])
def test_training_kernel_edge_rates_still_load_and_train(kernel, attrs, inputs, tampered):
    """The bounds are torch's: 0 and 1 are rates torch takes (1 drops everything, as torch's kernels do); a tiny
    positive eps for batch statistics, 0 for running statistics."""
    model = porter.load(tampered(_between_pool_and_conv(kernel, attrs, inputs)))
    model.train()
    out = model(mx.random.normal((2, 16, 16, 3)))
    assert out.shape == (2, 5) and bool(mx.all(mx.isfinite(out)))


@pytest.mark.parametrize("fn,args,problem", [
    (dropout, (2.0, True), r"\[dropout\] 'p' must be a number in \[0, 1\]"),
    (stochastic_depth, (-1.0,), r"\[StochasticDepth\] 'p' must be a number in \[0, 1\]"),
    (stochastic_depth, (0.5, "rows"), r"\[StochasticDepth\] 'mode' must be one of"),
])
def test_functional_forms_check_their_arguments(fn, args, problem):
    """The functions behind the kernels check too (a port built in Python, not from a file, reaches them directly)."""
    with pytest.raises(ValueError, match=problem):
        fn(mx.ones((2, 3)), *args)


def _with_counter(tampered, count, momentum):
    directory = tampered(lambda g: g["modules"]["bn1"]["config"].update(momentum=momentum))
    arrays, metadata = mx.load(str(directory / "model.safetensors"), return_metadata=True)
    arrays["bn1.num_batches_tracked"] = mx.array(count, dtype=mx.int64)
    mx.save_safetensors(str(directory / "model.safetensors"), arrays, metadata)
    return directory


@pytest.mark.parametrize("count,momentum", [(-1, None), (-5, None), (-1, 0.1)])
def test_negative_batch_count_refused_at_load(tampered, count, momentum):
    """A batch norm's ``num_batches_tracked`` from the weights file: at -1 with ``momentum=None`` the first training
    step divided by a count of 0 (torch raises ZeroDivisionError) and the running statistics became inf/NaN."""
    with pytest.raises(ArtifactError, match=rf"'bn1.num_batches_tracked': must be >= 0 .* but is {count}") as info:
        porter.load(_with_counter(tampered, count, momentum))
    # the value lives in the weights file, not in graph.json (which session 17's refusal named)
    assert info.value.file.endswith("model.safetensors") and info.value.where == "tensor 'bn1.num_batches_tracked'"


def test_negative_batch_count_in_a_shard_names_the_shard(tiny_artifact, tmp_path):
    """A sharded port: the shard the index maps the counter to."""
    ported = porter.load(tiny_artifact[0])
    ported.bn1.num_batches_tracked = mx.array(-3, dtype=mx.int64)
    directory = tmp_path / "sharded-mlx"
    porter.save(ported, directory, max_shard_size=256)
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["bn1.num_batches_tracked"]
    assert len(set(index["weight_map"].values())) > 1
    with pytest.raises(ArtifactError, match=r"must be >= 0 .* but is -3") as info:
        porter.load(directory)
    assert info.value.file == str(directory / shard)


def test_a_zero_batch_count_trains(tampered):
    model = porter.load(_with_counter(tampered, 0, None))
    model.train()
    mx.eval(model(mx.random.normal((4, 16, 16, 3))))
    assert model.bn1.num_batches_tracked.item() == 1 and bool(mx.all(mx.isfinite(model.bn1.running_mean)))


_NAN = {"$float": "nan"}
BATCH_NORM_CONFIGS = {  # config edit, words of the refusal (all held before session 19: kept as regressions)
    "momentum above 1": ({"momentum": 2.0}, "'momentum' must be in [0, 1]"),
    "momentum NaN": ({"momentum": _NAN}, "momentum"),
    "eps negative": ({"eps": -1.0}, "'eps' must be positive"),
    "eps NaN": ({"eps": _NAN}, "eps"),
    "no features": ({"num_features": 0}, "num_features"),
    "features beside the weights": ({"num_features": 9}, "needs (9,)"),
}


@pytest.mark.parametrize("case", sorted(BATCH_NORM_CONFIGS))
def test_a_batch_norm_config_the_training_kernel_cannot_take_is_refused_at_load(case, tampered):
    """What graph.json can feed the native training batch norm (``BatchNormTrain``) through the layer's config."""
    edit, words = BATCH_NORM_CONFIGS[case]
    with pytest.raises(ArtifactError) as info:
        porter.load(tampered(lambda g: g["modules"]["bn1"]["config"].update(edit)))
    assert info.value.file.endswith("graph.json") and "bn1" in str(info.value) and words in str(info.value), \
        str(info.value)
