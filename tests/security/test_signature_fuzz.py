"""Every leaf of a port's recorded call ``signature`` (a nested keyword cache: inputs bound by path) replaced by a
value of a wrong type, unhashable ones included (session 15).

Before: ``signature.params[i].kind`` an object or list raised ``TypeError: unhashable type: 'dict'`` from inside
``input_binding.compile_signature`` at load (found by a mutation-fuzz driver over graph.json, 9,000 cases: the
only internal error). Now each is an :class:`ArtifactError` naming graph.json and ``signature``, or loads when the
value is one the format allows.
"""

import json
import shutil

import pytest

import porter
from porter.converters import ArtifactError
from tests.security.attack_helpers import json_leaves
from tests.security.test_nested_inputs import cached  # noqa: F401 - the fixture: a port with a nested keyword cache

HOSTILE = [{"op": "mod", "args": [1, 0]}, [1, 2], [[]], {}, None, 2 ** 62, -1, 1.5, True, "", "__class__",
           {"value": {"x": 1}}]


def test_every_signature_leaf_with_a_wrong_type_fails_cleanly(cached, tmp_path):  # noqa: F811
    _, _, directory = cached
    graph = json.loads((directory / "graph.json").read_text())
    places = [p for p in json_leaves(graph["signature"])]
    assert any(p[-1] == "kind" for p in places) and any("path" in p for p in places)
    outcomes = {"refused": 0, "loads": 0}
    for place in places:
        for value in HOSTILE:
            work = tmp_path / "s-mlx"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(directory, work)
            edited = json.loads(json.dumps(graph))
            target = edited["signature"]
            for key in place[:-1]:
                target = target[key]
            target[place[-1]] = value
            (work / "graph.json").write_text(json.dumps(edited))
            try:
                porter.load(work)
                outcomes["loads"] += 1
            except ArtifactError as e:
                assert "graph.json" in str(e) and "signature" in str(e), (place, value, str(e))
                outcomes["refused"] += 1
    assert outcomes["refused"] > len(places) * len(HOSTILE) // 2, outcomes


@pytest.mark.parametrize("kind", [{"op": "mod"}, ["positional_or_keyword"], 3, None])
def test_kind_of_a_wrong_type_is_named(cached, tmp_path, kind):  # noqa: F811
    _, _, directory = cached
    work = tmp_path / "k-mlx"
    shutil.copytree(directory, work)
    graph = json.loads((work / "graph.json").read_text())
    graph["signature"]["params"][0]["kind"] = kind
    (work / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match=r"signature\.params\[0\]\.kind' must be one of"):
        porter.load(work)
