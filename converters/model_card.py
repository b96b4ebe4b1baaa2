"""``README.md``: the model card of a saved model, as mlx-community writes them.

YAML front matter (``library_name: mlx``, ``tags: [mlx, porter]``, ``base_model`` when given), then provenance
(source class, Porter version, conversion options), the validation summary when one was recorded, and a usage
snippet with ``porter.load``. Built from ``config.json`` (:mod:`converters.hub_config`) and the ``metadata`` given
to ``porter.save`` (``metadata["source"]``, ``metadata["validation"]``: what ``porter convert`` records). Never
read back by ``porter.load``.
"""

from __future__ import annotations

import json

from .hub import check_repo_id
from .safe_text import markdown_code

CARD_FILE = "README.md"

__all__ = ["CARD_FILE", "model_card"]


def _yaml(value) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML scalar: nothing in it can break the front matter




def _provenance(config: dict, metadata: dict) -> list:
    source = metadata.get("source") if isinstance(metadata.get("source"), dict) else {}
    rows = [("Source class", markdown_code(config.get("source_class") or "unknown")),
            ("Porter version", markdown_code(metadata.get("porter_version") or config.get("porter_version")))]
    if source.get("file"):
        rows.append(("Converted from", markdown_code(source["file"]) + (f" ({markdown_code(source['format'])})"
                                                                 if source.get("format") else "")))
    if source.get("model"):
        kwargs = source.get("model_kwargs") or {}
        with_kwargs = f" with {markdown_code(json.dumps(kwargs))}" if kwargs else ""
        rows.append(("Architecture", markdown_code(source["model"]) + with_kwargs))
    rows.append(("Capture", markdown_code(config.get("frontend") or "unknown")))
    rows.append(("I/O layout", markdown_code(config.get("io_layout"))))
    rows.append(("dtype", markdown_code(config.get("dtype"))))
    for i, spec in enumerate(config.get("inputs", [])):
        if spec.get("kind") == "tensor":
            dyn = ", ".join(str(a) for a in spec["dynamic_axes"]) or "none"
            rows.append((f"Input {i} ({markdown_code(spec['name'])})",
                         f"{markdown_code(spec['layout'])}, example shape {markdown_code(tuple(spec['shape']))}, "
                         f"dynamic axes: {dyn}"))
    quant = config.get("quantization")
    if quant:
        overrides = sum(1 for k in quant if k not in ("group_size", "bits", "mode"))
        rows.append(("Quantization", f"{quant['bits']}-bit, group size {quant['group_size']}, "
                     f"{quant.get('mode', 'affine')}" + (f", {overrides} per-layer override(s)" if overrides else "")))
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def _number(value) -> str:
    """A number of the metadata as written; anything else (text from a re-saved stranger's graph.json) as code."""
    return repr(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else markdown_code(value)


def _validation(summary) -> list:
    if not isinstance(summary, dict):
        return []
    ok = summary.get("ok")
    lines = ["## Validation against torch", "",
             f"Result: **{'PASS' if ok else 'FAIL' if ok is False else 'unknown'}**, checked on the model reloaded "
             "from these files."]
    if isinstance(summary.get("max_rel_error"), (int, float)):
        lines.append(f"Largest output error relative to the output's largest magnitude: "
                     f"{summary['max_rel_error']:.3g} (bar: rtol {_number(summary.get('rtol'))}, atol "
                     f"{_number(summary.get('atol'))}).")
    if summary.get("input_shapes"):
        lines.append(f"Inputs (torch layout): {markdown_code(json.dumps(summary['input_shapes']))}.")
    if summary.get("first_divergence"):
        lines.append(f"First diverging module: {markdown_code(summary['first_divergence'])}.")
    if summary.get("dtype"):  # a half-precision model (porter/validate_half.py)
        lines.append(f"Run in {markdown_code(summary['dtype'])} against the float32 torch model; the bar also allows a "
                     f"few times torch's own {markdown_code(summary['dtype'])} error. The module that loses the most: "
                     f"{markdown_code(summary.get('loses_most') or '-')}.")
    return lines + [""]


_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def example_expression(shape: tuple, dtype) -> str:
    """An example input of the recorded shape and dtype: zeros for integer inputs (token ids, masks), a normal
    sample otherwise (``dtype`` comes from config.json: only known names are written into the card)."""
    if dtype in _INT_DTYPES:
        return f"mx.zeros({shape}, dtype=mx.{'bool_' if dtype == 'bool' else dtype})"
    if dtype in _FLOAT_DTYPES and dtype != "float32":
        return f"mx.random.normal({shape}).astype(mx.{dtype})"
    return f"mx.random.normal({shape})"


def _usage(config: dict, name: str) -> list:
    args = []
    for i, spec in enumerate(config.get("inputs", [])):
        if spec.get("kind") == "tensor" and all(isinstance(d, int) for d in spec.get("shape", [None])):
            args.append(example_expression(tuple(spec["shape"]), spec.get("dtype")))
        else:  # no recorded example (or not a tensor): the user supplies it
            args.append(f"input{i}")
        if spec.get("keyword"):  # a keyword input (porter.convert(..., example_kwargs=...))
            args[-1] = f"{spec['keyword']}={args[-1]}"
    return ["## Use with Porter", "", "```bash", "pip install 'porter-mlx[hub]'  # mlx, numpy, safetensors and "
            "huggingface_hub: no torch", "```", "", "```python", "import mlx.core as mx", "import porter", "",
            f"model = porter.load({json.dumps(name).replace('`', '')})  # a Hub repo id or a local folder",
            f"y = model({', '.join(args)})", "```", ""]


def model_card(config: dict, metadata: dict | None, *, name: str, base_model: str | None = None) -> str:
    """The text of ``README.md`` for a model described by ``config`` (``config.json``), saved with ``metadata``,
    loaded as ``porter.load(name)`` (a Hub repo id or folder name)."""
    metadata = metadata if isinstance(metadata, dict) else {}
    front = ["---", "library_name: mlx", "tags:", "- mlx", "- porter"]
    if base_model is not None:
        front.append(f"base_model: {_yaml(check_repo_id(base_model, 'base_model'))}")
    front.append("---")
    title = name.rstrip("/").rsplit("/", 1)[-1] or "model"
    body = ["", f"# {title}", "",
            f"This model was converted to [MLX](https://github.com/ml-explore/mlx) from the PyTorch model "
            f"{markdown_code(config.get('source_class') or 'unknown')} with Porter {config.get('porter_version')}"
            + (f" (base model: [{base_model}](https://huggingface.co/{base_model}))" if base_model else "") + ".",
            "The weights are stored in MLX layouts (safetensors metadata `porter_layout: mlx`).", "",
            "## Provenance", ""] + _provenance(config, metadata) + [""]
    return "\n".join(front + body + _validation(metadata.get("validation")) + _usage(config, name))
