"""``porter export``: a converted model directory -> one ``.mlxfn`` file that MLX runs without Porter or torch."""

import os
import tempfile

import click

from .artifact import load_ported, recorded_source
from .atomic import folder_problem
from .bench import parse_batches
from porter.checkpoints.budget import check_input_shapes
from .errors import InputError
from porter.checkpoints.inputs import parse_input_shapes
from .layouts import input_dtypes
from .ui import SEED, common_options

SUFFIX = ".mlxfn"


def check_output(output: str, force: bool) -> None:
    """Refuse, before any work, an -o that cannot or may not be written (nor its card, ``-o`` + ``.json``/``.md``)."""
    if not output.endswith(SUFFIX) or os.path.basename(output) == SUFFIX:
        raise InputError(f"-o '{output}' must name a file ending in {SUFFIX}.", "For example -o model.mlxfn.")
    from porter.export_card import card_paths

    for path in (output, *card_paths(output)):
        named = f"-o '{output}'" if path == output else f"'{path}' (-o's card, written with it)"
        if os.path.lexists(path):
            if os.path.isdir(path) or os.path.islink(path):
                raise InputError(f"{named} exists and is not a regular file.", "Choose another path with -o.")
            if not force:
                raise InputError(f"{named} already exists.", "Pass --force to replace it, or choose another path.")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise InputError(f"-o '{output}': {folder_problem(folder)}.", "Choose another path, or create that folder.")
    try:  # permission bits do not tell the whole story (root, read-only mounts): try it
        handle, probe = tempfile.mkstemp(prefix=".porter-probe-", suffix=SUFFIX, dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"-o '{output}': cannot write in the folder '{folder}' ({exc.strerror}).",
                         "Choose a writable location.")


def call_arrays(ported, torch_shapes, seed: int):
    """Inputs of these torch-layout shapes in the port's call layout and recorded dtypes: seeded standard-normal
    floats; zeros for integer and bool inputs (token ids, indices: 0 is valid for any table)."""
    import mlx.core as mx
    import numpy as np

    from .layouts import ported_shape

    # an explicit table: never getattr with a name read from a file
    table = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32, "float64": mx.float64,
             "bool": mx.bool_, "uint8": mx.uint8, "int8": mx.int8, "int16": mx.int16, "int32": mx.int32,
             "int64": mx.int64}

    layouts = list(getattr(ported, "input_layouts", None) or [])
    dtypes = input_dtypes(ported)
    rng = np.random.default_rng(seed)
    arrays = []
    for i, shape in enumerate(torch_shapes):
        shape = ported_shape(shape, layouts[i] if i < len(layouts) else None)
        dtype = table.get(dtypes[i], mx.float32) if i < len(dtypes) else mx.float32
        if mx.issubdtype(dtype, mx.floating):
            wide = np.float64 if dtype == mx.float64 else np.float32
            arrays.append(mx.array(rng.standard_normal(shape).astype(wide), dtype=mx.float64 if wide is np.float64
                                   else None).astype(dtype))
        else:
            arrays.append(mx.zeros(shape, dtype=dtype))
    return arrays


@click.command("export", short_help="Converted model -> .mlxfn file (C++/Swift/Python MLX, no Porter).",
               epilog="\b\nExit status: 0 success, 2 usage or input error (also: a model that cannot be exported as "
                      "asked), 3 internal error.")
@click.argument("directory", metavar="DIR")
@click.option("-o", "--output", metavar="FILE", help="The .mlxfn file to write. Default: DIR.mlxfn next to DIR.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="1,3,224,224",
              help="Torch-layout shape to trace at (repeat for several inputs). Default: recorded at conversion.")
@click.option("--shapeless", is_flag=True,
              help="Let the file run at other input sizes (MLX's shapeless export); checked at a second size and "
                   "refused, naming the module and op, where it would fail or be wrong.")
@click.option("--probe-shape", "probe_shapes", multiple=True, metavar="2,3,160,160",
              help="With --shapeless: the torch-layout second size to check at. Default: the dynamic dims grown.")
@click.option("--batch", "batch", metavar="1,8",
              help="Trace at each of these batch sizes (dim 0 of every input) into the one file, which then runs at "
                   "exactly those sizes. Not with --shapeless.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random example inputs.")
@common_options()
def export(ui, directory, output, input_shapes, shapeless, probe_shapes, batch, force, seed):
    """Export the converted model in DIR as an .mlxfn file that mx.import_function loads (Python, C++ or Swift),
    with neither Porter nor torch installed.

    Porter's native kernels and other ops MLX cannot serialize are replaced by pure-MLX ops computing the same
    values (listed in the output). The file is loaded back and checked against the model before it replaces -o;
    on any failure nothing is written. It takes the inputs in the model's layout (channels-last images unless
    converted with --io-layout torch), positionally in the port's input order (an input converted by keyword,
    --input-shape name=..., takes its place in that order; --input-shape gives the shapes in it too), and returns
    its outputs as a list. FILE.json and FILE.md beside it record the inputs' order, names, shapes and dtypes,
    with a usage snippet.
    """
    if not output:  # DIR.mlxfn next to DIR (for "." or "..", the folder's own name)
        base = os.path.normpath(directory)
        output = (os.path.abspath(base) if os.path.basename(base) in ("", ".", "..") else base) + SUFFIX
    check_output(output, force)
    if probe_shapes and not shapeless:
        raise InputError("--probe-shape is only used with --shapeless.", "Add --shapeless, or drop --probe-shape.")
    if batch is not None and shapeless:
        raise InputError("--batch and --shapeless both given.", "A shapeless file runs at any batch already; a "
                         "fixed-shape file traces each --batch size.")
    batches = parse_batches(batch) if batch is not None else []
    shapes = parse_input_shapes(input_shapes)
    probes = parse_input_shapes(probe_shapes, "--probe-shape")
    ported = load_ported(directory)
    if not shapes:
        recorded = recorded_source(ported).get("input_shapes")
        if not recorded:
            raise InputError(f"'{directory}' does not record its input shape.",
                             "Give it with --input-shape, e.g. --input-shape 1,3,224,224 (torch layout).")
        shapes = parse_input_shapes([",".join(map(str, s)) for s in recorded], f"input shape recorded in {directory}")
    sets = [[(b,) + tuple(s[1:]) for s in shapes] for b in batches] or [shapes]
    check_input_shapes([s for shape_set in sets for s in shape_set], "--batch with the input shape")
    from porter.export import ExportError, export_function

    with ui.progress(["exporting"]) as progress:
        with progress.step("exporting"):
            try:
                report = export_function(ported, output, call_arrays(ported, sets[0], seed), shapeless=shapeless,
                                         probe_inputs=call_arrays(ported, probes, seed + 1) if probes else None,
                                         more_examples=[call_arrays(ported, s, seed + 1 + k)
                                                        for k, s in enumerate(sets[1:])] or None)
            except ExportError as exc:
                raise InputError(f"Cannot export '{directory}': {exc}")
    ui.echo(str(report))
    ui.echo("Load it (no Porter needed): fn = mx.import_function(" + repr(output) + "); outputs = fn("
            + ", ".join(report.input_names) + ")")
    ui.emit_json({"ok": True, **report.to_dict()})
