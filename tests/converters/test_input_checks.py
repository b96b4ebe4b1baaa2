"""Issue 11, part 1: a port never returns numbers at an input size its capture was not built for.

Torch is the oracle, run here: at every size a port accepts it must give torch's numbers; every other size is
refused with one ValueError naming the input, the dim, the condition and what to do. The checks live in
graph.json (``input_checks``, ``dynamic_dims``) and survive save/load.
"""

import json
import re

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

from porter.compare import assert_close
import porter
from tests.models._common import randomize_
from tests.models.shape_guarded import BasicUNetSmall, MobileViTSmall, OddWidth, SwinSmall
from porter.converters.guards import InputChecks, compile_expr



def _run(ported, x):
    return np.array(ported(mx.array(x.numpy())))


def _assert_torch_numbers(ported, model, shape, seed=1, exact=False):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = model(x).numpy()
    got = _run(ported, x)
    assert got.shape == want.shape, f"at {shape}: shape {got.shape} != torch {want.shape}"
    err = float(np.abs(got - want).max())
    if exact:
        assert err == 0.0, f"at {shape}: max abs err {err}"
    else:
        assert_close(got, want, what=f"at {shape}")


def _assert_refused(ported, shape, *fragments):
    with pytest.raises(ValueError) as info:
        _run(ported, torch.randn(*shape))
    message = str(info.value)
    assert "convert the model again with an example input of this size" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    assert "while running" not in message  # refused before any kernel ran, not an error from inside the graph
    return message


# ---------------------------------------------------------------------------------------------------- odd width
def test_branch_on_odd_width_refuses_width_9_accepts_width_10():
    model = OddWidth()
    ported = porter.convert(model, torch.randn(2, 3, 8), io_layout="torch")
    guard = [c for c in ported.graph["input_checks"] if "% 2" in c["guard"]]
    assert guard and guard[0]["lhs"] == {"op": "mod", "args": [{"dim": [0, 2]}, 2]}
    assert {"input": 0, "axis": 2} in ported.dynamic_dims
    message = _assert_refused(ported, (2, 3, 9), "input 'x'", "size 9 in dim 2", "% 2", "!= 1")
    # torch at width 9 takes the other branch: the port would have been 3.1 away without the check
    x = torch.randn(2, 3, 9)
    assert not torch.equal(model(x), x.relu())
    for shape in [(2, 3, 10), (5, 1, 12), (1, 4, 2)]:
        _assert_torch_numbers(ported, model, shape, exact=True)
    assert message.count("\n") == 0


def test_converted_at_odd_width_refuses_even_width():
    model = OddWidth()
    ported = porter.convert(model, torch.randn(2, 3, 7), io_layout="torch")
    _assert_torch_numbers(ported, model, (3, 2, 11), exact=True)
    _assert_refused(ported, (3, 2, 12), "size 12 in dim 2")


def test_checks_survive_save_and_load(tmp_path):
    ported = porter.convert(OddWidth(), torch.randn(2, 3, 8), io_layout="torch")
    porter.save(ported, tmp_path / "odd")
    saved = json.loads((tmp_path / "odd" / "graph.json").read_text())
    assert saved["input_checks"] == ported.graph["input_checks"]
    assert saved["dynamic_dims"] == ported.dynamic_dims
    loaded = porter.load(tmp_path / "odd")
    assert loaded.dynamic_dims == ported.dynamic_dims
    _assert_refused(loaded, (2, 3, 9), "input 'x'", "size 9 in dim 2")
    _assert_torch_numbers(loaded, OddWidth(), (2, 3, 10), exact=True)


def test_artifact_without_checks_still_loads(tmp_path):
    """graph.json from before the checks existed: no key, no checks (format unchanged otherwise)."""
    ported = porter.convert(OddWidth(), torch.randn(2, 3, 8), io_layout="torch")
    porter.save(ported, tmp_path / "old")
    path = tmp_path / "old" / "graph.json"
    graph = json.loads(path.read_text())
    del graph["input_checks"], graph["dynamic_dims"]
    path.write_text(json.dumps(graph))
    loaded = porter.load(tmp_path / "old")
    assert len(loaded.input_checks) == 0 and loaded.dynamic_dims == []


# ---------------------------------------------------------------------------------------------------- static dims
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_static_and_batch_modes_check_every_other_dim(io_layout):
    model = randomize_(ConvNet(), 0)
    example = torch.randn(2, 3, 9, 7)
    static = porter.convert(model, example, io_layout=io_layout, dynamic="static")
    assert static.dynamic_dims == []
    batch = porter.convert(model, example, io_layout=io_layout, dynamic="batch")
    assert batch.dynamic_dims == [{"input": 0, "axis": 0}]

    def run(ported, shape):
        x = torch.randn(*shape)
        arr = x.numpy() if io_layout == "torch" else x.numpy().transpose(0, 2, 3, 1)
        got = np.array(ported(mx.array(np.ascontiguousarray(arr))))
        got = got if io_layout == "torch" else got.transpose(0, 3, 1, 2)
        with torch.no_grad():
            want = model(x).numpy()
        assert_close(got, want)

    run(static, (2, 3, 9, 7))
    run(batch, (5, 3, 9, 7))
    for ported in (static, batch):
        with pytest.raises(ValueError, match=r"size 8 in dim 2 \(torch layout\).*x.size\(2\) == 9"):
            run(ported, (2, 3, 8, 7))
    with pytest.raises(ValueError, match=r"size 1 in dim 0 .*x.size\(0\) == 2"):
        run(static, (1, 3, 9, 7))


def test_channel_count_is_checked_by_name_not_by_a_kernel_error():
    model = randomize_(ConvNet(), 0)
    ported = porter.convert(model, torch.randn(2, 3, 9, 7), io_layout="torch")
    assert {"input": 0, "axis": 1} not in ported.dynamic_dims
    _assert_refused(ported, (2, 4, 9, 7), "size 4 in dim 1", "x.size(1) == 3")
    _assert_torch_numbers(ported, model, (1, 3, 12, 5))


def test_several_inputs_equal_dims_are_tied():
    class Add(nn.Module):
        def forward(self, a, b):
            return a + b

    ported = porter.convert(Add(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4)), io_layout="torch")
    a, b = torch.randn(2, 5, 6), torch.randn(2, 5, 6)
    np.testing.assert_array_equal(np.array(ported(mx.array(a.numpy()), mx.array(b.numpy()))), (a + b).numpy())
    with pytest.raises(ValueError, match=r"input 'b' \(input 1\) has size 7 in dim 2"):
        ported(mx.array(a.numpy()), mx.array(np.zeros((2, 5, 7), np.float32)))


class _StarArgs(nn.Module):
    """``forward(self, x, *rest)``: torch.export binds ``rest`` as one tuple and guards ``L['rest'][1]``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, *rest):
        return self.conv(x) * rest[0] + rest[1].mean()


@pytest.mark.parametrize("dynamic", ["auto", "static"])
def test_star_args_forward_converts_and_checks_every_input(dynamic):
    torch.manual_seed(0)
    model = _StarArgs().eval()
    example = (torch.randn(2, 3, 8, 7), torch.randn(2, 1, 6, 5), torch.randn(5))
    ported = porter.convert(model, example, dynamic=dynamic, io_layout="torch")
    shapes = [((2, 3, 8, 7), (2, 1, 6, 5), (5,))] + ([((3, 3, 9, 6), (3, 1, 7, 4), (6,))] if dynamic == "auto" else [])
    for shape in shapes:
        inputs = [torch.randn(*s) for s in shape]
        with torch.no_grad():
            want = model(*inputs).numpy()
        assert_close(np.array(ported(*[mx.array(t.numpy()) for t in inputs])), want, what=f"at {shape}")
    bad = [np.zeros(s, np.float32) for s in ((2, 3, 8, 7), (3, 1, 6, 5), (5,))]  # rest[0]'s batch != x's
    with pytest.raises(ValueError, match=r"input 'rest_0' \(input 1\) has size 3 in dim 0"):
        ported(*[mx.array(b) for b in bad])


# ---------------------------------------------------------------------------------------------------- the twins
def test_unet_converted_at_odd_size_pads_like_torch_and_refuses_even_sizes():
    torch.manual_seed(0)
    model = randomize_(BasicUNetSmall(), 0)
    ported = porter.convert(model, torch.randn(1, 3, 17, 15), io_layout="torch", dynamic="all")
    for shape in [(1, 3, 17, 15), (2, 3, 21, 19), (1, 3, 13, 23)]:
        _assert_torch_numbers(ported, model, shape)
    _assert_refused(ported, (1, 3, 16, 16), "input 'x'", "dim")
    _assert_refused(ported, (1, 3, 17, 16), "size 16 in dim 3")


def test_unet_converted_at_even_size_refuses_odd_sizes():
    torch.manual_seed(0)
    model = randomize_(BasicUNetSmall(), 0)
    ported = porter.convert(model, torch.randn(1, 3, 16, 16), io_layout="mlx", dynamic="all")
    x = torch.randn(2, 3, 20, 24)
    got = np.array(ported(mx.array(x.numpy().transpose(0, 2, 3, 1)))).transpose(0, 3, 1, 2)
    with torch.no_grad():
        want = model(x).numpy()
    assert_close(got, want)
    with pytest.raises(ValueError, match=r"size 17 in dim 2 \(torch layout\)"):
        ported(mx.array(np.zeros((1, 17, 16, 3), np.float32)))


def test_mobilevit_unfold_refuses_sizes_that_need_interpolation():
    torch.manual_seed(0)
    model = randomize_(MobileViTSmall(), 0)
    ported = porter.convert(model, torch.randn(2, 3, 32, 32), io_layout="torch", dynamic="static")
    _assert_torch_numbers(ported, model, (2, 3, 32, 32))
    for shape in [(2, 3, 34, 34), (1, 3, 32, 32), (2, 3, 36, 44)]:
        _assert_refused(ported, shape, "input 'x'")


def test_swin_mask_built_by_slice_assignment_gives_torchs_numbers():
    """torchvision's shifted-window mask (``attn_mask[h0:h1, w0:w1] = count``) writes through views: the write
    used to be dropped (wrong numbers at every size); the capture now writes it back into the mask."""
    torch.manual_seed(0)
    model = randomize_(SwinSmall(), 0)
    ported = porter.convert(model, torch.randn(1, 3, 32, 32), io_layout="torch", dynamic="static")
    _assert_torch_numbers(ported, model, (1, 3, 32, 32))
    out_of_place = randomize_(SwinSmall(mask_out_of_place=True), 0)
    with torch.no_grad():
        x = torch.randn(1, 3, 32, 32)
        assert torch.equal(model(x), out_of_place(x))  # the same mask either way: the check above can fail


def test_swin_window_padding_and_shift_static_capture():
    torch.manual_seed(0)
    model = randomize_(SwinSmall(mask_out_of_place=True), 0)
    ported = porter.convert(model, torch.randn(1, 3, 32, 32), io_layout="torch", dynamic="static")
    _assert_torch_numbers(ported, model, (1, 3, 32, 32))
    for shape in [(1, 3, 16, 16), (1, 3, 33, 31), (2, 3, 32, 32)]:
        _assert_refused(ported, shape, "input 'x'")


# ---------------------------------------------------------------------------------------------------- validate
def test_validate_skips_a_second_size_the_port_refuses():
    ported = porter.convert(OddWidth(), torch.randn(2, 3, 8), io_layout="torch", dynamic="static")
    report = porter.validate(OddWidth(), ported)
    assert report.ok, str(report)
    assert any("the port refuses input shapes" in note for note in report.notes), report.notes


# ---------------------------------------------------------------------------------------------------- evaluator
def _checks(entries, perm=(0, 1, 2)):
    return InputChecks({"inputs": [{"name": "x", "perm": list(perm)}], "input_checks": entries})


@pytest.mark.parametrize("op,a,b", [("add", 7, -3), ("sub", 7, 9), ("mul", 7, 3), ("floordiv", -7, 2),
                                    ("mod", -7, 3), ("max", 7, 3), ("min", 7, 3)])
def test_expression_ops_follow_python_integer_semantics(op, a, b):
    import operator

    fn = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
          "mod": operator.mod, "max": max, "min": min}[op]
    expr = {"op": op, "args": [{"op": "sub", "args": [{"dim": [0, 1]}, 10]}, b]}  # dim 1 = 10 + a
    assert compile_expr(expr)([[0, 10 + a, 0]]) == fn(a, b)


def test_checks_map_torch_dims_through_a_channels_last_layout():
    entry = {"lhs": {"dim": [0, 1]}, "cmp": "eq", "rhs": 3, "guard": "x.size(1) == 3", "message": "channels"}
    checks = _checks([entry], perm=(0, 2, 1))  # torch dim 1 is array axis 2
    checks.check([mx.zeros((4, 9, 3))])
    with pytest.raises(ValueError, match=re.escape("size 9 in dim 1 (torch layout)")):
        checks.check([mx.zeros((4, 3, 9))])


def test_bad_expressions_are_rejected_when_loading():
    deep = {"dim": [0, 0]}
    for _ in range(40):
        deep = {"op": "add", "args": [deep, 1]}
    with pytest.raises(ValueError, match="nested deeper than 32"):
        _checks([{"lhs": deep, "cmp": "eq", "rhs": 1, "guard": "", "message": ""}])
    with pytest.raises(ValueError, match="'cmp' must be one of"):
        _checks([{"lhs": 1, "cmp": "is", "rhs": 1, "guard": "", "message": ""}])
    with pytest.raises(ValueError, match="op must be one of"):
        _checks([{"lhs": {"op": "pow", "args": [1, 2]}, "cmp": "eq", "rhs": 1, "guard": "", "message": ""}])


def test_torchscript_branch_on_a_size_pins_that_dim():
    """The TorchScript interpreter takes the example's branch: the port then runs only at the example's size of
    the dims the branch read (here the width); the others stay dynamic."""
    scripted = torch.jit.script(OddWidth())
    with pytest.warns(UserWarning, match="fixed to the example's result"):
        ported = porter.convert(scripted, torch.randn(2, 3, 8), io_layout="torch")
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}, {"input": 0, "axis": 1}]
    _assert_torch_numbers(ported, OddWidth(), (2, 3, 8), exact=True)
    _assert_torch_numbers(ported, OddWidth(), (4, 5, 8), exact=True)
    _assert_refused(ported, (2, 3, 9), "size 9 in dim 2", "x.size(2) == 8")
    _assert_refused(ported, (2, 3, 10), "size 10 in dim 2")


class PoolThenView(nn.Module):
    """max_pool1d's C++ kernel fixed the width while torch worked out its output shape, and the view then baked the
    pooled width (4 at width 9) into the graph; the capture now runs it as a 2-d pool whose size stays symbolic
    (``capture_pools.py``), so the view reads the pooled width at run time."""

    def __init__(self, view: bool):
        super().__init__()
        self.view = view

    def forward(self, x):
        y = nn.functional.max_pool1d(x, 2)
        return y.reshape(y.size(0), -1, y.size(2)) if self.view else y


@pytest.mark.parametrize("view", [False, True])
def test_max_pool1d_then_a_view_runs_at_any_width(view):
    ported = porter.convert(PoolThenView(view), torch.randn(2, 3, 9), io_layout="torch")
    assert {"input": 0, "axis": 2} in ported.dynamic_dims
    for width in (9, 12, 13):
        _assert_torch_numbers(ported, PoolThenView(view), (2, 3, width), exact=True)


def test_a_size_fixed_inside_a_kernel_binds_the_port_only_when_the_graph_bakes_sizes():
    """A size a C++ kernel fixed (``x.size(2) == 9``) matters only where the graph builds shapes from literal
    sizes or holds that number as a literal (a view may have baked it in); an excluded value (``!=``) never pins
    a size."""
    from porter.converters.capture_guards import _needed

    dim = {"dim": [0, 2]}
    assert _needed("kernel-call", "eq", dim, 9, {9, "sizes"})
    assert _needed("kernel-call", "eq", dim, 9, {9})
    assert not _needed("kernel-call", "eq", dim, 9, {4, 3})
    assert not _needed("kernel-call", "ne", dim, 9, {9, "sizes"})
    assert _needed("kernel-call", "ge", dim, 3, set())  # a size limit always binds


class _CausalText(nn.Module):
    """CLIP-style text encoder: nn.TransformerEncoder given a causal mask buffer without an is_causal hint (torch
    compares the mask's values against a causal one, which a capture cannot do), sliced to the sequence length."""

    def __init__(self, length=8):
        super().__init__()
        self.tok = nn.Embedding(40, 16)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=True),
                                         2, enable_nested_tensor=False)
        self.register_buffer("mask", torch.full((length, length), float("-inf")).triu(1))

    def forward(self, text):
        n = text.shape[1]
        return self.enc(self.tok(text), mask=self.mask[:n, :n])


def test_transformer_with_an_unhinted_causal_mask_converts():
    torch.manual_seed(0)
    model = _CausalText(length=12).eval()
    text = torch.randint(0, 40, (2, 7))
    ported = porter.convert(model, text, io_layout="torch")
    for t in (text, torch.randint(0, 40, (3, 7))):
        with torch.no_grad():
            want = model(t).numpy()
        assert_close(np.array(ported(mx.array(t.numpy()))), want, what=f"at {tuple(t.shape)}")


def test_a_size_pinned_by_a_layout_guard_is_refused_not_crashed():
    # the sequence length equals the mask buffer's: torch pins it to 8 while working out a view's layout and bakes
    # 8 into the attention's reshapes; another length must be refused by name (it crashed inside a reshape before)
    torch.manual_seed(0)
    model = _CausalText(length=8).eval()
    ported = porter.convert(model, torch.randint(0, 40, (2, 8)), io_layout="torch")
    t = torch.randint(0, 40, (3, 8))
    with torch.no_grad():
        assert_close(np.array(ported(mx.array(t.numpy()))), model(t).numpy(), what="batch 3")
    with pytest.raises(ValueError, match=r"input 'text' \(input 0\) has size 5 in dim 1.*text.size\(1\) == 8"):
        ported(mx.array(torch.randint(0, 40, (3, 5)).numpy()))


# ---------------------------------------------------------------------------------------------------- several dims off
class FlatHead(nn.Module):
    """A conv whose flattened output meets a fixed matrix: torch's guard ties height and width in one product,
    ``4 * (H - 2) * (W - 2) == 784``, so a port takes 16x16 (and other factorings) only. The matrix is built in
    the forward, so 784 is a literal of the graph and the guard, from inside matmul's shape rule, is kept."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x).flatten(1) @ torch.ones(4 * 14 * 14, 2)


def test_a_refusal_names_every_dim_that_is_off_and_what_the_port_accepts_for_each():
    """Two pinned dims both off: the refusal used to name the first broken check's dim only (a caller who fixed
    it met a second refusal); it names both now, each with the sizes the port accepts."""
    model = randomize_(ConvNet(), 0)
    ported = porter.convert(model, torch.randn(2, 3, 9, 7), dynamic="batch", io_layout="torch")
    message = _assert_refused(ported, (2, 3, 8, 6), "has size 8 in dim 2 and input 'x' (input 0) has size 6 in dim 3",
                              "breaks the conditions x.size(2) == 9; x.size(3) == 7", "x.size(2) == 9", "x.size(3) == 7", "2 dims must change",
                              "dim 2 of 'x': 8 -> 9", "dim 3 of 'x': 6 -> 7")
    assert message.index("dim 2 of 'x'") < message.index("dim 3 of 'x'")
    _assert_refused(ported, (2, 3, 8, 7), "size 8 in dim 2", "Nearest sizes of dim 2 that pass the checks on it: 9")
    _assert_torch_numbers(ported, model, (5, 3, 9, 7))


def test_a_check_on_two_dims_names_the_dims_that_are_off_only():
    """One product guard reads height and width: a call with only the height off names the height (the width
    matches the example) and the height the port accepts with that width; both off, both are named."""
    model = randomize_(FlatHead(), 0)
    ported = porter.convert(model, torch.randn(2, 3, 16, 16), io_layout="torch")
    message = _assert_refused(ported, (2, 3, 17, 16), "has size 17 in dim 2 (torch layout)", "1 dim must change",
                              "dim 2 of 'x': 17 -> 16")
    assert "in dim 3" not in message and "dim 3 of" not in message
    _assert_refused(ported, (2, 3, 17, 18), "has size 17 in dim 2 and input 'x' (input 0) has size 18 in dim 3",
                    "2 dims must change", "dim 2 of 'x': 17 -> 16", "dim 3 of 'x': 18 -> 16")
    _assert_torch_numbers(ported, model, (3, 3, 16, 16))
    assert ported.input_checks.refusal([(1, 3, 16, 16)]) is None


def test_a_true_division_compared_with_an_integer_float_is_checked_exactly_in_integers():
    """``A / B cmp c`` (torch's non-strict export adds ``IntTrueDiv(E, E) >= 1.0`` while computing a tensor's
    min/max; left outside the format it pinned the dims it read) translates to ``A cmp c * B`` with ``B > 0``:
    against Python's float division at every small pair and at large sizes, for each comparison, either side."""
    import ast
    import itertools

    from porter.converters.capture_guards import _Translator
    from porter.converters.guards import CMPS

    dims = {"d_0_0": (0, 0), "d_0_1": (0, 1)}
    pairs = [(a, b) for a in range(0, 40) for b in range(1, 40)] + [(2 ** 31 - 1, 2 ** 31), (3 * 2 ** 30, 2 ** 30),
                                                                   (2 ** 32 - 1, 2 ** 31 - 1)]
    for text, c in itertools.product(("(d_0_0 // 1) / d_0_1 {op} {c}", "{c} {op} d_0_0 / d_0_1"), (0.0, 1.0, 2.0, 3.0)):
        for op in ("<", "<=", "==", "!=", ">=", ">"):
            guard = text.format(op=op, c=c)
            checks = _Translator(dims, [2]).checks(ast.parse(guard, mode="eval"))
            compiled = [(compile_expr(lhs), CMPS[cmp], compile_expr(rhs)) for lhs, cmp, rhs in checks]
            for a, b in pairs:
                want = eval(guard.replace("d_0_0", str(a)).replace("d_0_1", str(b)))
                got = all(f(l([[a, b]]), r([[a, b]])) for l, f, r in compiled)
                assert got == want, (guard, a, b)
    negative = _Translator(dims, [2]).checks(ast.parse("d_0_0 / d_0_1 >= 1.0", mode="eval"))
    assert ({"dim": [0, 1]}, "gt", 0) in negative  # the divisor's sign is checked, not assumed


# ---------------------------------------------------------------------------------------------------- len() of a tensor
class Halves(nn.Module):
    """DiT's classifier-free guidance in small: the batch's first half twice, split and mixed back. ``len(x)`` must
    return an int, so the capture fixes the batch; ``x.shape[0]`` stays symbolic."""

    def __init__(self, use_len: bool):
        super().__init__()
        self.use_len = use_len
        self.mix = nn.Linear(4, 4)

    def forward(self, x):
        n = len(x) if self.use_len else x.shape[0]
        half = x[: n // 2]
        a, b = torch.split(self.mix(torch.cat([half, half])), n // 2)
        return torch.cat([a - 2 * b, a + b])


def test_a_batch_read_with_len_is_refused_naming_the_line_and_shape_keeps_it_dynamic():
    model = randomize_(Halves(use_len=True), 0)
    ported = porter.convert(model, torch.randn(4, 4), io_layout="torch")
    _assert_torch_numbers(ported, model, (4, 4))
    _assert_refused(ported, (6, 4), "size 6 in dim 0", "x.size(0) == 4", "in forward: n = len(x) if self.use_len",
                    "Python's len() of a tensor returns a plain int", "x.shape[0] or x.size(0) keeps it symbolic")
    model = randomize_(Halves(use_len=False), 0)
    ported = porter.convert(model, torch.randn(4, 4), io_layout="torch")
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}]
    for batch in (4, 6, 7, 2):
        _assert_torch_numbers(ported, model, (batch, 4))
