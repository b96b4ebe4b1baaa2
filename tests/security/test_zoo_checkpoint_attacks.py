"""The zoo's ``load_torch_state_dict`` / ``load_checkpoint`` on hostile state_dicts (session 14).

Before: ``num_batches_tracked`` (optional, loaded where the model keeps it) was reshaped to the model's scalar
with numpy's own error for any other size ("cannot reshape array of size 1000000 into shape ()"), naming neither
the key nor the model; a non-integer one was cast silently. Now it is listed with the mis-shaped keys.
"""

import numpy as np
import pytest

from porter import zoo
from tests.zoo.test_zoo import SMALL, numpy_state_dict, seeded_twin


@pytest.fixture(scope="module")
def state():
    return numpy_state_dict(seeded_twin("resnet18"))


@pytest.mark.parametrize("value, what", [
    (np.zeros(10 ** 6, np.int64), "mis-shaped: bn1.num_batches_tracked"),
    (np.zeros((2, 3), np.int64), "mis-shaped: bn1.num_batches_tracked"),
    (np.array(0.5, np.float32), "bn1.num_batches_tracked"),
])
def test_bad_num_batches_tracked_is_named(state, value, what):
    bad = dict(state)
    bad["bn1.num_batches_tracked"] = value
    with pytest.raises(ValueError) as info:
        zoo.create("resnet18", **SMALL["resnet18"]).load_torch_state_dict(bad)
    assert what in str(info.value) and "[ResNet]" in str(info.value), str(info.value)


def test_good_num_batches_tracked_still_loads(state):
    model = zoo.create("resnet18", **SMALL["resnet18"]).load_torch_state_dict(state)
    assert int(np.array(model.bn1.num_batches_tracked)) == int(state["bn1.num_batches_tracked"])
