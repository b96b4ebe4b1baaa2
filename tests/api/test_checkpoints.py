"""porter.checkpoints as a Python API: each step on its own, and open_model against torch running the same weights.

The command line's behaviour on the same files is covered by tests/cli (test_formats.py) and tests/security; here
the library's surface: arguments as Python values, one CheckpointError, the typed zoo registry behind --arch, and
the format detected once.
"""

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import porter.checkpoints as ckpts
import porter.zoo as zoo
from porter.checkpoints import CheckpointError


class Net(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def net(num_classes=4):
    return Net(num_classes)


def _seeded(num_classes=4):
    torch.manual_seed(1)
    model = Net(num_classes)
    with torch.no_grad():  # batch norm statistics and biases away from their 0/1 defaults
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.3, 0.3)
    return model.eval()


SPEC = f"{__name__}:net"


def test_import_is_torch_free():
    code = "import sys, porter.checkpoints; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_error_is_a_value_error_with_what_hint_and_details():
    err = CheckpointError("What went wrong.", "What to do.", ["a", "b"])
    assert isinstance(err, ValueError) and err.exit_code == 2
    assert str(err) == err.render() == "What went wrong. What to do.\n  - a\n  - b"


@pytest.mark.parametrize("wrapping", ["plain", "state_dict", "model", "module.", "_orig_mod.", "safetensors"])
def test_open_model_runs_the_saved_weights(tmp_path, wrapping):
    model = _seeded()
    state = model.state_dict()
    path = str(tmp_path / "weights.bin")
    if wrapping == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, path)
    elif wrapping.endswith("."):
        torch.save({wrapping + k: v for k, v in state.items()}, path)
    elif wrapping == "plain":
        torch.save(state, path)
    else:
        torch.save({wrapping: state, "epoch": 3, "lr": 0.1}, path)
    src = ckpts.open_model(path, model=SPEC, model_kwargs={"num_classes": 4}, input_shapes=[(2, 3, 9, 7)])
    assert src.kind == ckpts.STATE_DICT and src.model_spec == SPEC and not src.model.training
    assert [tuple(t.shape) for t in src.example_inputs] == [(2, 3, 9, 7)]
    x = torch.randn(3, 3, 5, 11)
    with torch.no_grad():
        torch.testing.assert_close(src.model(x), model(x), rtol=0, atol=0)  # the same weights, exactly
    assert len(src.notes) == (0 if wrapping in ("plain", "safetensors") else 1)
    assert src.metadata()["model_kwargs"] == {"num_classes": 4}


def test_unwrap_state_dict_notes_and_refusals():
    weights = {"module.a": torch.zeros(1), "module.b": torch.ones(2)}
    state, notes = ckpts.unwrap_state_dict({"model_state_dict": weights, "step": 7})
    assert sorted(state) == ["a", "b"] and len(notes) == 2
    assert "'model_state_dict' entry" in notes[0] and "'module.' prefix" in notes[1]
    mixed = {"module.a": torch.zeros(1), "b": torch.zeros(1)}
    assert ckpts.unwrap_state_dict(mixed) == (mixed, [])  # a prefix on some keys only is the model's own name
    for obj, what in [(torch.zeros(3), "a single tensor"), ({}, "an empty dict"), ([1], "a list"),
                      ({"epoch": 3}, "a dict with keys 'epoch'")]:
        with pytest.raises(CheckpointError, match=f"'ck.pt' holds {what}, not a state_dict"):
            ckpts.unwrap_state_dict(obj, "ck.pt")


def test_load_state_dict_strict_lists_every_key():
    model = Net()
    state = model.state_dict()
    del state["conv.bias"]
    state["extra"] = torch.zeros(1)
    state["fc.weight"] = torch.zeros(3, 6)
    with pytest.raises(CheckpointError) as info:
        ckpts.load_state_dict_strict(model, state, "w.pt")
    err = info.value
    assert "'w.pt' do not match the architecture Net (1 missing, 1 unexpected, 1 mis-shaped keys)" in err.what
    assert err.details == ["missing from the checkpoint: conv.bias", "unexpected in the checkpoint: extra",
                           "shape mismatch fc.weight: checkpoint (3, 6) vs model (4, 6)"]
    good = _seeded().state_dict()
    assert ckpts.load_state_dict_strict(model, good) is model
    assert all(torch.equal(model.state_dict()[k], v) for k, v in good.items())


def test_build_model_takes_a_dict_or_json_and_names_the_option():
    model = ckpts.build_model("torch.nn:Linear", {"in_features": 3, "out_features": 2})
    assert isinstance(model, nn.Linear) and model.out_features == 2 and not model.training
    assert ckpts.build_model("torch.nn:Linear", '{"in_features": 3, "out_features": 5}').out_features == 5
    with pytest.raises(CheckpointError, match="--arch 'nope' is not of the form package.module:factory"):
        ckpts.build_model("nope", {}, "--arch")
    with pytest.raises(CheckpointError, match="--model-kwargs must be a JSON object, got list"):
        ckpts.build_model("torch.nn:Linear", "[1]")
    with pytest.raises(CheckpointError, match="--model-kwargs must be a dict or JSON text, got int"):
        ckpts.build_model("torch.nn:Linear", 3)
    with pytest.raises(CheckpointError, match="returned a dict, not a torch.nn.Module"):
        ckpts.build_model("builtins:dict", {"a": 1})


def test_architectures_come_from_typed_zoo_entries_and_the_examples():
    entry = zoo.entry("resnet18")
    assert isinstance(entry, zoo.ZooEntry) and entry.name == "resnet18"
    with pytest.raises(Exception):
        entry.torch_model = "x:y"  # frozen: the registry cannot be edited through an entry
    info = zoo.model_info("alexnet")
    assert (info["summary"], info["torch_model"]) == (zoo.entry("alexnet").summary, zoo.entry("alexnet").torch_model)
    assert ckpts.resolve_architecture("alexnet") == "torchvision.models:alexnet"  # a zoo entry
    assert ckpts.resolve_architecture("resnet18") == "porter.examples:resnet18"
    names = ckpts.architecture_names()
    assert names[:len(zoo.list_models())] == zoo.list_models() and len(set(names)) == len(names)
    assert ckpts.builtin_architecture("torchvision.models:alexnet") == "alexnet"
    assert ckpts.builtin_architecture("porter.examples:mobilenet_v2") == "mobilenet_v2"
    assert ckpts.builtin_architecture("mynet:Net") is None
    with pytest.raises(CheckpointError, match=r"--arch 'resnet7' is not an architecture Porter knows \(known: "):
        ckpts.resolve_architecture("resnet7")
    with pytest.raises(ValueError, match=r"\[porter.zoo\] unknown model 'resnet7'"):
        zoo.entry("resnet7")


@pytest.mark.parametrize("layer, shape", [(nn.Conv1d(5, 2, 3), (1, 5, 128)), (nn.Conv2d(3, 2, 3), (1, 3, 224, 224)),
                                          (nn.Conv3d(4, 2, 3), (1, 4, 16, 112, 112)), (nn.Linear(7, 2), (1, 7))])
def test_infer_input_shape_from_the_first_weight(layer, shape):
    module = nn.Sequential(layer)
    assert ckpts.infer_input_shape(module) == (shape, "0.weight")


def test_infer_input_shape_refuses_what_it_cannot_read():
    with pytest.raises(CheckpointError, match="cannot guess the input shape of the model in 'm.pt'"):
        ckpts.infer_input_shape(nn.Sequential(nn.BatchNorm2d(3)), "m.pt")
    inputs, note = ckpts.example_inputs(nn.Sequential(nn.Conv2d(3, 2, 3)), [], source="m.pt")
    assert [tuple(t.shape) for t in inputs] == [(1, 3, 224, 224)] and "guessed from '0.weight'" in note
    with pytest.raises(CheckpointError, match=r"cannot take input of shape \(1,4,8,8\) \(from --input-shape\)"):
        ckpts.example_inputs(nn.Sequential(nn.Conv2d(3, 2, 3)), [(1, 4, 8, 8)], source="m.pt")


@pytest.mark.parametrize("value", [(1, 0, 3), (1, 2.0), ("1,x",), (True, 2)])
def test_parse_input_shapes_refuses_non_positive_integers(value):
    with pytest.raises(CheckpointError, match="is not a list of positive integers"):
        ckpts.parse_input_shapes([value[0]] if isinstance(value[0], str) else [value])
    assert ckpts.parse_input_shapes(["1,3,8,8", (2, 3)]) == [(1, 3, 8, 8), (2, 3)]


def test_the_format_is_detected_once(tmp_path, monkeypatch):
    path = str(tmp_path / "w.pt")
    torch.save(_seeded().state_dict(), path)
    fmt = ckpts.detect_format(path)
    assert fmt == ckpts.TORCH_SAVE

    def detect_again(_):
        raise AssertionError("detected twice")

    monkeypatch.setattr("porter.checkpoints.load.detect_format", detect_again)
    assert ckpts.load_checkpoint(path, format=fmt).kind == ckpts.STATE_DICT
    assert ckpts.open_model(path, model=SPEC, input_shapes=[(1, 3, 4, 4)], format=fmt).format == fmt
    with pytest.raises(ValueError, match=r"\[load_checkpoint\] 'format' must be one detect_format returns"):
        ckpts.load_checkpoint(path, format="pickle")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_even_with_a_known_format(tmp_path):
    fifo = str(tmp_path / "pipe.pt")
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="is not a regular file"):
        ckpts.load_checkpoint(fifo, format=ckpts.TORCH_SAVE)  # never opened: opening a FIFO would block


def test_the_command_prints_the_librarys_paragraph(tmp_path):
    from click.testing import CliRunner

    from porter.cli.main import main

    path = str(tmp_path / "w.pt")
    torch.save(_seeded().state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        ckpts.open_model(path)
    result = CliRunner().invoke(main, ["convert", path])
    assert result.exit_code == 2
    assert info.value.what in " ".join(result.output.split()) or info.value.what in result.output
