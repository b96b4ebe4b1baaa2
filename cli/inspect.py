"""``porter inspect``: what converting a checkpoint will involve, before converting it."""

import click

from porter.checkpoints import describe_format, open_model

from .convert import architecture_options
from .ui import common_options


@click.command(short_help="Modules/ops, converters, unsupported ops, before converting.")
@click.argument("file")
@architecture_options
@common_options()
def inspect(ui, file, model_spec, model_kwargs, arch, input_shapes, trust_pickle):
    """Show the modules/ops of the model in FILE and the converter each maps to.

    Lists parameter counts, every operation Porter cannot convert yet, and how many layout transposes the
    conversion will insert. Reads the same formats and options as `porter convert`.
    """
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
