"""Torch checkpoints read without torch (``porter.torch_files``: the zoo's ``load_checkpoint`` and ``porter zoo
convert``) built to exhaust time or stack rather than to run code: refused quickly with one CheckpointFormatError
naming the file. A 500-byte legacy pickle of lists sharing lists used to hang the reader (2**60 paths walked)."""

import io
import pickle
import time

import pytest

from porter.torch_files import CheckpointFormatError, load_state_dict

_LEGACY_HEAD = (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True})


def _legacy(path, body: bytes):
    """torch's legacy (non-zip) layout around a raw object pickle ``body``: magic, protocol, system info, the
    object, the (empty) storage keys."""
    buf = io.BytesIO()
    for part in _LEGACY_HEAD:
        pickle.dump(part, buf, protocol=2)
    buf.write(body)
    pickle.dump([], buf, protocol=2)
    path.write_bytes(buf.getvalue())


def _shared_lists(levels=60):
    x = []
    for _ in range(levels):
        x = [x, x]
    return pickle.dumps({"w": x}, protocol=2)


def _deep_lists(depth=100000):
    # built from opcodes: pickling such a list in Python would itself overflow the stack
    return b"\x80\x02}X\x01\x00\x00\x00w" + b"]" * depth + b"a" * (depth - 1) + b"s."


@pytest.mark.parametrize("body, words", [(_shared_lists(), "not tensors"), (_deep_lists(), "nested more than")],
                         ids=["shared lists (exponential walk)", "deep nesting"])
def test_pickle_shapes_that_exhaust_time_or_stack(tmp_path, body, words):
    path = tmp_path / "evil.pt"
    _legacy(path, body)
    start = time.process_time()
    with pytest.raises(CheckpointFormatError, match=words) as info:
        load_state_dict(str(path))
    assert "evil.pt" in str(info.value)
    assert time.process_time() - start < 10


def test_zoo_convert_refuses_them(tmp_path):
    from click.testing import CliRunner

    from porter.cli.main import main
    from tests.security.attack_helpers import assert_input_error

    path = tmp_path / "evil.pt"
    _legacy(path, _shared_lists())
    result = CliRunner().invoke(main, ["zoo", "convert", str(path), "--arch", "resnet18", "-o",
                                       str(tmp_path / "o.safetensors")])
    assert_input_error(result, ["evil.pt"])


def test_shared_tensors_keep_sharing(tmp_path):
    """The memo rebuilds a shared container once: a tied weight (one tensor under two names) still reads."""
    import torch

    w = torch.randn(3, 4)
    path = tmp_path / "tied.pt"
    torch.save({"a.weight": w, "b.weight": w}, path,
               _use_new_zipfile_serialization=False)
    state = load_state_dict(str(path))
    assert (state["a.weight"] == w.numpy()).all() and (state["b.weight"] == w.numpy()).all()


def test_compressed_pickle_refused_before_inflating(tmp_path):
    import zipfile

    path = tmp_path / "bomb.pth"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bomb/data.pkl", b"(" * (64 << 20))  # 64 MiB from ~64 KiB
    assert path.stat().st_size < 1 << 20
    with pytest.raises(CheckpointFormatError, match="bomb.pth.*compressed"):
        load_state_dict(str(path))


def test_safetensors_header_bounded_before_mlx_parses_it(tmp_path):
    path = tmp_path / "big.safetensors"
    path.write_bytes((200 << 20).to_bytes(8, "little") + b"{" + b" " * 1000)
    with pytest.raises(CheckpointFormatError, match="big.safetensors.*header declares"):
        load_state_dict(str(path))
    path.write_bytes(b"\x01")
    with pytest.raises(CheckpointFormatError, match="too short"):
        load_state_dict(str(path))


def _safetensors(path, header: dict, payload: bytes) -> None:
    import json

    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + payload)


SAFETENSORS_HEADERS = {
    # MLX's reader multiplied the dims with wrap-around: 2**63 elements "needed 0 bytes" and the array read the
    # heap past its 16-byte buffer (session 13: values like -2.4e20 came back)
    "dims whose product wraps to zero bytes": ({"a": {"dtype": "F32", "shape": [2 ** 21] * 3, "data_offsets": [0, 0]}},
                                               "data_offsets"),
    "dim past int32 (came back negative)": ({"a": {"dtype": "F32", "shape": [0, 2 ** 31], "data_offsets": [0, 0]}},
                                            "shape"),
    "float dim (read as 1)": ({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}, "shape"),
    "two tensors on the same bytes": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, "overlaps"),
    "unknown dtype": ({"a": {"dtype": "PY_OBJECT", "shape": [1], "data_offsets": [0, 4]}}, "dtype"),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_HEADERS))
def test_safetensors_header_checked_before_reading_tensors(tmp_path, case):
    header, field = SAFETENSORS_HEADERS[case]
    path = tmp_path / "w.safetensors"
    _safetensors(path, header, b"\x01" * 16)
    with pytest.raises(CheckpointFormatError) as info:
        load_state_dict(str(path))
    assert "w.safetensors" in str(info.value) and field in str(info.value), str(info.value)


def test_honest_safetensors_still_reads_every_dtype(tmp_path):
    """float64 included, which MLX's own reader could not read."""
    import mlx.core as mx
    import numpy as np
    import torch
    from safetensors.torch import save_file

    tensors = {"f64": torch.randn(3, 2, dtype=torch.float64), "bf16": torch.randn(4).bfloat16(),
               "i64": torch.arange(5), "empty": torch.zeros(0, 3)}
    save_file(tensors, str(tmp_path / "ok.safetensors"))
    got = load_state_dict(str(tmp_path / "ok.safetensors"))
    assert sorted(got) == sorted(tensors)
    for name, tensor in tensors.items():
        want = tensor.float().numpy() if name == "bf16" else tensor.numpy()
        array = got[name].astype(mx.float32) if name == "bf16" else got[name]
        np.testing.assert_array_equal(np.array(array), want)
        assert tuple(got[name].shape) == tuple(tensor.shape)
