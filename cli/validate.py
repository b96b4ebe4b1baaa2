"""``porter validate``: compare a converted model directory with the torch checkpoint it came from."""

import click

from porter.checkpoints import open_model, parse_input_shapes

from .artifact import load_ported, recorded_model, recorded_source
from .convert import architecture_options, validate_source
from .errors import InputError, ValidationFailed, first_line
from .layouts import order_for_port, recorded_input_shapes
from .atomic import check_file_destination, write_text_file
from .ui import SEED, Tolerance, common_options


@click.command(short_help="Compare a converted model with its torch checkpoint.", epilog="\b\nExit status: 0 within tolerance, 1 not within tolerance, 2 usage or input error, "
                      "3 internal error.")
@click.argument("directory", metavar="DIR")
@click.option("--against", "against", metavar="FILE", required=True,
              help="The torch checkpoint to compare with (any format `porter convert` reads).")
@architecture_options
@click.option("--grads", is_flag=True, help="Also compare gradients w.r.t. inputs and parameters.")
@click.option("--rtol", type=Tolerance(), default=1e-4, show_default=True, help="Relative tolerance.")
@click.option("--atol", type=Tolerance(), default=1e-4, show_default=True, help="Absolute tolerance.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random test inputs.")
@click.option("--json", "json_report", metavar="PATH",
              help="Also write the full report as JSON to PATH ('-' for stdout instead of the table).")
@common_options(json_flag=False)
def validate(ui, directory, against, model_spec, model_kwargs, arch, input_shapes, trust_pickle, grads, rtol,
             atol, seed, json_report):
    """Validate the converted model in DIR against the torch checkpoint FILE.

    Runs both on the same seeded random inputs and reports, per output and per module, the largest errors and
    the first module that diverges. The input shape defaults to what `porter convert` recorded in DIR. For a
    state_dict checkpoint give the architecture (--model/--arch, --model-kwargs): code recorded in DIR is never
    imported (it is shown as a hint), except Porter's own built-in architectures.
    """
    if json_report and json_report != "-":
        check_file_destination(json_report, "--json")  # before the slow part, not after it
    ported = load_ported(directory, ui)  # the whole artifact is checked before anything from it is used
    meta = recorded_source(ported)
    if not (model_spec or arch) and meta.get("model"):
        model_spec = recorded_model(directory, against, meta, "validate")
    shapes_from = "from --input-shape"
    if input_shapes:  # in the port's input order, each checked against the input it feeds
        input_shapes = tuple(order_for_port(ported, parse_input_shapes(input_shapes)))
    elif meta.get("input_shapes"):
        input_shapes = tuple(recorded_input_shapes(ported, meta))
        shapes_from = f"recorded in {directory}"
    with ui.progress(["loading", "validating against torch"]) as progress:
        with progress.step("loading"):
            source = open_model(against, model=model_spec, model_kwargs=model_kwargs, arch=arch,
                                trust_pickle=trust_pickle, input_shapes=input_shapes, seed=seed,
                                shapes_from=shapes_from)
        with progress.step("validating against torch"):
            try:
                report = validate_source(source, ported, rtol=rtol, atol=atol, grads=grads, seed=seed)
            except (ValueError, TypeError) as exc:  # incl. a well-formed artifact whose graph fails to run
                raise InputError(f"Cannot compare '{directory}' with '{against}': {first_line(exc)}.",
                                 "Check that DIR was converted from this checkpoint.")
    if json_report and json_report != "-":
        write_text_file(json_report, report.to_json() + "\n", "--json")
    if json_report == "-":
        ui.json = True
        ui.emit_json(report.to_dict())
    else:
        ui.echo(str(report))
    if not report.ok:
        error = ValidationFailed(f"'{directory}' does not match '{against}' within rtol={rtol}, atol={atol}.",
                                 report)
        error.already_reported = ui.json  # the report itself was the JSON output
        raise error

