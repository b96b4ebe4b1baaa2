"""Code comments that cite docs/SEMANTICS.md point at sections that exist."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CITE = re.compile(r"docs/SEMANTICS\.md\s+§([0-9]+(?:\.[0-9]+)?)(?:-([0-9]+))?")


def _sections() -> set:
    text = (ROOT / "docs" / "SEMANTICS.md").read_text()
    return set(re.findall(r"^#{2,3} ([0-9]+(?:\.[0-9]+)?)\.? ", text, flags=re.M))


def test_semantics_citations_resolve():
    sections = _sections()
    assert {"1", "3.3", "3.5", "4.1", "5.1", "6.3", "7.1", "8.2", "9.2", "10"} <= sections
    cited = []
    for folder in ("layers", "converters", "porter", "zoo", "cli", "tests", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for match in CITE.finditer(path.read_text()):
                first, last = match.group(1), match.group(2)
                numbers = [first] if last is None else [str(n) for n in range(int(first), int(last) + 1)]
                cited += [(path.name, n) for n in numbers]
    assert cited, "no citation found: the pattern is wrong"
    missing = [(name, n) for name, n in cited if n not in sections]
    assert not missing, missing
    assert "SEMANTICS.md section" not in "".join(p.read_text() for p in (ROOT / "layers").rglob("*.py"))
