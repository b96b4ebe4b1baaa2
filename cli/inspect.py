"""``porter inspect``: what converting a checkpoint will involve, before converting it."""

import os

import click

from porter.checkpoints import describe_format, open_model

from .artifact import GRAPH, load_ported, printable
from .convert import architecture_options
from .ui import common_options


@click.command(short_help="Modules/ops, converters, unsupported ops, before converting.")
@click.argument("file")
@architecture_options
@common_options()
def inspect(ui, file, model_spec, model_kwargs, arch, input_shapes, trust_pickle):
    """Show the modules/ops of the model in FILE and the converter each maps to; for a converted model folder
    (graph.json + weights), what it holds: inputs, arrays, mapped layers, and arrays nothing in it uses.

    Lists parameter counts, every operation Porter cannot convert yet, and how many layout transposes the
    conversion will insert. Reads the same formats and options as `porter convert`.
    """
    if os.path.isdir(file) and os.path.lexists(os.path.join(file, GRAPH)):
        return _inspect_artifact(ui, file)
    from porter.converters import inspect_model

    with ui.progress(["loading checkpoint", "capturing the graph"]) as progress:
        with progress.step("loading checkpoint"):
            source = open_model(file, model=model_spec, model_kwargs=model_kwargs, arch=arch,
                                trust_pickle=trust_pickle, input_shapes=input_shapes)
        with progress.step("capturing the graph"):
            example = source.example_inputs  # --input-shape name=... given by keyword
            kwargs = getattr(example, "kwargs", None) if not hasattr(source.model, "graph_signature") else None
            report = inspect_model(source.model, example.args if kwargs else tuple(example),
                                   example_kwargs=kwargs or None)
    for note in source.notes:
        ui.info(f"note: {note}")
    unsupported = list(report.unsupported)
    shapes = ", ".join("(" + ",".join(map(str, t.shape)) + ")" for t in source.example_inputs)
    what = describe_format(source.format) + (f", architecture {source.model_spec}" if source.model_spec else "")
    ui.echo(f"{file} ({what}); example input {shapes} [torch layout]")
    ui.echo("")
    ui.echo(str(report))
    ui.emit_json({"ok": True, "input": file, "format": source.format, "model": source.model_spec,
                  "input_shapes": [list(t.shape) for t in source.example_inputs], "rows": report.rows,
                  "unsupported": unsupported, "transposes": report.transposes,
                  "num_parameters": report.num_parameters})


def _inspect_artifact(ui, directory):
    """A converted model folder, checked as ``porter.load`` checks it (never imports torch or runs the model)."""
    ported = load_ported(directory)
    graph = ported.graph
    arrays = {name: a for name, a in ported.torch_parameters().items()}
    unused = ported.unused_params
    size = sum(a.nbytes for a in arrays.values())
    inputs = [{"name": i["name"], "shape": i["meta"].get("hint"), "dtype": i["meta"].get("dtype")}
              for i in graph["inputs"]]
    # every string below comes from the file: shown with control characters escaped (no terminal repainting)
    ui.echo(f"{directory} (converted Porter model, format {graph['format_version']}); source "
            f"{printable(graph.get('source_class') or 'unknown')}; call {printable(ported.call_signature)}")
    for i in inputs:
        ui.echo(f"  input {printable(i['name'])}: example shape {printable(i['shape'])} {printable(i['dtype'])} "
                "[torch layout]")
    ui.echo(f"  {len(arrays)} arrays, {sum(a.size for a in arrays.values())} values, {size} bytes; "
            f"{len(graph.get('modules', {}))} mapped layers; {len(graph['nodes'])} nodes")
    if unused:
        ui.echo(f"  unused arrays ({len(unused)}, {sum(arrays[n].nbytes for n in unused if n in arrays)} bytes; "
                f"no mapped layer or node uses them): {', '.join(map(printable, unused))}")
    else:
        ui.echo("  unused arrays: none")
    ui.emit_json({"ok": True, "input": directory, "format": "porter", "format_version": graph["format_version"],
                  "source_class": graph.get("source_class"), "inputs": inputs, "num_arrays": len(arrays),
                  "num_parameters": sum(a.size for a in arrays.values()), "bytes": size,
                  "mapped_layers": len(graph.get("modules", {})), "nodes": len(graph["nodes"]),
                  "unused_arrays": unused})
