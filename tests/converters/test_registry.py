"""The converter registry: decorator-filled, duplicates and misses raise, and the conversion side stays torch-free."""

import ast
import pathlib

import pytest

from porter.converters import registry
from porter.converters.registry import UnsupportedOpsError, get_converter, get_kernel, register, supported_ops

CONVERTERS_DIR = pathlib.Path(__file__).resolve().parents[2] / "converters"


def test_duplicate_registration_raises():
    @register("test.only_for_this_test.default")
    def convert_a(ctx, call):
        pass

    try:
        with pytest.raises(ValueError, match="duplicate converter"):
            @register("test.only_for_this_test.default")
            def convert_b(ctx, call):
                pass
    finally:
        registry._CONVERTERS.pop("test.only_for_this_test.default")


def test_duplicate_kernel_raises():
    registry._load_families()
    with pytest.raises(ValueError, match="duplicate kernel"):
        registry.kernel("conv")(lambda x: x)


def test_miss_names_the_op():
    with pytest.raises(NotImplementedError, match="aten.no_such_op.default"):
        get_converter("aten.no_such_op.default")
    with pytest.raises(NotImplementedError, match="no_such_kernel"):
        get_kernel("no_such_kernel")


def test_unsupported_ops_error_lists_everything():
    err = UnsupportedOpsError({"aten.b.default": ["layer2", "layer1"], "aten.a.default": [""]})
    assert isinstance(err, NotImplementedError)
    assert err.ops == ["aten.a.default", "aten.b.default"]
    assert err.locations["aten.b.default"] == ["layer1", "layer2"]
    assert "'layer1'" in str(err) and "<root>" in str(err)


def test_coverage_of_the_core_ops():
    ops = set(supported_ops())
    core = {
        "aten.conv2d.default", "aten.conv_transpose2d.input", "aten.batch_norm.default", "aten.layer_norm.default",
        "aten.linear.default", "aten.max_pool2d.default", "aten.max_pool2d_with_indices.default",
        "aten.avg_pool2d.default", "aten.adaptive_avg_pool2d.default", "aten.max_unpool2d.default",
        "aten.upsample_bilinear2d.vec", "aten.cat.default", "aten.flatten.using_ints", "aten.view.default",
        "aten.permute.default", "aten.scaled_dot_product_attention.default", "aten.hardswish.default",
        "aten.relu_.default", "operator.getitem", "aten.sym_size.int",
    }
    assert core <= ops, core - ops


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_conversion_and_runtime_never_import_torch():
    # only the capture stage (the files named capture*.py, by convention) may import torch; everything after the IR
    # is torch-free (and loading a port never imports capture files: test_serialize's load without torch)
    for path in CONVERTERS_DIR.rglob("*.py"):
        if path.name.startswith("capture"):
            continue
        bad = [m for m in _imports(path) if m == "torch" or m.startswith("torch.")]
        assert not bad, f"{path.relative_to(CONVERTERS_DIR)} imports {bad}"
