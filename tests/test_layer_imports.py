"""Converters, the zoo and the ``porter`` package use Porter's layers through public names only (issue 16): no
``porter.layers._*`` module and no ``_private`` name of a layers module, whether imported or reached as an attribute;
and under ``converters/ops`` only ``_layers.py`` (the one way in for runtime kernels) imports ``porter.layers``.
The files are parsed, so a docstring or comment that mentions a private module does not count.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("converters", "zoo", "porter")
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _private_part(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[:2] == ["porter", "layers"] and any(p.startswith("_") for p in parts[2:])


def _dotted(node) -> str:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
        return ".".join(reversed(names))
    return ""


def private_layer_uses(source: str) -> list:
    """``(line, text)`` of every private reach into ``porter.layers`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[:2] == ["porter", "layers"]:
                for alias in node.names:
                    if _private_part(node.module) or alias.name.startswith("_"):
                        found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _private_part(a.name)]
        elif isinstance(node, ast.Attribute) and _private_part(_dotted(node)):
            found.append((node.lineno, _dotted(node)))
    return found


def imports_layers(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("porter.layers"):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("porter.layers") for a in node.names):
            return True
    return False


def test_the_scan_finds_files():
    assert len(FILES) > 50 and any(p.name == "_layers.py" for p in FILES)


@pytest.mark.parametrize("text", [
    "from porter.layers import _native",
    "from porter.layers._export import note",
    "from porter.layers.conv import _ConvNd",
    "import porter.layers._native as n",
    "import porter\nporter.layers._native.active()",
])
def test_the_scan_catches_private_uses(text):
    assert private_layer_uses(text), text


@pytest.mark.parametrize("text", [
    "from porter.layers import export_note, functional",
    "from porter.layers.functional import relu",
    "import porter.layers as PL\nPL.Conv2d",
    '"""porter.layers._native is private"""',
])
def test_the_scan_passes_public_uses(text):
    assert not private_layer_uses(text), text


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_layers_access(path):
    found = private_layer_uses(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} reaches private porter.layers names: {found}"


def test_ops_reach_layers_through_one_module():
    ops = ROOT / "converters" / "ops"
    direct = [p.name for p in sorted(ops.glob("*.py")) if p.name != "_layers.py" and imports_layers(p.read_text())]
    assert not direct, f"converters/ops files importing porter.layers directly (use converters/ops/_layers.py): {direct}"
