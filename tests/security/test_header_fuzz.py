"""Seeded mutation fuzzing of ``model.safetensors``'s header: a converted model's tensor entries with their dtype,
shape, data offsets (whole or one bound), presence, or overlap with another tensor replaced by hostile values, one
or two at a time, the data bytes unchanged.

Each mutated artifact must either load and run (a mutation that still describes the same bytes: a dtype of the same
width is not detectable, publishing wrong weights needs no tampering), or fail at load with :class:`ArtifactError`
naming the file. Never a bare ``TypeError``/``KeyError``/``IndexError``/``OverflowError`` from inside Porter, never a
hang, and never two tensors read from the same bytes (session 10 found both: a non-string dtype, overlapping
offsets).
"""

import json
import random
import shutil
import signal
import struct

import mlx.core as mx
import pytest

import porter
from porter.converters import ArtifactError

CASES = 40
VALUES = [2 ** 62, 2 ** 31, -1, 0, 1, 10 ** 6, 1.5, "x", None, [], {}, [1, 2], [0, 3, 2, 1], "F64", "I8", "BF16",
          "F16", "F32", "I32", "U32", "BOOL", "U8", "F8_E4M3", "I64", [0, 0], [2 ** 40, 2 ** 40 + 4], [4, 2]]
FIELDS = ["dtype", "shape", "data_offsets", "shape_i", "offset_i", "delete", "overlap"]


def _split(raw):
    size = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + size]), raw[8 + size:]


def _join(header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def _mutate(header, body, rng):
    names = [k for k in header if k != "__metadata__"]
    done = []
    for _ in range(rng.choice([1, 1, 2])):
        name, field = rng.choice(names), rng.choice(FIELDS)
        entry, value = header.get(name), None
        if not isinstance(entry, dict):
            continue
        if field == "shape_i" and isinstance(entry["shape"], list) and entry["shape"]:
            i = rng.randrange(len(entry["shape"]))
            entry["shape"][i] = value = rng.choice([0, 1, -1, 2 ** 31, entry["shape"][i] + 1])
        elif field == "offset_i" and isinstance(entry["data_offsets"], list) and entry["data_offsets"]:
            i = rng.randrange(len(entry["data_offsets"]))
            value = rng.choice([-4, 4, -1, 1, 2 ** 33, len(body)])
            entry["data_offsets"][i] = value = entry["data_offsets"][i] + value
        elif field == "delete":
            del header[name]
        elif field == "overlap":
            value = rng.choice(names)
            if isinstance(header.get(value), dict) and value != name:
                header[value]["data_offsets"] = entry["data_offsets"]
        elif field in ("dtype", "shape", "data_offsets"):
            entry[field] = value = rng.choice(VALUES)
        done.append((name, field, value))
    return done


def _raise_hang(*_):
    raise TimeoutError("hung")


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_header_fails_cleanly(tiny_artifact, tmp_path, seed):
    source, _ = tiny_artifact
    directory = tmp_path / "m-mlx"
    shutil.copytree(source, directory)
    header, body = _split((directory / "model.safetensors").read_bytes())
    mutations = _mutate(header, body, random.Random(seed))
    (directory / "model.safetensors").write_bytes(_join(header, body))
    previous = signal.signal(signal.SIGALRM, _raise_hang)
    signal.alarm(60)
    try:
        model = porter.load(directory)
        mx.eval(model(mx.random.normal((2, 16, 16, 3))))
    except ArtifactError as e:
        assert "model.safetensors" in str(e), (mutations, str(e))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_fuzzer_is_not_vacuous(tiny_artifact, tmp_path):
    """The header rewrite alone loads and gives the original numbers, and most seeds are refused: so the fuzz above
    checks refusals, and a refusal there comes from the mutation, not from the rewrite."""
    source, _ = tiny_artifact
    x = mx.random.normal((2, 16, 16, 3), key=mx.random.key(0))
    expected = porter.load(source)(x)
    directory = tmp_path / "same-mlx"
    shutil.copytree(source, directory)
    header, body = _split((directory / "model.safetensors").read_bytes())
    (directory / "model.safetensors").write_bytes(_join(header, body))
    assert mx.array_equal(porter.load(directory)(x), expected).item()
    refused = 0
    for seed in range(CASES):
        copy = tmp_path / f"m{seed}-mlx"
        shutil.copytree(source, copy)
        header, body = _split((copy / "model.safetensors").read_bytes())
        _mutate(header, body, random.Random(seed))
        (copy / "model.safetensors").write_bytes(_join(header, body))
        try:
            porter.load(copy)
        except ArtifactError:
            refused += 1
        shutil.rmtree(copy)
    assert refused >= CASES // 2
