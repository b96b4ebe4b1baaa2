"""`porter zoo convert FILE.pth --arch NAME -o NAME.safetensors`: torch-free conversion, and its errors (exit 2)."""

import os

import mlx.core as mx
import numpy as np
import torch

from porter.cli.main import main
from porter.examples import resnet18


def test_convert_writes_a_safetensors_the_zoo_loads(runner, tmp_path):
    torch.manual_seed(0)
    twin = resnet18(num_classes=10).eval()
    state = {f"module.{k}": v for k, v in twin.state_dict().items()}
    torch.save({"state_dict": state, "epoch": 9}, tmp_path / "r.pth")
    out = str(tmp_path / "r.safetensors")
    result = runner.invoke(main, ["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet18", "-o", out,
                                  "--num-classes", "10"])
    assert result.exit_code == 0, result.output
    written = mx.load(out)
    assert sorted(written) == sorted(twin.state_dict())
    for k, v in twin.state_dict().items():
        assert np.array_equal(np.array(written[k]), v.numpy())
    # Refuses to overwrite without --force, accepts with it.
    args = ["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet18", "-o", out, "--num-classes", "10"]
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and "already exists" in result.stderr
    assert runner.invoke(main, args + ["--force"]).exit_code == 0


def test_convert_errors_exit_2_with_one_message(runner, tmp_path):
    torch.manual_seed(0)
    torch.save(resnet18(num_classes=10).state_dict(), tmp_path / "r.pth")
    out = str(tmp_path / "o.safetensors")
    cases = [
        (["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet19", "-o", out], "--arch 'resnet19'"),
        (["zoo", "convert", str(tmp_path / "missing.pth"), "--arch", "resnet18", "-o", out], "missing.pth"),
        (["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet18", "-o", str(tmp_path / "o.npz")],
         "must end in .safetensors"),
        (["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet18", "-o", out], "fc.weight"),  # 10 != 1000
        (["zoo", "convert", str(tmp_path / "r.pth"), "--arch", "resnet34", "-o", out, "--num-classes", "10"],
         "layer1.2.conv1.weight"),
    ]
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    cases.append((["zoo", "convert", str(tmp_path / "bad.pt"), "--arch", "resnet18", "-o", out], "bad.pt"))
    torch.save({"net": torch.nn.Linear(2, 2)}, tmp_path / "evil.pt")
    cases.append((["zoo", "convert", str(tmp_path / "evil.pt"), "--arch", "resnet18", "-o", out],
                  "torch.nn.modules.linear.Linear"))
    for args, needle in cases:
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.stderr, (needle, result.stderr)
        assert "Traceback" not in result.output
        assert not os.path.exists(out)
