"""Every runtime kernel declares the spec of its arguments (``@kernel(name, inputs=..., attrs=...)``), and the spec
agrees with the kernel's signature: a kernel added without one fails here (and cannot be loaded from a file)."""

import inspect

import pytest

from porter.converters import spec as S
from porter.converters.registry import _KERNELS, get_kernel_spec, kernel_names, takes_training

KERNELS = kernel_names()


def test_there_are_kernels():
    assert len(KERNELS) >= 50


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_has_a_spec_matching_its_signature(name):
    spec = get_kernel_spec(name)
    assert spec is not None, f"kernel {name!r} is registered without an argument spec: add inputs=/attrs= to @kernel"
    params = list(inspect.signature(_KERNELS[name]).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(spec.inputs) == len(positional), f"{name}: one input spec per positional parameter"
    has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    assert (spec.more is not None) == has_varargs, f"{name}: 'more' spec iff the kernel takes *args"
    kwonly = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
    if takes_training(name):  # the runtime's mode keyword, never read from a file (no spec: a file cannot set it)
        assert "training" in kwonly and "training" not in spec.attrs, name
        kwonly.discard("training")
    has_varkw = any(p.kind == p.VAR_KEYWORD for p in params)
    assert kwonly <= set(spec.attrs), f"{name}: attrs without a spec: {sorted(kwonly - set(spec.attrs))}"
    if not has_varkw:
        assert set(spec.attrs) <= kwonly, f"{name}: specs for attrs it does not take: {set(spec.attrs) - kwonly}"
    for item in [*spec.inputs, *spec.attrs.values(), *([spec.more] if spec.more else [])]:
        assert isinstance(item, S.Spec)


def test_dtype_table_matches_the_allow_list():
    from porter.converters.ops.misc import _MX_DTYPES

    assert set(_MX_DTYPES) == set(S.DTYPES)


def test_layer_functions_are_an_explicit_table():
    from porter.converters.ops import _layers

    assert _layers.fn("max_pool2d") is _layers.FUNCTIONS["max_pool2d"]
    for name in ["__getattribute__", "__builtins__", "__class__", "_functional", "annotations", 3, None]:
        with pytest.raises(NotImplementedError):
            _layers.fn(name)


def test_vocabulary_rejects_what_it_should():
    def no_refs(key, name):
        raise S.SpecError("no refs here")

    cases = [
        (S.Int(0, 3), [True, 4, -1, 1.0, "1", None]),
        (S.Float(), [float("nan"), float("inf"), True, "1.0", None]),
        (S.Bool(), [0, 1, "true", None]),
        (S.Enum("a", "b"), ["c", "__class__", 1, None]),
        (S.Ints(1, 2, 0, 5), [[], [1, 2, 3], [6], [1.0], "12"]),
        (S.Opt(S.Int()), ["x", 1.5]),
        (S.Str(5, "ab"), ["abc", "aaaaaa", 1]),
        (S.TENSOR, ["x", {"ref": 1}, {"ref": "a", "param": "b"}, {"call": "f"}, [{"ref": "a"}]]),
        (S.Obj({"a": S.Int()}, ["a"]), [{}, {"a": 1, "b": 2}, {"a": "1"}, []]),
    ]
    for spec, bad in cases:
        for value in bad:
            with pytest.raises(S.SpecError):
                spec.check(value, lambda k, n: None)
    good = [(S.Int(0, 3), 3), (S.Float(allow_inf=True), float("inf")), (S.Opt(S.Int()), None),
            (S.Ints(1, 2, 0, 5), [0, 5]), (S.Str(5, "ab"), "abba"), (S.SIZES, [1, None, {"ref": "n"}]),
            (S.Obj({"a": S.Int()}, ["a"]), {"a": 2})]
    for spec, value in good:
        spec.check(value, lambda k, n: None)
    with pytest.raises(S.SpecError, match="no refs"):
        S.TENSOR.check({"ref": "a"}, no_refs)
