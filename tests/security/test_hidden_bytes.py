"""Safetensors files whose data holds bytes no tensor owns (session 13).

The safetensors format lays the tensors end to end over the whole data section, and the safetensors library
refuses a file whose tensors leave a gap or stop before its end. Porter's readers took both, so a weights file
could carry a second payload (a zip appended: a polyglot that another tool reads as something else) and still
load. Both readers now refuse it, naming the file and the bytes: ``porter.load`` and the zoo's
``load_state_dict``.
"""

import json
import shutil
import struct

import pytest

import porter
from porter.converters import ArtifactError
from porter.torch_files import CheckpointFormatError, load_state_dict


def _split(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def _join(path, header, payload):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + payload)


def _appended(header, payload):
    return header, payload + b"PK\x05\x06" + b"\0" * 18  # an empty zip after the tensors


def _gap(header, payload):
    """The last tensor moved 8 bytes further, the 8 bytes before it owned by no one."""
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    name = max(tensors, key=lambda k: tensors[k]["data_offsets"][0])
    begin, end = tensors[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + 8, end + 8]
    return header, payload[:begin] + b"\xff" * 8 + payload[begin:]


CASES = {"bytes after the last tensor": (_appended, "after"), "a gap between two tensors": (_gap, "belong to no")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_artifact_weights_with_hidden_bytes_refused(case, tiny_artifact, tmp_path):
    edit, words = CASES[case]
    directory = tmp_path / "t-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    path = directory / "model.safetensors"
    _join(path, *edit(*_split(path)))
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    assert "model.safetensors" in str(info.value) and words in str(info.value), str(info.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_with_hidden_bytes_refused(case, tmp_path):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.randn(3), "b": torch.randn(2, 2)}, str(path))
    assert sorted(load_state_dict(str(path))) == ["a", "b"]  # as written: read
    edit, words = CASES[case]
    _join(path, *edit(*_split(path)))
    with pytest.raises(CheckpointFormatError) as info:
        load_state_dict(str(path))
    assert "w.safetensors" in str(info.value) and words in str(info.value), str(info.value)


def test_empty_tensors_anywhere_and_an_empty_file_still_read(tmp_path):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "e.safetensors"
    save_file({"a": torch.zeros(0), "b": torch.ones(2), "c": torch.zeros(3, 0)}, str(path))
    assert sorted(load_state_dict(str(path))) == ["a", "b", "c"]
    save_file({}, str(path))
    assert load_state_dict(str(path)) == {}
