"""Cards written from a stranger's artifact (session 16): a crafted ``source_class`` (any text in graph.json) re-saved
by ``porter.save`` (README.md model card) or exported (``PATH.md``) cannot put terminal controls, invisible
reordering characters, a table-breaking ``|`` or a code-span-closing backtick into the card; ``porter inspect DIR``
prints the same name escaped. Session 17: the metadata a re-save keeps (source format, validation bar) in the card,
and the refusals that quote graph.json (a shape check's message, a train refusal's reason) on the command line and
in the Python API."""

import mlx.core as mx
import pytest
from click.testing import CliRunner

import porter
from porter.cli.main import main
from porter.converters.safe_text import markdown_code, printable

HOSTILE = "Net\x1b[2J\x1b]0;owned\x07\r\nsecond line\u202eevil\u2028| `code` |\x7f\x9b"


def _control_free(text: str) -> bool:
    return not any(not c.isprintable() and c not in "\n" for c in text)


@pytest.mark.parametrize("text", [HOSTILE, "a" * 1000, "", 123, "plain.Module"])
def test_markdown_code_is_one_printable_code_span(text):
    code = markdown_code(text)
    assert code.startswith("`") and code.endswith("`") and code.count("`") == 2
    assert "|" not in code and "\n" not in code and _control_free(code) and len(code) <= 302
    assert printable(text) == str(text) or "\\x1b" in printable(text)


def test_hostile_source_class_cannot_reach_the_card_raw(tampered, tmp_path):
    directory = tampered(lambda graph: graph.__setitem__("source_class", HOSTILE))
    ported = porter.load(str(directory))
    assert ported.source_class == HOSTILE  # loading keeps the text as data
    porter.save(ported, str(tmp_path / "resaved"))
    card = (tmp_path / "resaved" / "README.md").read_text()
    assert _control_free(card) and "\\x1b[2J" in card and "\\u202e" in card
    (row,) = [line for line in card.splitlines() if line.startswith("| Source class")]
    assert row.count("|") == 3  # the row's own three bars: the name adds none
    report = porter.export_function(ported, str(tmp_path / "m.mlxfn"), [(1, 16, 16, 3)])
    (exported_card,) = [open(p).read() for p in report.card_paths if p.endswith(".md")]
    assert "Net" in exported_card
    assert _control_free(exported_card) and "\\x1b[2J" in exported_card


def test_inspect_prints_the_name_escaped(tampered):
    directory = tampered(lambda graph: graph.__setitem__("source_class", HOSTILE))
    result = CliRunner().invoke(main, ["inspect", str(directory)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output and "\\x1b[2J" in result.output


HOSTILE_MARKDOWN = "pt | <img src=x onerror=alert(1)>\n\n# Injected heading\n`code` \x1b[2J"


def test_hostile_metadata_cannot_reach_the_card_raw(tampered, tmp_path):
    """``porter update`` keeps graph.json's ``metadata`` (a stranger's text) and writes a new README.md from it: the
    source's ``format`` went into the card raw (a table row broken by ``|``, a heading, HTML); a re-save that keeps
    the metadata also wrote the validation bar's ``rtol``/``atol``/``dtype`` raw (session 17)."""
    import torch

    from tests.cli import tinynets

    validation = {"ok": True, "max_rel_error": 0.0, "rtol": HOSTILE_MARKDOWN, "atol": 1e-4, "dtype": HOSTILE_MARKDOWN}
    directory = tampered(lambda graph: graph["metadata"].update(
        source={**graph["metadata"]["source"], "file": "w.pt", "format": HOSTILE_MARKDOWN}, validation=validation))
    torch.save(tinynets.seeded().state_dict(), tmp_path / "w.pt")
    result = CliRunner().invoke(main, ["update", str(directory), str(tmp_path / "w.pt"), "-o", str(tmp_path / "up")])
    assert result.exit_code == 0, result.output
    ported = porter.load(str(directory))
    porter.save(ported, str(tmp_path / "resaved"), metadata=ported.graph["metadata"])
    for card in ((tmp_path / "up" / "README.md").read_text(), (tmp_path / "resaved" / "README.md").read_text()):
        assert _control_free(card) and "`pt / <img" in card  # shown, as code
        assert "\n# Injected" not in card  # no heading of the stranger's
        (row,) = [line for line in card.splitlines() if line.startswith("| Converted from")]
        assert row.count("|") == 3 and row.endswith("|"), row
    resaved = (tmp_path / "resaved" / "README.md").read_text()
    (bar,) = [line for line in resaved.splitlines() if line.startswith("Largest output error")]
    assert "`pt / <img" in bar and "atol 0.0001" in bar, bar


def test_command_line_errors_quoting_the_file_are_escaped(tampered):
    """An error paragraph quoting graph.json (a shape check's ``message`` and ``guard``, shown when an input breaks
    it) printed the file's terminal controls raw (session 17): a title set by OSC, a cleared screen."""
    directory = tampered(lambda graph: graph.update(input_checks=[
        {"lhs": {"dim": [0, 0]}, "cmp": "eq", "rhs": 999, "guard": "g\x1b[2J", "message": "EVIL\x1b]0;owned\x07"}]))
    for command in (["bench", str(directory), "--repeat", "1", "--warmup", "0"],
                    ["export", str(directory), "-o", str(directory) + ".mlxfn"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output, result.output
        assert "EVIL\\x1b]0;owned\\x07" in result.output and "g\\x1b[2J" in result.output


def test_library_refusals_quoting_the_file_are_escaped(tampered):
    """The Python API's refusals quote the same texts (a shape check's message, a train refusal's reason)."""
    directory = tampered(lambda graph: graph.update(
        input_checks=[{"lhs": {"dim": [0, 0]}, "cmp": "eq", "rhs": 999, "guard": "g", "message": "EVIL\x1b[2J"}],
        train_refusals={"bn1": "reason\x1b]0;owned\x07"}))
    model = porter.load(str(directory))
    with pytest.raises(ValueError) as shape_refusal:
        model(mx.zeros((1, 16, 16, 3)))
    with pytest.raises(ValueError) as train_refusal:
        model.train()
    for error in (shape_refusal.value, train_refusal.value):
        assert "\x1b" not in str(error) and "\\x1b" in str(error), str(error)
