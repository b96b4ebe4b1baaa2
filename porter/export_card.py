"""What an exported ``.mlxfn`` file takes and returns, written beside it: ``PATH.json`` and ``PATH.md``.

An ``.mlxfn`` file takes its inputs positionally and records neither their names nor their layout. A port converted
with keyword inputs (``porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})``) is exported with its
inputs in the graph's input order (``graph.json``'s ``signature.inputs``, :class:`porter.export.PositionalCall`), so
the user needs that order: ``PATH.json`` records it for programs and ``PATH.md`` for people, with a Python usage
snippet that runs as written (from the file's folder, without Porter or torch). ``PATH.json``::

    {"format": "porter-mlxfn", "version": 1, "file": "bert.mlxfn", "call": "positional", "shapeless": false,
     "port_call": "(input_ids, attention_mask=None, token_type_ids, ...)",
     "inputs": [{"position": 0, "name": "input_ids", "keyword": false, "dtype": "int64", "layout": null,
                 "shape": [2, 6], "traced_shapes": [[2, 6]], "dynamic_axes": []}, ...],
     "outputs": [{"position": 0, "name": "0"}], "notes": [...]}

``keyword`` says the torch forward (and the port) take that input by keyword; ``layout`` is the port's input layout
(``"NCHW->NHWC"``: torch's NCHW given channels-last), ``dynamic_axes`` the axes a shapeless file lets vary (empty for
a fixed-shape file, which runs at ``traced_shapes`` only). Never imports torch.
"""

from __future__ import annotations

import json
import keyword
import os

from porter.converters.files import remove_quietly, write_temporary_text
from porter.converters.model_card import example_expression
from porter.converters.safe_text import markdown_code

FORMAT = "porter-mlxfn"
VERSION = 1


def card_paths(path: str) -> tuple:
    """``(PATH.json, PATH.md)`` for the ``.mlxfn`` file ``path``."""
    return path + ".json", path + ".md"


def _layouts(model, count: int) -> list:
    layouts = list(getattr(model, "input_layouts", None) or [])
    return [layouts[i] if i < len(layouts) and isinstance(layouts[i], str) else None for i in range(count)]


def metadata(model, report) -> dict:
    """The ``PATH.json`` record of an export of ``model`` (:func:`porter.export_function`'s ``report``)."""
    count = len(report.input_shapes)
    keywords = getattr(model, "input_keywords", None)
    keywords = keywords if isinstance(keywords, dict) else {}
    axes = report.dynamic_axes or [[] for _ in range(count)]
    inputs = [{"position": i, "name": report.input_names[i], "keyword": i in keywords,
               "dtype": report.input_dtypes[i], "layout": layout, "shape": list(report.input_shapes[i]),
               "traced_shapes": [list(shapes[i]) for shapes in (report.traced_shapes or [report.input_shapes])],
               "dynamic_axes": axes[i]}
              for i, layout in enumerate(_layouts(model, count))]
    record = {"format": FORMAT, "version": VERSION, "file": os.path.basename(report.path), "call": "positional",
              "shapeless": report.shapeless, "inputs": inputs,
              "outputs": [{"position": i, "name": name} for i, name in enumerate(report.output_names)],
              "notes": list(report.notes)}
    signature = getattr(model, "call_signature", None)
    if isinstance(signature, str):
        record["port_call"] = signature
    source_class = getattr(model, "source_class", None)
    if isinstance(source_class, str):
        record["source_class"] = source_class
    return record


def _variables(names: list) -> list:
    """A Python variable per input: its argument name (``input_ids``; ``extra0`` for ``extra[0]``, ``mask`` for
    ``kwargs['mask']``) where that is an identifier, else ``input<i>``; distinct, never a keyword or
    ``mx``/``fn``/``outputs``."""
    taken, out = {"mx", "fn", "outputs"}, []
    for i, name in enumerate(names):
        # ``extra[0]`` -> ``extra0``, ``named['bias']`` -> ``bias``
        base, _, rest = name.partition("[")
        var = rest.strip("]'\"") if rest.startswith(("'", '"')) else base + rest.rstrip("]") if rest else name
        var = var if var.isidentifier() and not keyword.iskeyword(var) else f"input{i}"
        while var in taken:
            var += "_"
        taken.add(var)
        out.append(var)
    return out




def card(record: dict) -> str:
    """The text of ``PATH.md`` for a :func:`metadata` record."""
    file = record["file"]
    inputs = record["inputs"]
    variables = _variables([spec["name"] for spec in inputs])
    shapes = "at any size the port accepts (shapeless)" if record["shapeless"] else \
        "at exactly the traced shapes (MLX refuses others)"
    lines = [f"# {file}", "",
             f"An MLX function exported by Porter from "
             f"{markdown_code(record['source_class']) if record.get('source_class') else 'a ported model'}. "
             "It runs with `mx.import_function` in Python, C++ or Swift, without Porter or torch, "
             f"{shapes}.", "",
             "## Inputs, positionally, in this order", "",
             "| position | argument | dtype | layout | shape(s) | dynamic axes |", "|---|---|---|---|---|---|"]
    for spec in inputs:
        name = markdown_code(spec["name"]) + (" (keyword in torch)" if spec["keyword"] else "")
        traced = ", ".join(str(tuple(s)) for s in spec["traced_shapes"])
        lines.append(f"| {spec['position']} | {name} | {spec['dtype']} | {spec['layout'] or '-'} | {traced} | "
                     f"{', '.join(map(str, spec['dynamic_axes'])) or '-'} |")
    if record.get("port_call"):
        lines += ["", f"The ported model's own call: {markdown_code(record['port_call'])}; the file takes the inputs "
                  "above positionally instead (an argument given by keyword to torch goes at its position here)."]
    lines += ["", "## Outputs", "", "A list, in this order: " + ", ".join(
        f"{o['position']}: {markdown_code(o['name'])}" for o in record["outputs"]) + "."]
    lines += [f"- {note}" for note in record["notes"]]
    lines += ["", "## Usage (Python)", "", "```python", "import mlx.core as mx", "",
              f"fn = mx.import_function({json.dumps(file)})"]
    lines += [f"{var} = {example_expression(tuple(spec['shape']), spec['dtype'])}"
              for var, spec in zip(variables, inputs)]
    lines += [f"outputs = fn({', '.join(variables)})  # positionally, in the order above", "mx.eval(outputs)", "```",
              ""]
    return "\n".join(lines)


def stage_card(model, report) -> list:
    """``PATH.json`` and ``PATH.md`` written under temporary names beside them: ``[(temporary, final), ...]`` for
    the caller to rename into place with the ``.mlxfn`` file (or remove)."""
    record = metadata(model, report)
    staged = []
    try:
        for final, text in zip(card_paths(report.path), (json.dumps(record, indent=1) + "\n", card(record))):
            staged.append((write_temporary_text(final, text), final))
    except BaseException:
        for tmp, _ in staged:
            remove_quietly(tmp)
        raise
    return staged
