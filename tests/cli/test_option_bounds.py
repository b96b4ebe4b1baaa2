"""Numeric and path options a hurried user gets wrong: each ends in exit 2 naming the option, before anything slow
runs and with nothing written (several used to be exit 3, "a bug in Porter", or to run with a NaN tolerance)."""

import os

import pytest
import torch
from click.testing import CliRunner

import porter
from porter.cli.main import main

from tests.cli import tinynets
from tests.security.attack_helpers import assert_input_error

MODEL = ["--model", "tests.cli.tinynets:tiny_net"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opts")
    model = tinynets.seeded()
    torch.save(model.state_dict(), folder / "w.pt")
    porter.save(porter.convert(model, torch.randn(1, 3, 16, 16)), folder / "art",
                metadata={"source": {"input_shapes": [[1, 3, 16, 16]]}})
    return folder


def _run(args, cwd):
    before = sorted(os.listdir(cwd))
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result, before


CASES = {
    "export negative seed": (["export", "{art}", "-o", "{dir}/x.mlxfn", "--seed", "-1"], ["--seed"]),
    "validate negative seed": (["validate", "{art}", "--against", "{w}", *MODEL, "--seed", "-5"], ["--seed"]),
    "validate NaN rtol": (["validate", "{art}", "--against", "{w}", *MODEL, "--rtol", "nan"], ["--rtol", "nan"]),
    "validate infinite atol": (["validate", "{art}", "--against", "{w}", *MODEL, "--atol", "inf"], ["--atol"]),
    "validate negative rtol": (["validate", "{art}", "--against", "{w}", *MODEL, "--rtol", "-1"], ["--rtol"]),
    "validate rtol not a number": (["validate", "{art}", "--against", "{w}", *MODEL, "--rtol", "tight"],
                                   ["--rtol", "tight"]),
    "validate report in a missing folder": (["validate", "{art}", "--against", "{w}", *MODEL, "--json",
                                             "{dir}/nowhere/r.json"], ["--json", "does not exist"]),
    "validate report is a directory": (["validate", "{art}", "--against", "{w}", *MODEL, "--json", "{dir}"],
                                       ["--json", "is a directory"]),
    "bench zero repeats": (["bench", "{art}", "--repeat", "0"], ["--repeat"]),
    "bench absurd repeats": (["bench", "{art}", "--repeat", "1000000000"], ["--repeat"]),
    "bench negative warmup": (["bench", "{art}", "--warmup", "-1"], ["--warmup"]),
    "zoo negative classes": (["zoo", "convert", "{w}", "--arch", "resnet18", "--num-classes", "-3", "-o",
                              "{dir}/z.safetensors"], ["--num-classes"]),
    "zoo absurd classes": (["zoo", "convert", "{w}", "--arch", "resnet18", "--num-classes", "99999999999", "-o",
                            "{dir}/z.safetensors"], ["--num-classes"]),
    "zoo output in a missing folder": (["zoo", "convert", "{w}", "--arch", "resnet18", "-o",
                                        "{dir}/nowhere/z.safetensors"], ["-o", "does not exist"]),
    "convert empty dims list": (["convert", "{w}", *MODEL, "--dynamic", ",,", "-o", "{dir}/out"], ["--dynamic"]),
    # an option the command would have dropped silently
    "convert --grads with --no-validate": (["convert", "{w}", *MODEL, "--no-validate", "--grads", "-o",
                                            "{dir}/out"], ["--grads", "--no-validate"]),
    "convert --model-kwargs without a factory": (["convert", "{w}", "--model-kwargs", '{{"num_classes": 5}}',
                                                  "-o", "{dir}/out"], ["--model-kwargs", "without --model"]),
    "bench --model without --against": (["bench", "{art}", *MODEL], ["--model", "without --against"]),
    "bench --trust-pickle without --against": (["bench", "{art}", "--trust-pickle"], ["--trust-pickle"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_option_is_one_clear_error(case, files, tmp_path):
    args, words = CASES[case]
    args = [a.format(art=files / "art", w=files / "w.pt", dir=tmp_path) for a in args]
    result, before = _run(args, tmp_path)
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out and "bug in Porter" not in out, out
    for word in words:
        assert word in out, (word, out)
    assert sorted(os.listdir(tmp_path)) == before


def test_validate_report_written_whole_and_link_replaced(files, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    report = tmp_path / "r.json"
    os.symlink(victim, report)
    result = CliRunner().invoke(main, ["validate", str(files / "art"), "--against", str(files / "w.pt"), *MODEL,
                                       "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious" and not os.path.islink(report)
    import json

    assert json.loads(report.read_text())["ok"] is True
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_zoo_convert_bad_checkpoints(tmp_path):
    """zoo convert reads checkpoints without torch: a stranger's file is refused by name, exit 2."""
    import zipfile

    from tests.security.attack_helpers import pickled_payload

    marker = tmp_path / "marker"
    cases = {"evil.pt": pickled_payload(marker), "empty.pt": b"", "text.pt": b"not a checkpoint at all",
             "empty.safetensors": b"", "lie.safetensors": (30).to_bytes(8, "little") + b'{"a": {"dtype": "F32", '
             b'"shape": [9], "data_offsets": [0, 36]}}'}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    with zipfile.ZipFile(tmp_path / "bomb.pt", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bomb/data.pkl", pickled_payload(marker))
        z.writestr("bomb/data/0", b"\0" * (8 << 20))
    for name in [*cases, "bomb.pt"]:
        result = CliRunner().invoke(main, ["zoo", "convert", str(tmp_path / name), "--arch", "resnet18", "-o",
                                           str(tmp_path / "out.safetensors")])
        assert_input_error(result, [name])
        assert not marker.exists() and not (tmp_path / "out.safetensors").exists()


def test_architecture_options_for_a_file_holding_the_model(tmp_path):
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(tinynets.seeded(), (torch.randn(1, 3, 16, 16),)), path)
    for extra in (MODEL, ["--model-kwargs", "{}", "--arch", "resnet18"]):
        result = CliRunner().invoke(main, ["convert", str(path), *extra, "--no-validate", "-o", str(tmp_path / "o")])
        assert_input_error(result, ["m.pt2", "already contains the model"])
    assert sorted(os.listdir(tmp_path)) == ["m.pt2"]


def test_published_files_do_not_hold_local_paths(files, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(files / "w.pt"), *MODEL, "--input-shape", "1,3,16,16",
                                       "--no-validate", "-o", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("README.md", "graph.json", "config.json"):
        assert str(files) not in (out / name).read_text(), name  # the checkpoint by its name, not its path
    assert "w.pt" in (out / "README.md").read_text()
