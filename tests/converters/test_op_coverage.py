"""Every registered converter is exercised: each op of ``porter.converters.supported_ops()`` is converted, and the
result compared with torch, by at least one model here.

The models are the converter tests' own (imported from their test files: the same modules and inputs those tests
check at two sizes), the coverage registry's reference models, and the frontends that produce the other
spellings (TorchScript, core-ATen programs from ``run_decompositions``). This test converts them all itself,
so it holds whichever subset of the suite runs. A new converter fails it until a model using it is listed in
``EXERCISERS``. Conversion goes through static ``torch.export`` where the ops do not depend on it (fast); the
entries marked ``dynamic`` need symbolic sizes (``sym_size``, ``operator.*``, ``math.ceil``).
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import pytest
import torch
import torch.nn as nn

import porter

from tests.converters import test_capture_regions as regions  # noqa: E402
from tests.converters import test_frontends as frontends
from tests.converters import test_layout as layout
from tests.converters import test_ops_catalog as catalog
from tests.converters import test_ops as ops
from tests.converters import test_ops_math as math_ops
from tests.converters import test_ops_misc as misc
from tests.converters import test_ops_more as more_ops
from tests.converters import test_ops_complex as complex_ops
from tests.converters import test_ops_fft as fft_ops
from tests.converters import test_ops_resample_aa as resample_aa
from tests.converters import test_capture_decompose as decompose
from tests.converters import test_ops_recurrent as recurrent_ops
from tests.converters import test_ops_sample as sample_ops
from tests.converters import test_ops_select as select_ops
from tests.converters import test_ops_special as special_ops
from tests.converters import test_ops_pool_options as pool_options
from tests.converters import test_ops_real as real
from tests.converters import test_view_writes as view_writes
from tests.converters import test_ops_views as views
from tests.converters import test_ops_linalg as linalg_ops
from tests.converters import test_ops_linalg_more as linalg_more
from tests.converters import test_ops_special_poly as special_poly
from tests.converters import test_ops_tensor_split as tensor_split
from tests.converters import test_ops_as_strided as as_strided
from tests.converters import test_ops_small as small_ops
from tests.converters import test_ops_added as added
from tests.converters import test_ops_half_sweep as half_sweep
from tests.converters import test_ir_fusion as ir_fusion
from tests.converters import test_ops_losses as losses
from tests.converters import test_torchscript_composites as ts_composites
from tests.converters import test_torchscript_literals as ts_literals
from tests.converters import test_unseen_models as unseen
from tests.converters import test_unseen_models_more as unseen_more
from tests.converter_check import assert_matches
from tests.models import REGISTRY, dropblock, droppath, make_inputs
from porter.converters import supported_ops


class Exerciser(NamedTuple):
    build: Callable  # () -> (eager model, example inputs tuple)
    frontend: str = "export"  # "export" (static), "dynamic" (porter.convert on the module), "script", "trace",
    # "decomposed" (core ATen: run_decompositions)
    compare: bool = True  # False only where the outputs are half precision (compared in their own test file)


def _randn(*shapes):
    return tuple(torch.randn(*s) for s in shapes)


def _case(model, *shapes):
    return lambda: (model, _randn(*shapes))


EXERCISERS = {}
for _name, (_model, _shapes) in ops.CASES.items():
    EXERCISERS[f"test_ops:{_name}"] = Exerciser(_case(_model, _shapes[0]))
for _i, _act in enumerate(ops.ACT):
    EXERCISERS[f"test_ops:act{_i}"] = Exerciser(_case(ops.m(nn.Conv2d(3, 4, 3), _act), (2, 3, 6, 6)))
for _name, (_fn, _shapes, _nd) in pool_options.CASES.items():
    EXERCISERS[f"test_ops_pool_options:{_name}"] = Exerciser(_case(pool_options.Fn(_fn, nd=_nd).eval(), _shapes[0]))
EXERCISERS["test_ops_pool_options:fractional"] = Exerciser(_case(pool_options.Fractional().eval(), (2, 3, 9, 10)))
for _name, _shape in {"FlattenAfterConv": (2, 3, 8, 8), "ChannelConcat": (2, 3, 7, 7), "ConvNeXtBlock": (2, 8, 9, 9),
                      "ClassToken": (2, 3, 16, 16), "SqueezeExcite": (2, 3, 6, 6), "ChannelOps": (2, 3, 5, 5)}.items():
    EXERCISERS[f"test_layout:{_name}"] = Exerciser(_case(getattr(layout, _name)().eval(), _shape))
EXERCISERS["test_layout:ChannelShuffle"] = Exerciser(_case(layout.ChannelShuffle(3).eval(), (2, 4, 5, 5)))
EXERCISERS["test_layout:Residual"] = Exerciser(_case(layout.randomise_bn(layout.Residual()), (2, 4, 9, 9)))
EXERCISERS["test_ops_views:Views"] = Exerciser(_case(views.Views().eval(), (2, 3, 6, 7)))
for _name in views._COPY_CASES:
    EXERCISERS[f"test_ops_views:CopyForm:{_name}"] = Exerciser(_case(views.CopyForm(_name), (2, 3, 4, 5)))
for _name in added._SWEEP_CASES:
    EXERCISERS[f"test_ops_added:SweepCase:{_name}"] = Exerciser(_case(added.SweepCase(_name), (2, 3, 4)))
EXERCISERS["test_ir_fusion:CosineAttention"] = Exerciser(_case(ir_fusion.CosineAttention().eval(), (2, 7, 32)))
for _name in half_sweep.HALF_CASES:
    EXERCISERS[f"test_ops_half_sweep:{_name}"] = Exerciser(
        lambda _name=_name: (half_sweep.HalfCase(_name), (half_sweep._inputs((2, 3, 5), torch.float16, 0),)), compare=False)
EXERCISERS["test_ops_losses:MultiLabelMargin"] = Exerciser(
    lambda: (losses._Loss("mean"), (torch.randn(4, 7), torch.tensor([[3, 0, -1, 1, 0, 0, 0]] * 4))))
EXERCISERS["test_torchscript_composites:Composites"] = Exerciser(
    lambda: (ts_composites.Composites(), ts_composites._inputs(0)), "trace")
EXERCISERS["test_ops_added:Products"] = Exerciser(_case(added.Products().eval(), (2, 5, 8)))
EXERCISERS["test_ops_added:Shifts"] = Exerciser(
    lambda: (added.Shifts(), (torch.randint(-300, 300, (2, 6), dtype=torch.int32),
                              torch.randint(-3, 40, (2, 6), dtype=torch.int32))))
EXERCISERS["test_ops_misc:Misc"] = Exerciser(
    lambda: (misc.Misc().eval(), (torch.randn(2, 3, 4, 6), torch.randint(0, 10, (2, 5)))))
EXERCISERS["test_ops_select:Orderings"] = Exerciser(_case(select_ops.Orderings().eval(), (2, 3, 4, 6)))
EXERCISERS["test_ops_select:Argsorts"] = Exerciser(_case(select_ops.Argsorts().eval(), (2, 3, 5)))
EXERCISERS["test_ops_select:Scatters"] = Exerciser(lambda: (select_ops.Scatters().eval(),
                                                            select_ops._scatter_inputs(2, 4, 5, False)))
EXERCISERS["test_ops_select:Folds"] = Exerciser(_case(select_ops.Folds(select_ops.FOLDS[1], (7, 9)).eval(),
                                                      (2, 3, 7, 9)))
EXERCISERS["test_ops_recurrent:Stack"] = Exerciser(_case(recurrent_ops.Stack().eval(), (2, 5, 4)))
EXERCISERS["test_ops_recurrent:rnn_tanh"] = Exerciser(
    _case(recurrent_ops.WithStates("rnn", nonlinearity="tanh").eval(), (4, 2, 3), (1, 2, 5), (1, 2, 5)))
EXERCISERS["test_ops_sample:Sampler"] = Exerciser(lambda: (sample_ops.Sampler().eval(), sample_ops._inputs(2, 6, 8, 5, 4)))
EXERCISERS["test_ops_sample:VolumeSampler"] = Exerciser(lambda: (sample_ops.VolumeSampler().eval(),
                                                                 sample_ops._volume_inputs(2, 4, 5, 6)))
EXERCISERS["test_ops_sample:VolumeSampler:core"] = Exerciser(  # core ATen spells it grid_sampler_3d
    lambda: (sample_ops.VolumeSampler().eval(), sample_ops._volume_inputs(2, 4, 5, 6)), "decomposed")
EXERCISERS["test_ops_math:Activations"] = Exerciser(_case(math_ops.Activations().eval(), (2, 3, 5, 6)))
EXERCISERS["test_ops_math:Pointwise"] = Exerciser(_case(math_ops.Pointwise().eval(), (2, 3, 5), (2, 3, 5), (2, 3, 5)))
EXERCISERS["test_ops_math:Statistics"] = Exerciser(_case(math_ops.Statistics().eval(), (2, 3, 7, 6)))
EXERCISERS["test_ops_math:RMSNorms"] = Exerciser(_case(math_ops.RMSNorms().eval(), (2, 3, 6, 7)))
EXERCISERS["test_ops_math:Scans"] = Exerciser(lambda: (math_ops.Scans().eval(), math_ops._scan_inputs(2, 4, 5)))
EXERCISERS["test_ops_math:Products"] = Exerciser(lambda: (math_ops.Products().eval(),
                                                          math_ops._product_inputs(2, 4, 5)))
EXERCISERS["test_ops_math:Shuffles"] = Exerciser(_case(math_ops.Shuffles().eval(), (2, 3, 5, 4)))
EXERCISERS["test_ops_math:OneHot"] = Exerciser(lambda: (math_ops.OneHot().eval(),
                                                        (torch.randint(0, 5, (3, 4)), torch.randn(2, 6, 7))))
EXERCISERS["test_ops_math:Cells"] = Exerciser(lambda: (math_ops.Cells().eval(), math_ops._cell_inputs(3)))
EXERCISERS["test_ops_special:Apply"] = Exerciser(lambda: (special_ops.Apply(list(special_ops.OPS)),
                                                         (torch.randn(3, 7) * 3,)))
EXERCISERS["test_ops_special:Composites"] = Exerciser(lambda: (special_ops.Composites(),
                                                              special_ops._composite_inputs(0, 2, 6)))
EXERCISERS["test_ops_special:Scriptable"] = Exerciser(lambda: (special_ops.Scriptable(),
                                                              special_ops._composite_inputs(0, 2, 6)), "trace")
EXERCISERS["test_ops_more:Elementwise"] = Exerciser(lambda: (more_ops.Elementwise().eval(),
                                                            more_ops._elementwise_inputs(2, 3, 5)))
EXERCISERS["test_ops_more:Diagonals"] = Exerciser(_case(more_ops.Diagonals().eval(), (2, 3, 4, 5)))
EXERCISERS["test_ops_more:CumExtremes"] = Exerciser(lambda: (more_ops.CumExtremes().eval(), more_ops._cum_inputs(2, 5)))
EXERCISERS["test_ops_more:Medians"] = Exerciser(lambda: (more_ops.MedianValues().eval(),
                                                        (more_ops._median_inputs(2, 5),)))
EXERCISERS["test_ops_more:Searches"] = Exerciser(lambda: (more_ops.Searches().eval(), more_ops._search_inputs(3)))
EXERCISERS["test_ops_more:Distances"] = Exerciser(lambda: (more_ops.Distances().eval(),
                                                          more_ops._distance_inputs(2, 30, 27)))
EXERCISERS["test_ops_more:Bags"] = Exerciser(lambda: (more_ops.Bags().eval(), more_ops._bag_inputs(7, [0, 2, 2, 5], 2)),
                                             "dynamic")  # the 2-d input's offsets come from sym_numel
EXERCISERS["test_ops_complex:RotaryAttention"] = Exerciser(_case(complex_ops.RotaryAttention().eval(), (2, 7, 32)))
EXERCISERS["test_ops_complex:ComplexOps"] = Exerciser(_case(complex_ops.ComplexOps().eval(), (2, 3), (2, 3)))
EXERCISERS["test_ops_fft:Transforms"] = Exerciser(_case(fft_ops.Transforms().eval(), (2, 6, 7)))
EXERCISERS["test_ops_fft:Spectrogram"] = Exerciser(_case(fft_ops.Spectrogram().eval(), (2, 400)))
EXERCISERS["test_ops_resample_aa:Resizes"] = Exerciser(_case(resample_aa.Resizes().eval(), (2, 3, 17, 12)))
EXERCISERS["test_ops_misc:SymbolicSizes"] = Exerciser(_case(misc.SymbolicSizes().eval(), (2, 3, 8, 9)), "dynamic")
EXERCISERS["test_ops_misc:AdvancedIndex"] = Exerciser(_case(misc.AdvancedIndex().eval(), (2, 3, 4, 5)))
EXERCISERS["test_frontends:net_script"] = Exerciser(_case(frontends.net(), (2, 3, 8, 8)), "script")
EXERCISERS["test_frontends:net_trace"] = Exerciser(_case(frontends.net(), (2, 3, 8, 8)), "trace")
EXERCISERS["test_frontends:ScriptedFeatures"] = Exerciser(
    _case(frontends.ScriptedFeatures().eval(), (2, 4, 3, 3)), "script")
EXERCISERS["test_ops_real:Masks"] = Exerciser(_case(real.Masks().eval(), (2, 3, 4, 5), (2, 3, 4, 5)))
EXERCISERS["test_ops_real:prelu"] = Exerciser(_case(nn.Sequential(nn.Conv2d(3, 4, 3), nn.PReLU(4)).eval(),
                                                    (2, 3, 5, 5)))
for _name in ("Sinusoid", "Diffs", "BuiltMasks"):
    EXERCISERS[f"test_ops_real:{_name}"] = Exerciser(_case(getattr(real, _name)().eval(), (2, 5, 8)), "dynamic")
EXERCISERS["test_ops_real:AsOps"] = Exerciser(_case(real.AsOps().eval(), (2, 3, 4, 5), (2, 4, 20)), "dynamic")
EXERCISERS["test_ops_real:MinMaxWhere"] = Exerciser(_case(real.MinMaxWhere().eval(), (2, 3, 4, 5), (2, 3, 4, 5)))
EXERCISERS["test_ops_real:Remainders"] = Exerciser(_case(real.Remainders().eval(), (2, 3, 5), (2, 3, 5)))
EXERCISERS["test_ops_real:weight_norm"] = Exerciser(
    _case(nn.Sequential(real._weight_normed("hook", nn.Conv1d(4, 6, 3), 0)).eval(), (2, 4, 9)))
EXERCISERS["test_capture_regions:Regions"] = Exerciser(_case(regions.Regions().eval(), (2, 6, 4)), compare=False)
EXERCISERS["test_capture_regions:RelativeIndex"] = Exerciser(_case(regions.RelativeIndex().eval(), (2, 2, 9, 9)))
EXERCISERS["test_view_writes:Writes"] = Exerciser(_case(view_writes.Writes().eval(), (2, 4, 6)))
for _name, _fns in catalog.FAMILIES.items():
    EXERCISERS[f"test_ops_catalog:{_name}"] = Exerciser(_case(catalog.Catalog(_fns).eval(), (2, 3, 4, 5)))
EXERCISERS["test_ops_catalog:ScriptedSizes"] = Exerciser(_case(catalog.ScriptedSizes().eval(), (2, 3, 4, 5)), "script")
EXERCISERS["test_torchscript_literals:Literals"] = Exerciser(_case(ts_literals.Literals().eval(), (2, 3)), "script")
EXERCISERS["test_ops_catalog:SymArith"] = Exerciser(_case(catalog.SymArith().eval(), (2, 3, 7, 9)), "dynamic")
EXERCISERS["test_ops_real:MoreOps"] = Exerciser(_case(real.MoreOps().eval(), (2, 4, 6), (2, 4, 6)))
EXERCISERS["test_ops_real:Grids"] = Exerciser(_case(real.Grids().eval(), (2, 3, 4, 5)))
EXERCISERS["test_ops_real:Rounding"] = Exerciser(_case(real.Rounding().eval(), (2, 3, 7)))
EXERCISERS["test_ops_real:Transcendental"] = Exerciser(_case(real.Transcendental().eval(), (2, 3, 7), (2, 3, 7)))
for _name, _spec in REGISTRY.items():
    EXERCISERS[f"models:{_name}"] = Exerciser(lambda spec=_spec: (spec.builder(), make_inputs(spec.inputs)))
EXERCISERS["test_unseen_models:GroupNormNet"] = Exerciser(_case(unseen.GroupNormNet().eval(), (2, 3, 9, 7)),
                                                       "decomposed")  # core ATen's native_group_norm
EXERCISERS["test_unseen_models_more:MaxNormEmbedding"] = Exerciser(
    lambda: (unseen_more.MaxNormEmbedding().eval(), (torch.tensor([[1, 2, 2, 5], [0, 9, 1, 3]]),)))
EXERCISERS["test_unseen_models_more:TensorSplits"] = Exerciser(_case(unseen_more.TensorSplits().eval(), (2, 5, 7)))
EXERCISERS["test_unseen_models_more:FeatureScatter"] = Exerciser(lambda: (unseen_more.FeatureScatter().eval(), (
    torch.randn(2, 6, 4), torch.randn(3, 4), torch.tensor([[1, 3, 3, 2, 0, 0], [3, 1, 1, 1, 1, 1]]))))
EXERCISERS["test_unseen_models_more:FeatureScatterInPlace"] = Exerciser(lambda: (
    unseen_more.FeatureScatterInPlace().eval(),
    (torch.randn(2, 6, 4), torch.randn(3, 4), torch.tensor([[1, 3, 3, 2, 0, 0], [3, 1, 1, 1, 1, 1]]))))
# the capture's marker ops (stochastic depth, functional and attention dropout that follow the training flag)
EXERCISERS["test_train_mode_droppath:Block"] = Exerciser(
    _case(droppath.Block(8, 2, attn_drop=0.5, drop_path=0.2).eval(), (2, 5, 8)), "dynamic")
EXERCISERS["test_train_mode_droppath:BartAttention"] = Exerciser(
    _case(droppath.BartAttention(8, 2, dropout=0.3).eval(), (2, 5, 8)), "dynamic")
EXERCISERS["test_ops_linalg:Linalg"] = Exerciser(_case(linalg_ops.Linalg().eval(), (2, 4, 6)))
EXERCISERS["test_ops_linalg:Vectors"] = Exerciser(_case(linalg_ops.Vectors().eval(), (2, 4, 6)))
EXERCISERS["test_ops_linalg_more:Factors"] = Exerciser(_case(linalg_more.Factors().eval(), (2, 4, 6)))
EXERCISERS["test_ops_tensor_split:ByPositions"] = Exerciser(lambda: (tensor_split.ByPositions().eval(),
                                                                  (torch.randn(5, 6, 7), torch.tensor([1, 4]))))
EXERCISERS["test_ops_as_strided:Strided"] = Exerciser(_case(as_strided.Strided().eval(), (3, 12)))
EXERCISERS["test_ops_special_poly:AllPolys"] = Exerciser(lambda: (special_poly.AllPolys().eval(),
                                                                  special_poly._grid(torch.float32)))
EXERCISERS["test_ops_small:Bits"] = Exerciser(_case(small_ops.Bits().eval(), (3, 4)))
EXERCISERS["test_ops_small:Integers"] = Exerciser(lambda: (small_ops._Fn(
    lambda a, b: (torch.gcd(a, b), torch.lcm(a, b), torch.gcd_(a.clone(), b), torch.lcm_(a.clone(), b),
                  torch.isin(a, b), torch.isin(a, 2), torch.isin(3, b))),
    (torch.randint(-20, 20, (3, 4)), torch.randint(-20, 20, (3, 4)))))
EXERCISERS["test_ops_small:Writes"] = Exerciser(lambda: (small_ops._Fn(lambda x: (
    x.clone().put_(torch.tensor([0, 5]), torch.tensor([1.0, 2.0])), x.put(torch.tensor([1]), torch.tensor([3.0])),
    torch.diagonal_scatter(x, x.diagonal() * 2), x.clone().index_reduce_(0, torch.tensor([0, 0]), x[:2], "amax"),
    x.index_reduce(0, torch.tensor([1, 0]), x[:2], "mean", include_self=False), x.swapdims(0, 1),
    torch.ldexp(x, torch.tensor([1, 2, 3, 4])), x.clone().ldexp_(torch.tensor([1, 0, 1, 0])),
    torch.nextafter(x.clone(), x).nextafter_(x), *torch.mode(x))), (torch.randn(4, 4),)))
EXERCISERS["test_exported_models:mobilenet_v3"] = Exerciser(
    lambda: (REGISTRY["mobilenet_v3"].builder(), make_inputs(REGISTRY["mobilenet_v3"].inputs)), "decomposed")
# timm's DropBlock2d (fast form) recognised in a ResNet block: the drop_block marker (test_train_mode_dropblock)
EXERCISERS["test_train_mode_dropblock:resnet_blocks"] = Exerciser(
    _case(dropblock.resnet_blocks(lambda: dropblock.DropBlock2d(0.2, 3)).eval(), (2, 3, 12, 12)), "dynamic")


def _convert(exerciser: Exerciser):
    model, example = exerciser.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exerciser.frontend == "dynamic":
            source = model
        elif exerciser.frontend == "script":
            source = torch.jit.script(model)
        elif exerciser.frontend == "trace":
            source = torch.jit.trace(model, example)
        else:
            source = torch.export.export(model, example, strict=False)
            if exerciser.frontend == "decomposed":
                source = source.run_decompositions()
        ported = porter.convert(source, example, io_layout="torch")
    return model, example, ported


@pytest.fixture(scope="module")
def exercised():
    """op -> names of the exercisers whose converted graph holds it (each checked against torch on its example).

    Constant folding is off here (``capture_fold.ENABLED``): a converter such as ``arange``'s or ``eye``'s must
    still convert the call its model makes with literal arguments (sizes from the input take the same converter),
    and folding would store the value instead (tests/converters/test_constant_folding.py checks that)."""
    from porter.converters import capture_fold

    seen: dict = {}
    capture_fold.ENABLED = False
    try:
        for name, exerciser in EXERCISERS.items():
            model, example, ported = _convert(exerciser)
            if exerciser.compare:
                assert_matches(ported, model, example)
            for node in ported.graph["nodes"]:
                seen.setdefault(node["op"], set()).add(name)
    finally:
        capture_fold.ENABLED = True
    return seen


def test_every_registered_converter_is_exercised(exercised):
    registered = set(supported_ops())
    assert len(registered) > 300 and len(exercised) > 200  # the registry and this census are really there
    missing = sorted(registered - set(exercised))
    assert not missing, (f"{len(missing)} registered converter(s) are not exercised by any model in EXERCISERS "
                         f"(add a model using them to a test and to EXERCISERS): {missing}")


def test_every_exerciser_converts_a_registered_op(exercised):
    by_exerciser: dict = {}
    for op, names in exercised.items():
        for name in names:
            by_exerciser.setdefault(name, set()).add(op)
    assert set(by_exerciser) == set(EXERCISERS)  # each listed model produced a converted graph
    unregistered = {op for op in exercised if op and op not in set(supported_ops())}
    assert not unregistered, unregistered
