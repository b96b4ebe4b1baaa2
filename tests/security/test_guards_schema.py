"""The optional ``input_checks`` and ``dynamic_dims`` keys (written by the guards branch) are accepted when well
formed and refused, naming the field, when not."""

import pytest

import porter
from porter.converters import ArtifactError

DIM = {"dim": [0, 2]}
GOOD_CHECK = {"lhs": {"op": "mod", "args": [DIM, 2]}, "cmp": "eq", "rhs": 0, "guard": "Eq(Mod(s0, 2), 0)",
              "message": "height must be even"}


def _deep(depth):
    e = 1
    for _ in range(depth):
        e = {"op": "add", "args": [e, DIM]}
    return e


def test_well_formed_guards_load(tampered):
    checks = [GOOD_CHECK, {"lhs": {"op": "max", "args": [{"dim": [0, -1]}, _deep(31)]}, "cmp": "ge", "rhs": 1,
                           "guard": "", "message": ""}]
    directory = tampered(lambda g: g.update(input_checks=checks, dynamic_dims=[{"input": 0, "axis": 2}]))
    loaded = porter.load(directory)
    assert loaded.graph["input_checks"] == checks


BAD = {
    "cmp unknown": ([dict(GOOD_CHECK, cmp="__eq__")], None, "cmp"),
    "op unknown": ([dict(GOOD_CHECK, lhs={"op": "pow", "args": [DIM, 2]})], None, "lhs.op"),
    "too few args": ([dict(GOOD_CHECK, lhs={"op": "add", "args": [DIM]})], None, "lhs.args"),
    "input out of range": ([dict(GOOD_CHECK, rhs={"dim": [1, 0]})], None, "rhs.dim[0]"),
    "axis out of range": ([dict(GOOD_CHECK, rhs={"dim": [0, 4]})], None, "rhs.dim[1]"),
    "expression a string": ([dict(GOOD_CHECK, lhs="x.shape[0]")], None, "lhs"),
    "expression a float": ([dict(GOOD_CHECK, lhs=1.5)], None, "lhs"),
    "nested too deep": ([dict(GOOD_CHECK, lhs=_deep(40))], None, "lhs"),
    "message too long": ([dict(GOOD_CHECK, message="x" * 5000)], None, "message"),
    "missing key": ([{k: v for k, v in GOOD_CHECK.items() if k != "guard"}], None, "guard"),
    "extra key": ([dict(GOOD_CHECK, run="os.system")], None, "run"),
    "checks not a list": ({"a": GOOD_CHECK}, None, "input_checks"),
    "dynamic dim not an object": (None, [[0, 2]], "dynamic_dims"),
    "dynamic dim input out of range": (None, [{"input": 3, "axis": 0}], "dim[0]"),
    "dynamic dim axis a string": (None, [{"input": 0, "axis": "H"}], "axis"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_guards_refused(case, tampered):
    checks, dims, field = BAD[case]

    def edit(graph):
        if checks is not None:
            graph["input_checks"] = checks
        if dims is not None:
            graph["dynamic_dims"] = dims

    with pytest.raises(ArtifactError) as info:
        porter.load(tampered(edit))
    assert field in str(info.value) and "graph.json" in str(info.value), str(info.value)


def _sum_tree(depth):
    """``x.size(2)`` added to itself in a full binary tree: 2**(depth+1) - 1 terms."""
    return DIM if depth == 0 else {"op": "add", "args": [_sum_tree(depth - 1), _sum_tree(depth - 1)]}


def test_refusal_search_is_bounded(tampered):
    """4096 checks of 15 terms on one dim that always pass, and one that never does: the refusal's search for the
    nearest passing sizes tried 512 sizes against all of them, 14 s of CPU per refused call from a 1.5 MB
    graph.json (minutes at 11 MB). Its work is now bounded; the refusal still names the check."""
    import time

    import mlx.core as mx

    checks = [{"lhs": _sum_tree(3), "cmp": "ne", "rhs": -1 - i, "guard": "g", "message": "m"} for i in range(4095)]
    checks.append({"lhs": DIM, "cmp": "ge", "rhs": 10 ** 9, "guard": "x.size(2) >= 10**9", "message": "never"})
    model = porter.load(tampered(lambda g: g.update(input_checks=checks)))
    start = time.process_time()
    with pytest.raises(ValueError, match="x.size\\(2\\) >= 1000000000"):
        model(mx.zeros((1, 16, 16, 3)))
    assert time.process_time() - start < 2.0  # was 14 s; now ~0.1 s (loaded machine: a wide margin)


def test_refusal_over_several_dims_is_bounded(tampered):
    """The same attack on two dims with a broken check reading both: the search for the fewest dims that are off and
    for each one's nearest sizes is held to the same budget (without it: tens of millions of terms per call)."""
    import time

    import mlx.core as mx

    width = {"dim": [0, 3]}
    checks = [{"lhs": _sum_tree(4), "cmp": "ne", "rhs": -1 - i, "guard": "g", "message": "m"} for i in range(2047)]
    checks += [{"lhs": {"op": "add", "args": [_sum_tree(4), width]}, "cmp": "ne", "rhs": -1 - i, "guard": "g",
                "message": "m"} for i in range(2047)]
    checks.append({"lhs": {"op": "add", "args": [DIM, width]}, "cmp": "eq", "rhs": 32, "guard": "H + W == 32",
                   "message": "the example's sum"})  # holds with both dims at the example's 16: both are off
    model = porter.load(tampered(lambda g: g.update(input_checks=checks)))
    start = time.process_time()
    with pytest.raises(ValueError, match="breaks the condition"):
        model(mx.zeros((1, 15, 18, 3)))
    assert time.process_time() - start < 2.0


def test_refusal_still_names_the_nearest_sizes(tampered):
    model = porter.load(tampered(lambda g: g.update(input_checks=[GOOD_CHECK])))
    import mlx.core as mx

    with pytest.raises(ValueError, match="Nearest sizes of dim 2 that pass the checks on it: 14 and 16"):
        model(mx.zeros((1, 15, 16, 3)))
