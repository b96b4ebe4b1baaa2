"""The command line under attack: every crafted, damaged or absurd input ends in exit 2 with exactly one message
naming the file or option, no traceback or library warning, no payload run (marker file) and nothing written.

In-process (CliRunner) where that shows everything; a real subprocess where torch's own logging, a hang (FIFO) or
a write limit (RLIMIT_FSIZE standing in for a full disk) is the point.
"""

import json
import os
import shutil
import time
import zipfile

import pytest
import torch
from click.testing import CliRunner

from porter.cli.main import main

from tests.cli import tinynets
from tests.paths import repo_env
from tests.security.attack_helpers import assert_input_error, pickled_payload, rewrite_zip, run_porter


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def ckpts(tmp_path):
    """A state_dict, a torch.export program, a TorchScript archive and a safetensors file of TinyNet."""
    from safetensors.torch import save_file

    model = tinynets.seeded()
    x = torch.randn(1, 3, 16, 16)
    paths = {"state_dict": tmp_path / "w.pt", "export": tmp_path / "m.pt2", "torchscript": tmp_path / "ts.pt",
             "safetensors": tmp_path / "w.safetensors", "legacy": tmp_path / "legacy.pt"}
    torch.save(model.state_dict(), paths["state_dict"])
    torch.save(model.state_dict(), paths["legacy"], _use_new_zipfile_serialization=False)
    torch.export.save(torch.export.export(model, (x,)), paths["export"])
    torch.jit.save(torch.jit.trace(model, x), paths["torchscript"])
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, paths["safetensors"])
    return paths


ARCH = ["--model", "tests.cli.tinynets:tiny_net", "--input-shape", "1,3,16,16"]


def _with_metadata(tampered, source):
    return tampered(lambda g: g["metadata"].update(source=source))


def test_validate_never_imports_recorded_code(runner, tampered, ckpts, tmp_path):
    marker = tmp_path / "marker"
    source = {"model": "subprocess:run", "model_kwargs": {"args": f"touch {marker}", "shell": True},
              "input_shapes": [[1, 3, 16, 16]]}
    directory = _with_metadata(tampered, source)
    before = sorted(os.listdir(tmp_path))
    for command in (["validate", directory, "--against", ckpts["state_dict"]],
                    ["bench", directory, "--against", ckpts["state_dict"], "--repeat", "1", "--warmup", "0"]):
        result = runner.invoke(main, [str(a) for a in command])
        assert_input_error(result, ["subprocess:run", "does not import code"], directory=tmp_path,
                           listing_before=before)
        assert "--model 'subprocess:run'" not in result.stderr  # no blame on an option the user never gave
        assert not marker.exists()
    # given on the command line, the user's own code runs; the recorded input shape is reused
    result = runner.invoke(main, ["validate", str(directory), "--against", str(ckpts["state_dict"]), "--model",
                                  "tests.cli.tinynets:tiny_net"])
    assert result.exit_code == 0, result.output


def test_validate_refuses_a_tampered_artifact(runner, tampered, ckpts):
    directory = tampered(lambda g: next(n for n in g["nodes"] if n["kernel"] == "transpose")["attrs"].update(
        fn="__getattribute__"))
    result = runner.invoke(main, ["validate", str(directory), "--against", str(ckpts["state_dict"]), *ARCH[:2]])
    assert_input_error(result, ["graph.json", "attrs.fn"])
    for command in ("bench",):
        result = runner.invoke(main, [command, str(directory)])
        assert_input_error(result, ["graph.json", "attrs.fn"])


def test_graph_that_fails_to_run_is_an_input_error(runner, tampered, ckpts):
    # well formed (the schema accepts it), wrong at run time: exit 2 naming the directory, not "a bug in Porter"
    directory = tampered(lambda g: g["nodes"].append(
        {"kernel": "select", "inputs": [{"ref": g["inputs"][0]["name"]}, 99], "attrs": {"axis": 1},
         "outputs": ["bad"], "layout": None, "op": "", "module": "", "module_type": ""}))
    result = runner.invoke(main, ["bench", str(directory), "--repeat", "1", "--warmup", "0"])
    assert_input_error(result, [str(directory), "out of range"])
    result = runner.invoke(main, ["validate", str(directory), "--against", str(ckpts["state_dict"]), *ARCH[:2]])
    assert_input_error(result, [str(directory), "out of range"])


def test_recorded_absurd_input_shape_refused(runner, tampered, ckpts):
    directory = _with_metadata(tampered, {"input_shapes": [[1, 3, 100000, 100000]]})
    result = runner.invoke(main, ["validate", str(directory), "--against", str(ckpts["state_dict"]), *ARCH[:2]])
    assert_input_error(result, ["recorded in", "1,3,100000,100000"])
    directory = tampered(lambda g: g["metadata"].update(source={"input_shapes": [[1, 3, -16, 16]]}), name="neg")
    result = runner.invoke(main, ["validate", str(directory), "--against", str(ckpts["state_dict"]), *ARCH[:2]])
    assert_input_error(result, ["recorded in", "positive"])


def test_absurd_input_shape_refused_at_once(runner, ckpts, tmp_path):
    before = sorted(os.listdir(tmp_path))
    for shape in ["1,3,100000,100000", "100000,3,1000,1000", "1,1,1,1,1,1,1,1,1,1"]:
        start = time.monotonic()
        result = runner.invoke(main, ["convert", str(ckpts["state_dict"]), "--model", "tests.cli.tinynets:tiny_net",
                                      "--input-shape", shape])
        assert_input_error(result, ["--input-shape", shape], directory=tmp_path, listing_before=before)
        assert time.monotonic() - start < 30
    result = runner.invoke(main, ["bench", str(tmp_path), "--input-shape", "1,3,16,16", "--batch", "10000000"])
    assert result.exit_code == 2


def _pt2_with_pickled_weight(src, dst, marker):
    def config(data):
        doc = json.loads(data)
        first = next(iter(doc["config"]))
        doc["config"][first]["use_pickle"] = True
        return json.dumps(doc).encode()

    with zipfile.ZipFile(src) as z:
        conf = next(n for n in z.namelist() if n.endswith("_weights_config.json"))
        first_file = next(iter(json.loads(z.read(conf))["config"].values()))["path_name"]
    rewrite_zip(src, dst, {"_weights_config.json": config, f"data/weights/{first_file}": pickled_payload(marker)})


PT2_ATTACKS = {
    "pickled sample inputs": (lambda src, dst, m: rewrite_zip(src, dst, {"data/sample_inputs/model.pt":
                                                                         pickled_payload(m)}),
                              "data/sample_inputs/model.pt"),
    "weight marked use_pickle": (_pt2_with_pickled_weight, "_weights_config.json"),
}


@pytest.mark.parametrize("case", sorted(PT2_ATTACKS))
def test_pt2_is_not_unpickled(case, ckpts, tmp_path, runner):
    build, entry = PT2_ATTACKS[case]
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pt2"
    build(ckpts["export"], evil, marker)
    before = sorted(os.listdir(tmp_path))
    result = run_porter(["convert", evil], cwd=tmp_path)  # a real process: torch's logging would show up here
    assert_input_error(result, ["evil.pt2", entry, "--trust-pickle"], directory=tmp_path, listing_before=before)
    result = runner.invoke(main, ["inspect", str(evil)])
    assert_input_error(result, ["evil.pt2", entry, "--trust-pickle"], directory=tmp_path, listing_before=before)
    assert not marker.exists()


class WithConstant(torch.nn.Module):
    """A lifted tensor constant: torch.export stores it under data/constants/."""

    def forward(self, x):
        return x + torch.tensor([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)


def test_pt2_custom_object_constant_refused(runner, tmp_path):
    marker = tmp_path / "marker"
    clean, evil = tmp_path / "c.pt2", tmp_path / "evil.pt2"
    torch.export.save(torch.export.export(WithConstant(), (torch.randn(1, 3, 4, 4),)), clean)

    def config(data):
        doc = json.loads(data)
        first = next(iter(doc["config"]))
        doc["config"][first]["path_name"] = "custom_obj_0"  # read back with torch's pickle loader
        return json.dumps(doc).encode()

    rewrite_zip(clean, evil, {"_constants_config.json": config})
    with zipfile.ZipFile(evil, "a") as z:
        z.writestr(f"{zipfile.ZipFile(clean).namelist()[0].split('/')[0]}/data/constants/custom_obj_0",
                   pickled_payload(marker))
    result = runner.invoke(main, ["convert", str(evil)])
    assert_input_error(result, ["evil.pt2", "_constants_config.json", "--trust-pickle"])
    assert not marker.exists()


def test_pickled_module_payload_refused(runner, tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "model.pt"
    torch.save({"state_dict": tinynets.seeded().state_dict(), "hook": tinynets_payload(marker)}, path)
    result = runner.invoke(main, ["convert", str(path), *ARCH])
    assert_input_error(result, ["model.pt", "--trust-pickle"])
    assert not marker.exists()


def tinynets_payload(marker):
    from tests.security.attack_helpers import Payload

    return Payload(marker)


def test_non_regular_files_refused_at_once(tmp_path, tiny_artifact, ckpts):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    result = run_porter(["convert", fifo], cwd=tmp_path, timeout=60)
    assert_input_error(result, ["fifo.pt", "not a regular file"])
    directory = tmp_path / "art"
    shutil.copytree(tiny_artifact[0], directory)
    os.remove(directory / "graph.json")
    os.mkfifo(directory / "graph.json")
    result = run_porter(["validate", directory, "--against", ckpts["state_dict"]], cwd=tmp_path, timeout=60)
    assert_input_error(result, ["graph.json", "not a regular file"])


def test_zip_bomb_refused_before_unpacking(runner, tmp_path):
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bomb/data.pkl", b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    result = runner.invoke(main, ["convert", str(path), *ARCH])
    assert_input_error(result, ["bomb.pt", "zip bomb"])


def test_device_refused(runner):
    result = runner.invoke(main, ["inspect", "/dev/zero"])
    assert_input_error(result, ["/dev/zero", "not a regular file"])


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt(path):
    data = bytearray(path.read_bytes())
    if path.suffix == ".safetensors":
        data[10:20] = b"\xff" * 10  # inside the JSON header
    elif not data.startswith(b"PK"):
        data[8:72] = bytes(64)  # a legacy torch.save: its pickled header (raw tensor bytes carry no checksum)
    else:
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(64)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _corrupt], ids=["truncated", "corrupted"])
@pytest.mark.parametrize("fmt", ["state_dict", "legacy", "export", "torchscript", "safetensors"])
def test_damaged_checkpoints(runner, ckpts, tmp_path, fmt, damage):
    path = ckpts[fmt]
    damage(path)
    before = sorted(os.listdir(tmp_path))
    args = ["convert", str(path)] + (ARCH if fmt in ("state_dict", "legacy", "safetensors") else [])
    result = runner.invoke(main, args)
    assert_input_error(result, [path.name], directory=tmp_path, listing_before=before)


WRITE_LIMITED = ("import sys, resource, signal, porter, torch, porter.cli.main as m; "
                 "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, "
                 "(2000, 2000)); sys.argv = ['porter'] + sys.argv[1:]; m.main()")


def test_full_disk_exits_2_and_leaves_nothing(ckpts, tmp_path):
    import subprocess
    import sys

    before = sorted(os.listdir(tmp_path))
    result = subprocess.run([sys.executable, "-c", WRITE_LIMITED, "convert", str(ckpts["state_dict"]), *ARCH,
                             "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env=repo_env())
    assert_input_error(result, [str(tmp_path / "out"), "model.safetensors"], directory=tmp_path,
                       listing_before=before)
