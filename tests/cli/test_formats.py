"""Format detection from bytes and safe loading of every checkpoint kind (no converter involved)."""

import os
import struct
import zipfile

import pytest
import torch

from tests.cli.cli_checkpoints import X_SHAPE, write_checkpoint
from porter import checkpoints as formats
from porter.checkpoints import CheckpointError as InputError
from porter.checkpoints import open_model as open_source

STATE_DICT_KINDS = ["state_dict", "wrapped", "dataparallel", "legacy", "safetensors"]


@pytest.mark.parametrize("kind, fmt", [("torchscript", formats.TORCHSCRIPT), ("traced", formats.TORCHSCRIPT),
                                       ("export", formats.EXPORT), ("state_dict", formats.TORCH_SAVE),
                                       ("wrapped", formats.TORCH_SAVE), ("legacy", formats.TORCH_SAVE),
                                       ("safetensors", formats.SAFETENSORS), ("pickled", formats.TORCH_SAVE)])
def test_detect_format_from_content(tmp_path, kind, fmt):
    path, _ = write_checkpoint(kind, tmp_path)
    assert formats.detect_format(path) == fmt
    renamed = str(tmp_path / "no_extension")  # detection must not depend on the file name
    os.rename(path, renamed)
    assert formats.detect_format(renamed) == fmt


@pytest.mark.parametrize("kind", STATE_DICT_KINDS)
def test_state_dict_checkpoints_load_weights_exactly(tmp_path, kind):
    path, model = write_checkpoint(kind, tmp_path)
    ckpt = formats.load_checkpoint(path)
    assert ckpt.kind == formats.STATE_DICT
    expected = model.state_dict()
    assert sorted(ckpt.state_dict) == sorted(expected)  # safetensors stores keys sorted
    for name, value in expected.items():
        assert torch.equal(ckpt.state_dict[name], value), name


def test_wrapper_and_prefix_are_reported_as_notes(tmp_path):
    path, _ = write_checkpoint("wrapped", tmp_path)
    assert any("'state_dict' entry" in n for n in formats.load_checkpoint(path).notes)
    path, _ = write_checkpoint("dataparallel", tmp_path)
    assert any("'module.' prefix" in n for n in formats.load_checkpoint(path).notes)


@pytest.mark.parametrize("kind", ["torchscript", "traced", "export"])
def test_self_contained_formats_run_like_the_original(tmp_path, kind):
    path, model = write_checkpoint(kind, tmp_path)
    source = open_source(path)
    x = torch.randn(X_SHAPE)
    torch.testing.assert_close(source.torch_module()(x), model(x), rtol=0, atol=0)
    assert source.kind == "module" and source.model_spec is None


def test_export_uses_recorded_example_inputs(tmp_path):
    path, _ = write_checkpoint("export", tmp_path)
    assert [tuple(t.shape) for t in open_source(path).example_inputs] == [X_SHAPE]


def test_pickled_module_is_refused_without_unpickling(tmp_path, monkeypatch):
    path, _ = write_checkpoint("pickled", tmp_path)
    # If Porter unpickled the file, building TinyNet would run; make that impossible to miss.
    from tests.cli import tinynets

    monkeypatch.setattr(tinynets.TinyNet, "__setstate__", lambda self, state: pytest.fail("unpickled"),
                        raising=False)
    with pytest.raises(InputError) as info:
        formats.load_checkpoint(path)
    text = str(info.value)
    assert "tinynets.TinyNet" in text and "arbitrary code" in text
    assert "--trust-pickle" in text and "state_dict()" in text


def test_pickled_module_loads_with_trust_pickle(tmp_path):
    path, model = write_checkpoint("pickled", tmp_path)
    ckpt = formats.load_checkpoint(path, trust_pickle=True)
    assert ckpt.kind == "module" and not ckpt.model.training
    x = torch.randn(X_SHAPE)
    torch.testing.assert_close(ckpt.model(x), model(x), rtol=0, atol=0)


def test_state_dict_with_architecture_loads_strictly(tmp_path):
    path, model = write_checkpoint("state_dict", tmp_path)
    source = open_source(path, model="tests.cli.tinynets:tiny_net", input_shapes=["2,3,12,12"])
    x = torch.randn(X_SHAPE)
    torch.testing.assert_close(source.model(x), model(x), rtol=0, atol=0)
    assert not source.model.training
    assert source.metadata()["model"] == "tests.cli.tinynets:tiny_net"


def test_state_dict_without_architecture_says_what_to_do(tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    with pytest.raises(InputError, match=r"only weights.*--model package\.module:factory"):
        open_source(path)


def test_keys_and_shapes_mismatch_lists_every_name(tmp_path):
    from tests.cli import tinynets

    model = tinynets.seeded()
    state = model.state_dict()
    del state["conv1.bias"], state["bn1.running_var"]
    state["head.weight"] = torch.zeros(2)
    state["fc.weight"] = torch.zeros(3, 8)
    path = str(tmp_path / "bad.pt")
    torch.save(state, path)
    with pytest.raises(InputError) as info:
        open_source(path, model="tests.cli.tinynets:tiny_net")
    err = info.value
    assert err.exit_code == 2
    assert "2 missing, 1 unexpected, 1 mis-shaped" in err.what
    joined = "\n".join(err.details)
    for needle in ["missing from the checkpoint: conv1.bias", "missing from the checkpoint: bn1.running_var",
                   "unexpected in the checkpoint: head.weight", "fc.weight: checkpoint (3, 8) vs model (5, 8)"]:
        assert needle in joined


def test_model_kwargs_fix_the_mismatch(tmp_path):
    from tests.cli import tinynets

    torch.manual_seed(3)
    model = tinynets.TinyNet(num_classes=3).eval()
    path = str(tmp_path / "three.pt")
    torch.save(model.state_dict(), path)
    with pytest.raises(InputError, match="fc.weight"):
        open_source(path, model="tests.cli.tinynets:TinyNet")
    source = open_source(path, model="tests.cli.tinynets:TinyNet", model_kwargs='{"num_classes": 3}')
    assert source.example_inputs[0].shape == (1, 3, 224, 224)  # guessed from conv1.weight
    assert any("guessed" in note for note in source.notes)


@pytest.mark.parametrize("spec, kwargs, pattern", [
    ("tinynets", None, "not of the form package.module:factory"),
    ("no_such_module_xyz:Net", None, "cannot import module 'no_such_module_xyz'"),
    ("tests.cli.tinynets:Nope", None, "has no attribute 'Nope'"),
    ("tests.cli.tinynets:X_SHAPE_NOT_THERE", None, "has no attribute"),
    ("tests.cli.tinynets:tiny_net", "{bad json", "--model-kwargs is not valid JSON"),
    ("tests.cli.tinynets:tiny_net", "[1, 2]", "must be a JSON object"),
    ("tests.cli.tinynets:tiny_net", '{"depth": 3}', "could not be called"),
    ("torch:zeros", None, "raised TypeError|could not be called|not a torch.nn.Module"),
])
def test_bad_architecture_options(tmp_path, spec, kwargs, pattern):
    path, _ = write_checkpoint("state_dict", tmp_path)
    with pytest.raises(InputError, match=pattern):
        open_source(path, model=spec, model_kwargs=kwargs)


def test_unknown_arch_lists_known_ones(tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    with pytest.raises(InputError, match=r"--arch 'nope'.*resnet18"):
        open_source(path, arch="nope")


@pytest.mark.parametrize("shape, pattern", [
    ("1,3,x", "not a list of positive integers"), ("1,,3", "not a list of positive integers"), ("0,3,8,8", "not a list of positive integers"),
    ("1,5,16,16", r"cannot take input of shape \(1,5,16,16\).*--input-shape"),
    ("1,3", r"cannot take input of shape \(1,3\)"),
])
def test_input_shape_the_model_cannot_take(tmp_path, shape, pattern):
    path, _ = write_checkpoint("torchscript", tmp_path)
    with pytest.raises(InputError, match=pattern):
        open_source(path, input_shapes=[shape])


# --- damaged and foreign files ------------------------------------------------------------------------------


def test_missing_empty_directory_inputs(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        formats.detect_format(str(tmp_path / "missing.pt"))
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(InputError, match=r"is empty \(0 bytes\)"):
        formats.detect_format(str(tmp_path / "empty.pt"))
    with pytest.raises(InputError, match="is a directory"):
        formats.detect_format(str(tmp_path))


@pytest.mark.parametrize("kind", ["torchscript", "export", "state_dict", "safetensors"])
@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_truncated_files(tmp_path, kind, keep):
    path, _ = write_checkpoint(kind, tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: int(len(data) * keep)])
    with pytest.raises(InputError, match="truncated|corrupted|cannot be read|damaged"):
        formats.load_checkpoint(path)


@pytest.mark.parametrize("kind", ["torchscript", "state_dict", "export"])
def test_corrupted_archive_member(tmp_path, kind):
    path, _ = write_checkpoint(kind, tmp_path)
    with zipfile.ZipFile(path) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)
    data = bytearray(open(path, "rb").read())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + 4  # inside the member's stored bytes
    data[start:start + 16] = bytes(16)
    open(path, "wb").write(bytes(data))
    with pytest.raises(InputError, match="corrupted"):
        formats.detect_format(path)


def test_random_binary_and_foreign_zip(tmp_path):
    path = tmp_path / "random.bin"
    path.write_bytes(os.urandom(4096).replace(b"PK", b"pk").lstrip(b"\x80"))
    with pytest.raises(InputError, match="not a checkpoint format Porter recognises"):
        formats.detect_format(str(path))
    foreign = tmp_path / "other.zip"
    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(InputError, match="zip archive but not a PyTorch checkpoint"):
        formats.detect_format(str(foreign))


def test_non_state_dict_payloads(tmp_path):
    for payload, pattern in [(torch.zeros(3), "a single tensor"), ({"epoch": 3, "lr": 0.1}, "keys 'epoch', 'lr'"),
                             ({}, "an empty dict"), ([1, 2], "a list")]:
        path = str(tmp_path / "odd.pt")
        torch.save(payload, path)
        with pytest.raises(InputError, match=pattern):
            formats.load_checkpoint(path)


def test_training_checkpoint_with_python_objects(tmp_path):
    import argparse

    from tests.cli import tinynets

    model = tinynets.seeded()
    path = str(tmp_path / "train.pt")
    torch.save({"args": argparse.Namespace(lr=0.1), "state_dict": model.state_dict()}, path)
    with pytest.raises(InputError, match=r"argparse\.Namespace.*training checkpoint"):
        formats.load_checkpoint(path)
    ckpt = formats.load_checkpoint(path, trust_pickle=True)  # the weights inside are found
    assert ckpt.kind == formats.STATE_DICT and sorted(ckpt.state_dict) == sorted(model.state_dict())
