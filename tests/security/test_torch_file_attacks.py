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
