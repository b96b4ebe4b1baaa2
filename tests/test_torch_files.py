"""porter.torch_files: torch checkpoints read back exactly without torch; malicious or damaged files refused."""

import collections
import io
import os
import pickle
import subprocess
import sys
import zipfile

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.compare import assert_close
from porter.torch_files import CheckpointFormatError, UnsafeCheckpointError, load_state_dict, read_torch_file

FORMATS = [pytest.param(True, id="zip"), pytest.param(False, id="legacy")]


def _as_numpy(value):
    if isinstance(value, mx.array):
        return np.array(value.astype(mx.float32))
    return value


def _expected(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()


def _check_same(got, expected):
    if isinstance(expected, torch.Tensor):
        value = _as_numpy(got)
        assert value.shape == tuple(expected.shape)
        if expected.dtype != torch.bfloat16:
            assert value.dtype == expected.detach().numpy().dtype
        assert np.array_equal(value, _expected(expected), equal_nan=True)
    elif isinstance(expected, dict):
        assert type(got) is type(expected) and list(got) == list(expected)
        for k in expected:
            _check_same(got[k], expected[k])
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _check_same(g, e)
    else:
        assert got == expected


def _rich_object():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    base[0, 0] = float("nan")
    return {
        "float": base,
        "transposed_view": base[:, 2:5].t(),  # shares the storage, offset and strides
        "step_view": base[1::2, ::3],
        "expanded": torch.randn(3, 1, generator=g).expand(3, 4),  # stride 0
        "half": torch.randn(3, 5, generator=g).half(),
        "bfloat16": torch.randn(4, 3, generator=g).bfloat16()[:, 1],
        "double": torch.randn(2, 2, generator=g, dtype=torch.float64),
        "int64": torch.arange(-5, 5),
        "int32": torch.arange(7, dtype=torch.int32).reshape(7, 1),
        "int8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "complex": torch.randn(3, generator=g, dtype=torch.complex64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "parameter": torch.nn.Parameter(torch.randn(2, 3, generator=g)),
        "nested": [1, (2.5, "x", None, True), {"deep": [torch.ones(2, dtype=torch.int16)]}, b"bytes"],
        "ordered": collections.OrderedDict(b=torch.ones(2), a=torch.zeros(1)),
    }


@pytest.mark.parametrize("zip_format", FORMATS)
def test_reads_back_exactly(tmp_path, zip_format):
    obj = _rich_object()
    path = tmp_path / "rich.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=zip_format)
    got = read_torch_file(str(path))
    _check_same(got, obj)
    assert isinstance(got["bfloat16"], mx.array) and got["bfloat16"].dtype == mx.bfloat16
    # Views of one storage share its buffer, as in torch.
    assert np.shares_memory(got["float"], got["transposed_view"])


@pytest.mark.parametrize("zip_format", FORMATS)
def test_module_state_dict_with_wrappers_and_module_prefix(tmp_path, zip_format):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(4, 2))
    state = net.state_dict()
    for wrapped in (state, {"state_dict": state, "epoch": 3}, {"model": state, "optimizer": {"lr": 0.1}},
                    {f"module.{k}": v for k, v in state.items()}):
        path = tmp_path / "w.pth"
        torch.save(wrapped, path, _use_new_zipfile_serialization=zip_format)
        got = load_state_dict(str(path))
        assert list(got) == list(state)
        for k, v in state.items():
            assert np.array_equal(got[k], v.numpy())


def test_safetensors_and_suffixes(tmp_path):
    path = str(tmp_path / "w.safetensors")
    mx.save_safetensors(path, {"a": mx.arange(3)})
    assert np.array_equal(np.array(load_state_dict(path)["a"]), np.arange(3))
    with pytest.raises(ValueError, match=r"'w.npz' must end in \.safetensors, \.pth, \.pt, \.bin"):
        load_state_dict("w.npz")
    with pytest.raises(FileNotFoundError, match="nope.pth"):
        load_state_dict(str(tmp_path / "nope.pth"))
    torch.save([torch.ones(2)], tmp_path / "list.pt")
    with pytest.raises(CheckpointFormatError, match="holds list, not a state_dict"):
        load_state_dict(str(tmp_path / "list.pt"))
    torch.save({"a": torch.ones(2), "b": 3}, tmp_path / "mixed.pt")
    with pytest.raises(CheckpointFormatError, match="not tensors in the state_dict: b"):
        load_state_dict(str(tmp_path / "mixed.pt"))


# ------------------------------------------------------------------------------------------- malicious files
class _Payload:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(marker):
    return {
        "os.system": (_Payload(os.system, f"touch {marker}"), "system"),
        "eval": (_Payload(eval, f"open({str(marker)!r}, 'w').close()"), "eval"),
        "exec": (_Payload(exec, f"open({str(marker)!r}, 'w').close()"), "exec"),
        "subprocess": (_Payload(subprocess.call, ["touch", str(marker)]), ".call"),  # protocol 2 names it commands.call
        "module": (torch.nn.Linear(2, 2), "torch.nn.modules.linear.Linear"),
        "numpy": (np.float32(1.0), "numpy"),
    }


@pytest.mark.parametrize("zip_format", FORMATS)
@pytest.mark.parametrize("payload", ["os.system", "eval", "exec", "subprocess", "module", "numpy"])
def test_malicious_pickles_are_refused_and_never_run(tmp_path, zip_format, payload):
    marker = tmp_path / "pwned"
    obj, global_name = _payloads(marker)[payload]
    path = tmp_path / "evil.pth"
    torch.save({"weight": torch.ones(2), "evil": obj}, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(UnsafeCheckpointError) as info:
        load_state_dict(str(path))
    assert str(path) in str(info.value) and global_name in str(info.value)
    assert not marker.exists()


def test_plain_pickle_payload_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.bin"
    path.write_bytes(pickle.dumps(_Payload(os.system, f"touch {marker}")))
    with pytest.raises(UnsafeCheckpointError, match="system"):
        read_torch_file(str(path))
    assert not marker.exists()


class _FakeTensor:
    """Pickles as torch's _rebuild_tensor_v2 on a storage whose declared element count we choose."""

    def __init__(self, key, numel, offset, size, stride):
        self.key, self.numel = key, numel
        self.args = (offset, size, stride)

    def __reduce__(self):
        storage = _FakeStorage(self.key, self.numel)
        return torch._utils._rebuild_tensor_v2, (storage, *self.args, False, collections.OrderedDict())


class _FakeStorage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _FakeStorage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None


def _crafted(path, obj, storages, pkl=None):
    """A torch zip checkpoint by hand: ``storages`` maps key -> raw bytes."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue() if pkl is None else pkl)
        archive.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            archive.writestr(f"archive/data/{key}", raw)
        archive.writestr("archive/version", "3\n")
    return str(path)


def test_crafted_file_reads_when_consistent(tmp_path):
    raw = np.arange(12, dtype="<f4").tobytes()
    path = _crafted(tmp_path / "ok.pt", {"w": _FakeTensor("0", 12, 2, (2, 3), (1, 2))}, {"0": raw})
    expected = torch.frombuffer(bytearray(raw), dtype=torch.float32).as_strided((2, 3), (1, 2), 2)
    assert np.array_equal(load_state_dict(path)["w"], expected.numpy())


@pytest.mark.parametrize("case, message", [
    ((10 ** 15, 0, (2,), (1,)), "declares 1000000000000000 elements"),       # huge declared storage
    ((13, 0, (13,), (1,)), "declares 13 elements"),                          # storage shorter than declared
    ((12, 0, (4, 4), (4, 1)), "reaches element 15"),                         # view past the end
    ((12, 11, (2,), (1,)), "reaches element 12"),                            # offset past the end
    ((12, 0, (2,), (-1,)), "invalid tensor geometry"),                       # negative stride
    ((12, 0, (10 ** 12, 10 ** 12), (1, 1)), "reaches element"),              # huge declared tensor
    ((12, 0, [2], [1]), "must be a tuple of ints"),
    ((12, 0, (10 ** 12,), (0,)), "is refused"),                              # a broadcast of a huge size
])
def test_inconsistent_sizes_are_refused(tmp_path, case, message):
    numel, offset, size, stride = case
    raw = np.arange(12, dtype="<f4").tobytes()
    path = _crafted(tmp_path / "bad.pt", {"w": _FakeTensor("0", numel, offset, size, stride)}, {"0": raw})
    with pytest.raises(CheckpointFormatError, match=message) as info:
        load_state_dict(path)
    assert "bad.pt" in str(info.value)


def test_missing_storage_and_bad_archives(tmp_path):
    path = _crafted(tmp_path / "missing.pt", {"w": _FakeTensor("7", 3, 0, (3,), (1,))}, {})
    with pytest.raises(CheckpointFormatError, match="storage '7' is missing"):
        load_state_dict(path)
    with zipfile.ZipFile(tmp_path / "other.pt", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(CheckpointFormatError, match="not a torch checkpoint"):
        load_state_dict(str(tmp_path / "other.pt"))
    (tmp_path / "text.pt").write_text("not a checkpoint at all")
    with pytest.raises(CheckpointFormatError, match="text.pt"):
        load_state_dict(str(tmp_path / "text.pt"))
    path = _crafted(tmp_path / "damaged.pt", None, {}, pkl=b"\x80\x02}q\x00(X")
    with pytest.raises(CheckpointFormatError, match="pickle is damaged"):
        load_state_dict(path)


@pytest.mark.parametrize("zip_format", FORMATS)
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_files_are_refused(tmp_path, zip_format, keep):
    path = tmp_path / "full.pt"
    torch.save({"a": torch.randn(300), "b": torch.randn(40, 30)}, path, _use_new_zipfile_serialization=zip_format)
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointFormatError, match="cut.pt"):
        load_state_dict(str(cut))


def test_reading_never_imports_torch(tmp_path):
    """A fresh interpreter where importing torch fails reads a .pth into a zoo model and predicts torch's output."""
    from porter.examples import resnet18

    torch.manual_seed(0)
    twin = resnet18(num_classes=5, widths=(8, 8, 16, 16)).eval()
    torch.save(twin.state_dict(), tmp_path / "r.pth")
    torch.save(twin.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    x = torch.randn(1, 3, 35, 29, generator=torch.Generator().manual_seed(1))
    np.save(tmp_path / "x.npy", x.permute(0, 2, 3, 1).numpy())
    with torch.no_grad():
        expected = twin(x).numpy()
    script = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch imported: " + name)
sys.meta_path.insert(0, Block())
import numpy as np, mlx.core as mx
from porter.zoo import create
for f in ("r.pth", "legacy.pt"):
    model = create("resnet18", num_classes=5, widths=(8, 8, 16, 16)).load_checkpoint({str(tmp_path)!r} + "/" + f)
    np.save({str(tmp_path)!r} + "/y_" + f + ".npy", np.array(model(mx.array(np.load({str(tmp_path / 'x.npy')!r})))))
assert not [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for f in ("r.pth", "legacy.pt"):
        got = np.load(tmp_path / f"y_{f}.npy")
        assert_close(got, expected, what=f)


def test_compressed_storage_is_refused(tmp_path):
    """A deflated storage could inflate to any size (a zip bomb); torch never writes one."""
    raw = bytes(4 * 10 ** 6)
    path = tmp_path / "bomb.pt"
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=2).dump({"w": _FakeTensor("0", 10 ** 6, 0, (10 ** 6,), (1,))})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/data/0", raw, compress_type=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 100_000
    with pytest.raises(CheckpointFormatError, match="compressed"):
        load_state_dict(str(path))


def test_build_opcode_cannot_retarget_a_storage_type(tmp_path):
    """BUILD on the allowed storage type (setting its dtype to 'O') is refused."""
    pkl = (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch\nFloatStorage\nq\x02"
           b"N}q\x03X\x05\x00\x00\x00dtypeq\x04X\x01\x00\x00\x00Oq\x05s\x86q\x06bs.")
    path = _crafted(tmp_path / "build.pt", None, {}, pkl=pkl)
    with pytest.raises(CheckpointFormatError, match="modify the storage type"):
        read_torch_file(path)
