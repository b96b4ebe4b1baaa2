"""Issue 11, part 2: fast capture with a fallback, and the user's choice of dynamic dims (``dynamic=``)."""

import json
import time
import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.converters import capture_strategy



class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean((2, 3))


def _matches(ported, model, shape):
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x).numpy()
    got = np.array(ported(mx.array(x.numpy())))
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def _spin(seconds=60.0):
    """Burn CPU (the budget counts this process's CPU time, so sleeping would never run out)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _dynamic_export(monkeypatch, behaviour):
    """Make every export that has dynamic dims call ``behaviour()`` (raise or sleep) first."""
    real = torch.export.export

    def export(model, args, *rest, dynamic_shapes=None, **kwargs):
        if dynamic_shapes is not None and any(spec for spec in dynamic_shapes):
            behaviour()
        return real(model, args, *rest, dynamic_shapes=dynamic_shapes, **kwargs)

    monkeypatch.setattr(torch.export, "export", export)


def test_a_failure_in_the_symbolic_solver_falls_back_to_static_shapes(monkeypatch):
    def fail():
        raise NotImplementedError("The inequality cannot be solved using solve_univariate_inequality.")

    _dynamic_export(monkeypatch, fail)
    model = Net().eval()
    with pytest.warns(UserWarning, match="capture failed .*NotImplementedError.*captured with static shapes"):
        ported = porter.convert(model, torch.randn(2, 3, 8, 8), io_layout="torch")
    assert ported.dynamic_dims == []
    assert "static shapes" in ported.capture_note
    _matches(ported, model, (2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"size 9 in dim 2 .*x.size\(2\) == 8"):
        ported(mx.zeros((2, 3, 9, 8)))


def test_a_capture_past_its_budget_is_interrupted_and_falls_back(monkeypatch):
    monkeypatch.setenv("PORTER_CAPTURE_BUDGET", "1.5")
    _dynamic_export(monkeypatch, _spin)
    model = Net().eval()
    start = time.monotonic()
    with pytest.warns(UserWarning, match="ran past its .* budget"):
        ported = porter.convert(model, torch.randn(2, 3, 8, 8), io_layout="torch")
    assert time.monotonic() - start < 60  # CPU seconds; wall time depends on the machine's load
    assert ported.dynamic_dims == [] and "budget" in ported.capture_note
    _matches(ported, model, (2, 3, 8, 8))
    # the interrupted attempt left torch usable: a dynamic capture still works in this process
    monkeypatch.undo()
    again = porter.convert(model, torch.randn(2, 3, 8, 8), io_layout="torch")
    assert {"input": 0, "axis": 2} in again.dynamic_dims
    _matches(again, model, (3, 3, 11, 6))


def test_budget_falls_back_to_the_batch_dim_when_only_spatial_dims_are_slow(monkeypatch):
    real = torch.export.export

    def export(model, args, *rest, dynamic_shapes=None, **kwargs):
        if dynamic_shapes is not None and any(spec and 2 in spec for spec in dynamic_shapes):
            _spin()
        return real(model, args, *rest, dynamic_shapes=dynamic_shapes, **kwargs)

    monkeypatch.setattr(torch.export, "export", export)
    monkeypatch.setenv("PORTER_CAPTURE_BUDGET", "3")
    model = Net().eval()
    with pytest.warns(UserWarning, match="captured with the batch dim dynamic"):
        ported = porter.convert(model, torch.randn(1, 3, 8, 8), io_layout="torch")
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}]
    _matches(ported, model, (4, 3, 8, 8))
    with pytest.raises(ValueError, match="size 10 in dim 3"):
        ported(mx.zeros((4, 3, 8, 10)))


@pytest.mark.parametrize("dynamic,expected", [
    ("auto", [0, 2, 3]), ("all", [0, 2, 3]), ("batch", [0]), ("static", []), (False, []), ([0, -1], [0, 3]),
])
def test_dynamic_keyword_chooses_the_dims(dynamic, expected):
    model = Net().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these falls back
        ported = porter.convert(model, torch.randn(2, 3, 8, 8), io_layout="torch", dynamic=dynamic)
    assert sorted(d["axis"] for d in ported.dynamic_dims) == expected
    _matches(ported, model, (2, 3, 8, 8))
    shape = [3, 3, 10, 6]
    for axis in range(4):
        if axis not in expected and axis != 1:
            shape[axis] = (2, 3, 8, 8)[axis]
    _matches(ported, model, tuple(shape))


@pytest.mark.parametrize("dynamic,match", [("everything", "dynamic must be one of"), ([4], "out of range"),
                                           ("0,2", "dynamic must be one of"), (1.5, "dynamic must be one of")])
def test_bad_dynamic_values_name_the_argument(dynamic, match):
    with pytest.raises(ValueError, match=match):
        porter.convert(Net().eval(), torch.randn(2, 3, 8, 8), dynamic=dynamic)


def test_dynamic_cannot_be_changed_on_an_exported_program():
    ep = torch.export.export(Net().eval(), (torch.randn(2, 3, 8, 8),))
    with pytest.raises(ValueError, match="ExportedProgram"):
        porter.convert(ep, dynamic="batch")
    ported = porter.convert(ep, io_layout="torch")  # static export: every dim checked
    assert ported.dynamic_dims == []
    with pytest.raises(ValueError, match=r"x.size\(0\) == 2"):
        ported(mx.zeros((3, 3, 8, 8)))


def test_torchscript_static_mode_pins_every_dim():
    model = Net().eval()
    scripted = torch.jit.script(model)
    ported = porter.convert(scripted, torch.randn(2, 3, 8, 8), io_layout="torch", dynamic="static")
    assert ported.dynamic_dims == []
    with pytest.raises(ValueError, match="size 9 in dim 2"):
        ported(mx.zeros((2, 3, 9, 8)))
    dynamic = porter.convert(scripted, torch.randn(2, 3, 8, 8), io_layout="torch")
    _matches(dynamic, model, (3, 3, 9, 5))
    with pytest.raises(ValueError, match="TorchScript"):
        porter.convert(scripted, torch.randn(2, 3, 8, 8), dynamic="batch")


def test_time_limit_leaves_an_existing_timer_alone():
    import signal

    if not hasattr(signal, "setitimer"):
        pytest.skip("no setitimer on this platform")
    previous = signal.signal(signal.SIGPROF, lambda *a: None)
    signal.setitimer(signal.ITIMER_PROF, 60)
    try:
        with capture_strategy.time_limit(0.01):
            _spin(0.1)  # not interrupted: another profiling timer owns SIGPROF
        assert signal.getitimer(signal.ITIMER_PROF)[0] > 50
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_cli_dynamic_option_and_report(tmp_path):
    from click.testing import CliRunner

    from tests.cli.cli_checkpoints import write_checkpoint
    from porter.cli.main import main

    path, _ = write_checkpoint("state_dict", tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:seeded", "--dynamic", "batch",
                                  "--no-validate", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "dynamic dims (torch layout): input 0: 0 (every other dim is checked" in result.stdout
    graph = json.loads((tmp_path / "out" / "graph.json").read_text())
    assert graph["dynamic_dims"] == [{"input": 0, "axis": 0}]
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:seeded", "--dynamic", "0,x",
                                  "--no-validate", "-o", str(tmp_path / "out2")])
    assert result.exit_code == 2 and "--dynamic '0,x'" in result.output


def test_a_model_whose_dynamic_capture_explodes_converts_in_seconds(monkeypatch):
    """timm's TF-"same" padding (Conv2dSame) sends torch's solver into minutes (40 CPU s for this small twin
    against 0.2 s static): the default capture gives up on the spatial dims within its budget, keeps the batch
    dim dynamic, gives torch's numbers and refuses other spatial sizes by name."""
    from tests.models._common import randomize_
    from tests.models.shape_guarded import TFEfficientNetLiteSmall

    monkeypatch.setenv("PORTER_CAPTURE_BUDGET", "25")
    model = randomize_(TFEfficientNetLiteSmall(), 0)
    start = time.process_time()
    with pytest.warns(UserWarning, match="every dim dynamic capture ran past its budget"):
        ported = porter.convert(model, torch.randn(1, 3, 64, 64), io_layout="torch")
    assert time.process_time() - start < 25
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}]
    _matches(ported, model, (1, 3, 64, 64))
    _matches(ported, model, (3, 3, 64, 64))
    with pytest.raises(ValueError, match=r"size 65 in dim 2 .*x.size\(2\) == 64"):
        ported(mx.zeros((1, 3, 65, 64)))
