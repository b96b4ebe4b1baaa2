"""Size arithmetic (kernel ``int_op``) stays real (session 13): Python's ``pow`` of a negative float base and a
fractional exponent is a complex number, which a crafted graph.json returned as the model's output or used as a
``full`` fill value (cast silently to its real part) with no error."""

import mlx.core as mx
import pytest

import porter


def _append(graph, kernel, inputs, attrs, name):
    graph["nodes"].append({"kernel": kernel, "inputs": inputs, "attrs": attrs, "outputs": [name], "layout": None,
                           "op": "", "module": "evil", "module_type": ""})


def _complex_into(kernel, inputs, attrs):
    def edit(graph):
        _append(graph, "int_op", [-8.0, 0.5], {"op": "pow"}, "c")
        _append(graph, kernel, inputs, attrs, "z")
        graph["outputs"][0] = {"value": {"ref": "z"}, "perm": None}
    return edit


CASES = {
    "returned": ("int_op", [{"ref": "c"}, 1], {"op": "add"}),
    "a fill value": ("full", [[2, 2], {"ref": "c"}], {"dtype": "float32"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_complex_size_arithmetic_refused(case, tampered):
    model = porter.load(tampered(_complex_into(*CASES[case])))
    with pytest.raises(ValueError, match="int_op 'pow'.*complex"):
        model(mx.zeros((1, 16, 16, 3)))


def test_real_size_arithmetic_still_runs(tampered):
    def edit(graph):
        _append(graph, "int_op", [9.0, 0.5], {"op": "pow"}, "r")
        _append(graph, "full", [[2, 2], {"ref": "r"}], {"dtype": "float32"}, "z")
        graph["outputs"][0] = {"value": {"ref": "z"}, "perm": None}

    out = porter.load(tampered(edit))(mx.zeros((1, 16, 16, 3)))
    assert out.tolist() == [[3.0, 3.0], [3.0, 3.0]]
