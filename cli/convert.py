"""``porter convert``: a checkpoint in, a validated MLX model directory out."""

import os

import click

from porter.checkpoints import EXPORT, describe_format, detect_format, open_model

from porter.converters.files import umask

from .atomic import atomic_directory, check_destination, make_parents, remove_created
from .errors import InputError, ValidationFailed, first_line
from .ui import common_options

FORMATS_HELP = """
\b
Formats (detected from the file's content, not its name):
  TorchScript archive   torch.jit.save(torch.jit.script(model), "model.pt")
  torch.export program  torch.export.save(torch.export.export(model, args), "model.pt2")
  state_dict            torch.save(model.state_dict(), "weights.pt")  (.pt/.pth/.bin, also
                        {"state_dict": ...} / {"model": ...} wrappers, and .safetensors);
                        needs the architecture: --model package.module:factory or --arch NAME
  pickled nn.Module     torch.save(model, "model.pt"): refused unless --trust-pickle
                        (unpickling runs arbitrary code)

\b
Examples:
  porter convert --example resnet18
  porter convert weights.pt --model torchvision.models:resnet18
  porter convert weights.pt --model mynet:Net --model-kwargs '{"num_classes": 10}' --input-shape 1,3,64,64
  porter convert traced.pt -o out/ --force

\b
Exit status: 0 success, 1 validation failed, 2 usage or input error, 3 internal error.
"""


def architecture_options(func):
    """--model/--model-kwargs/--arch/--input-shape/--trust-pickle, shared with validate, inspect and bench."""
    func = click.option("--trust-pickle", is_flag=True,
                        help="Allow unpickling a whole model saved with torch.save(model). Unpickling runs "
                             "arbitrary code: only for files you trust.")(func)
    func = click.option("--input-shape", "input_shapes", multiple=True, metavar="1,3,224,224",
                        help="Torch-layout shape of the example input (repeat for several inputs); a dtype "
                             "after a colon for other than float32 inputs: 1,32:int64 for token ids; a name before "
                             "'=' gives it by keyword: token_type_ids=1,32:int64 (positional ones first), indices after the "
                             "name an element of a tuple argument: past_key_values[0][1]=1,12,7,64. Default: "
                             "recorded in a .pt2 file, else guessed from the first weight.")(func)
    func = click.option("--arch", metavar="NAME",
                        help="A known architecture for a state_dict: a built-in example such as resnet18, or a zoo model "
                              "(`porter zoo list`).")(func)
    func = click.option("--model-kwargs", metavar="JSON", help="JSON object of arguments for --model.")(func)
    func = click.option("--model", "model_spec", metavar="MODULE:FACTORY",
                        help="For a state_dict: the class or function building the torch model, e.g. "
                             "torchvision.models:resnet18 or mynet:Net.")(func)
    return func


@click.command(epilog=FORMATS_HELP, short_help="Checkpoint -> validated MLX model directory.")
@click.argument("file", required=False)
@click.option("-o", "--output", metavar="DIR", help="Output directory. Default: <stem>-mlx/ next to FILE.")
@architecture_options
@click.option("--io-layout", type=click.Choice(["mlx", "torch"]), default="mlx", show_default=True,
              help="mlx: image inputs/outputs channels-last (N,H,W,C); torch: exactly torch's layout.")
@click.option("--dynamic", "dynamic", default="auto", show_default=True, metavar="MODE|DIMS",
              help="Input dims the port keeps dynamic: auto (every dim torch can keep, within a time budget, "
                   "else the batch dim, else none), all, batch, static, or torch dims such as 0,2,3. Every other "
                   "dim is checked against the example's size on each call.")
@click.option("--dtype", "dtype", metavar="DTYPE",
              help="float16, bfloat16 or float32: weights and compute in that dtype (norm statistics, softmax and "
                   "reductions stay in float32, as in torch). A half model is validated against the float32 "
                   "torch model, per module, with a bar derived from torch's own error in that dtype. Default: "
                   "the checkpoint's dtypes.")
@click.option("--no-validate", is_flag=True, help="Skip the comparison against torch.")
@click.option("--grads", is_flag=True, help="Also compare gradients during validation.")
@click.option("--force", is_flag=True, help="Replace an existing output directory (and example checkpoint).")
@click.option("--example", metavar="NAME",
              help="Instead of FILE: build a built-in example (e.g. resnet18) with seeded random weights, save it "
                   "as a checkpoint and convert it. No download.")
@click.option("--max-shard-size", metavar="SIZE", default="5GiB", show_default=True,
              help="Split the weights into model-0000i-of-0000N.safetensors + an index past this size "
                   "(e.g. 2GB, 500MiB, or bytes).")
@click.option("--base-model", metavar="OWNER/NAME", help="Hub repo id of the original model, for the model card.")
@click.option("--repo-id", metavar="OWNER/NAME",
              help="Hub repo id the folder will be published as (the model card's usage snippet). Default: the "
                   "output folder's name.")
@click.option("-q", "--quantize", is_flag=True,
              help="Quantize the weights of convolutions, Linear and Embedding layers (where their sizes allow; the "
                   "others stay float and are listed). -q is --quantize here, as in mlx-lm; quiet is --quiet.")
@click.option("--q-bits", type=click.Choice(["4", "8"]), help="Bits per weight with --quantize. Default: 4.")
@click.option("--q-group-size", type=click.Choice(["32", "64", "128"]),
              help="Weights sharing one scale and bias with --quantize. Default: 64.")
@common_options(quiet_short=False)
def convert(ui, file, output, model_spec, model_kwargs, arch, input_shapes, trust_pickle, io_layout, dynamic,
            dtype, no_validate, grads, force, example, max_shard_size, base_model, repo_id, quantize, q_bits,
            q_group_size):
    """Convert a PyTorch checkpoint FILE into an MLX model directory, and validate it against torch.

    The output (model.safetensors + graph.json, config.json and a README.md model card: a folder ready to publish
    on the Hugging Face Hub) is written atomically: nothing is left behind if anything fails, and an existing
    directory is only replaced with --force.
    """
    if grads and no_validate:
        raise click.UsageError("--grads compares gradients while validating: it cannot be combined with "
                               "--no-validate.")
    hub = hub_options(max_shard_size, base_model, repo_id)
    hub["quantize"] = quantize_options(quantize, q_bits, q_group_size)
    dtype = parse_dtype(dtype)
    if example:
        if file or model_spec or arch or trust_pickle:
            raise click.UsageError("--example builds its own checkpoint: do not give FILE, --model, --arch or "
                                   "--trust-pickle with it.")
        return convert_example(ui, example, output, input_shapes, io_layout, no_validate, grads, force,
                               dynamic=parse_dynamic(dynamic), hub=hub, dtype=dtype)
    if not file:
        raise click.UsageError("Give the checkpoint FILE to convert (or --example resnet18 to try Porter).")
    result = run_convert(ui, file, output, model_spec=model_spec, model_kwargs=model_kwargs, arch=arch,
                         input_shapes=input_shapes, trust_pickle=trust_pickle, io_layout=io_layout,
                         validate=not no_validate, grads=grads, force=force, dynamic=parse_dynamic(dynamic),
                         hub=hub, dtype=dtype)
    ui.emit_json(result)


def quantize_options(quantize, bits, group_size):
    """``-q``/``--q-bits``/``--q-group-size`` -> ``{"bits", "group_size"}`` or None; the sizes only with -q."""
    if not quantize:
        given = [name for name, value in (("--q-bits", bits), ("--q-group-size", group_size)) if value is not None]
        if given:
            raise click.UsageError(f"{' and '.join(given)} only apply with -q/--quantize.")
        return None
    return {"bits": int(bits or 4), "group_size": int(group_size or 64)}


def hub_options(max_shard_size, base_model, repo_id):
    """``--max-shard-size``/``--base-model``/``--repo-id`` checked before anything slow: porter.save's keywords."""
    from porter.converters.hub import check_repo_id
    from porter.converters.shards import parse_size

    out = {}
    for option, value, check in (("--max-shard-size", max_shard_size, parse_size),
                                 ("--base-model", base_model, check_repo_id), ("--repo-id", repo_id, check_repo_id)):
        if value is None:
            continue
        try:
            out[option[2:].replace("-", "_")] = check(value) if check is parse_size else check(value, option)
        except ValueError as exc:
            raise InputError(f"{option} '{value}' is not valid: {first_line(exc)}.",
                             "Give a size such as 5GB or 500MiB, and Hub repo ids as owner/name.") from None
    return out


def parse_dtype(text):
    """``--dtype``: float16, bfloat16, float32, or None (the checkpoint's dtypes)."""
    if text is None:
        return None
    from porter.converters.precision import DTYPES

    if text not in DTYPES:
        raise InputError(f"--dtype '{text}' is not a dtype Porter converts to.",
                         f"Use one of {', '.join(DTYPES)} (or leave --dtype out to keep the checkpoint's).")
    return text


def parse_dynamic(text):
    """``--dynamic``: a mode name or comma-separated torch dims."""
    text = (text or "auto").strip()
    if text in ("auto", "all", "batch", "static"):
        return text
    try:
        dims = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        dims = []
    if not dims:
        raise InputError(f"--dynamic '{text}' is neither a mode nor a list of dims.",
                         "Use auto, all, batch, static (no dynamic dim), or torch dims such as 0,2,3.") from None
    return dims


def default_output(file: str) -> str:
    stem = os.path.splitext(os.path.basename(file))[0] or "model"
    return os.path.join(os.path.dirname(file), f"{stem}-mlx")


def run_convert(ui, file, output=None, *, model_spec=None, model_kwargs=None, arch=None, input_shapes=(),
                trust_pickle=False, io_layout="mlx", validate=True, grads=False, force=False, dynamic="auto",
                hub=None, dtype=None):
    """Convert ``file`` into ``output``; returns the result dict (also printed as text unless --json)."""
    import porter

    output = output or default_output(file)
    hub = {"repo_id": os.path.basename(os.path.abspath(output)), **(hub or {})}  # written into a temp folder
    quantize = hub.pop("quantize", None)
    fmt = detect_format(file)  # fail fast on a bad file, before anything slow (and only once)
    check_destination(output, force, [file])
    labels = ["loading checkpoint", "converting", "writing weights", "validating against torch"]
    if not validate:
        labels.remove("validating against torch")
    report = failure = None
    with ui.progress(labels) as progress:
        with progress.step("loading checkpoint"):
            source = open_model(file, model=model_spec, model_kwargs=model_kwargs, arch=arch,
                                trust_pickle=trust_pickle, input_shapes=input_shapes, format=fmt)
        for note in source.notes:
            ui.info(f"note: {note}")
        with progress.step("converting"):
            ported = _convert(porter, source, io_layout, dynamic, dtype)
        metadata = {"porter_version": porter.__version__, "source": source.metadata(), "io_layout": io_layout}
        quantization = None
        if dtype is not None:
            metadata["dtype"] = dtype
        try:
            if quantize is not None:
                # the conversion is proven on the float port first; the quantized one is then measured, not judged
                if validate:
                    with progress.step("validating against torch"):
                        report = validate_source(source, ported, grads=grads)
                    _raise_if_failed(report, file)
                quantization = _quantize(ui, ported, quantize)
                metadata["quantization"] = quantization
            with atomic_directory(output, force, [file]) as tmp:
                with progress.step("writing weights"):
                    porter.save(ported, tmp, metadata=metadata, **hub)
                    reloaded = _reload(porter, tmp)
                if validate and quantize is not None:
                    from porter.validation.cost import cost, describe

                    measured = cost(validate_source(source, reloaded))
                    measured["modules"] = measured["modules"][:20]
                    quantization["error"] = measured
                    ui.info(describe(measured, f"{quantize['bits']}-bit quantization"))
                    porter.save(ported, tmp, metadata={**metadata, "validation": report.summary()}, **hub)
                elif validate:
                    # Validate what the user will get: the model reloaded from the files just written.
                    with progress.step("validating against torch"):
                        report = validate_source(source, reloaded, grads=grads)
                    _raise_if_failed(report, file)
                    porter.save(ported, tmp, metadata={**metadata, "validation": report.summary()}, **hub)
        except ValidationFailed as exc:
            failure = exc
    if failure is not None:
        ui.echo(str(failure.report))
        raise failure
    result = _result(file, output, source, ported, report)
    result["quantization"] = quantization
    _print_result(ui, result, report)
    return result


def _raise_if_failed(report, file):
    if not report.ok:
        raise ValidationFailed(
            f"Validation failed: the converted model does not match torch within tolerance "
            f"(first divergence: {_divergence(report)}). Nothing was written. Re-run with "
            f"--no-validate to keep the output anyway, then `porter validate DIR --against "
            f"{file}` for the full report.", report)


def _quantize(ui, ported, options):
    """Quantize the port in place (porter.layers.quantize_model); returns what was done, for the metadata."""
    from porter.layers import quantize_model

    q = quantize_model(ported, group_size=options["group_size"], bits=options["bits"])
    ui.info(f"quantized {len(q.quantized)} layer(s) to {options['bits']} bits (groups of {options['group_size']})")
    for path, why in sorted(q.skipped.items()):
        ui.info(f"  left in float: {path}: {why}")
    return {"bits": options["bits"], "group_size": options["group_size"], "quantized": list(q.quantized),
            "float": dict(q.skipped)}


def _convert(porter, source, io_layout, dynamic="auto", dtype=None):
    try:
        example = source.example_inputs  # positional ones, then --input-shape name=... given by keyword
        kwargs = getattr(example, "kwargs", None) if source.format != EXPORT else None  # a program has its own
        return porter.convert(source.model, example.args if kwargs else tuple(example), example_kwargs=kwargs or None,
                              io_layout=io_layout, dynamic=dynamic, dtype=dtype)
    except ValueError as exc:
        if "dynamic" not in str(exc):
            raise
        raise InputError(f"--dynamic cannot be honoured for '{source.path}': {first_line(exc)}.",
                         "Choose another --dynamic value (auto works for every format).") from exc
    except TypeError as exc:
        if "example_kwargs" not in str(exc):
            raise
        raise InputError(f"Porter cannot take keyword inputs for '{source.path}': {first_line(exc)}.",
                         "Give that model's inputs without names (--input-shape 1,32:int64), in its forward's "
                         "order.") from exc
    except NotImplementedError as exc:
        if type(exc).__name__ == "UnsupportedOpsError":
            raise  # listed op by op by the error handler
        # a documented limitation (an argument value Porter cannot honour yet), not a crash
        raise InputError(f"Porter cannot convert the model in '{source.path}' yet: {first_line(exc)}.",
                         "Change that part of the model, or open an issue quoting this message.") from exc


def validate_source(source, ported, **kwargs):
    """``porter.validate`` for any source format: export programs run through ``.module()``, and TorchScript,
    which has no forward hooks, is compared on its outputs only (noted in the report)."""
    import porter
    import torch

    model = source.torch_module()
    per_module = not isinstance(model, torch.jit.ScriptModule)
    inputs = None
    if source.format == EXPORT:
        # An exported program is specialised to its example shapes: test there, on fresh seeded inputs.
        generator = torch.Generator().manual_seed(kwargs.get("seed", 0))
        # integer inputs (token ids, indices) keep the program's own example values: random ones need not be valid
        inputs = [tuple(torch.randn(t.shape, generator=generator).to(t.dtype) if t.dtype.is_floating_point
                        else t.clone() for t in source.example_inputs)]
    report = porter.validate(model, ported, inputs, example_inputs=source.example_inputs,
                             compare_modules=per_module, **kwargs)
    if not per_module:
        report.notes.append("TorchScript modules take no forward hooks: compared on the outputs only")
    if inputs is not None:
        report.notes.append("torch.export program: validated at its example input shapes")
    return report


def _divergence(report):
    first = getattr(report, "first_divergence", None)
    if not first:
        return "model outputs"
    if isinstance(first, dict):
        name = first.get("name") or first.get("module") or "?"
        kind = first.get("type")
        return f"{name} ({kind})" if kind else str(name)
    return str(first)


def _reload(porter, directory):
    try:
        return porter.load(directory)
    except Exception as exc:
        raise RuntimeError(f"the model just written cannot be reloaded: {first_line(exc)}") from exc


def _result(file, output, source, ported, report):
    return {
        "ok": True,
        "input": file,
        "format": source.format,
        "kind": source.kind,
        "model": source.model_spec,
        "output": output,
        "files": sorted(os.listdir(output)),
        "input_shapes": [list(t.shape) for t in source.example_inputs],
        "input_dtypes": [str(t.dtype).replace("torch.", "") for t in source.example_inputs],
        "input_names": list(getattr(source.example_inputs, "names", [None] * len(source.example_inputs))),
        "io_layout": getattr(ported, "io_layout", None),
        "dtype": getattr(ported, "dtype", None),
        "input_layouts": list(getattr(ported, "input_layouts", []) or []),
        "output_layouts": list(getattr(ported, "output_layouts", []) or []),
        "num_transposes": getattr(ported, "num_transposes", None),
        "dynamic_dims": list(getattr(ported, "dynamic_dims", []) or []),
        "capture_note": getattr(ported, "capture_note", None),
        "notes": source.notes,
        "validation": report.to_dict() if report is not None else None,
    }


def _print_result(ui, result, report):
    what = describe_format(result["format"])
    if result["model"]:
        what += f", architecture {result['model']}"
    ui.echo(f"Converted {result['input']} ({what})")
    ui.echo(f"  -> {result['output']}{os.sep} ({', '.join(result['files'])})")
    dtypes = result.get("input_dtypes") or []
    shapes = ", ".join("(" + ",".join(map(str, s)) + ")" + (f" {dtypes[i]}" if i < len(dtypes) and dtypes[i] !=
                                                             "float32" else "")
                       for i, s in enumerate(result["input_shapes"]))
    layouts = ", ".join(result["input_layouts"]) or "as-is"
    ui.echo(f"  example input {shapes} [torch layout]; model input layout {layouts}; "
            f"{result['num_transposes']} layout transposes")
    ui.echo(f"  {describe_dynamic(result['dynamic_dims'], len(result['input_shapes']))}")
    if result.get("dtype") in ("float16", "bfloat16"):
        ui.echo(f"  dtype {result['dtype']}: weights and compute (norm statistics, softmax and reductions in float32)")
    if result.get("capture_note"):
        ui.echo(f"  note: {result['capture_note']}")
    if report is not None:
        ui.echo("")
        ui.echo(str(report))
    else:
        ui.echo("  validation skipped (--no-validate)")
    ui.echo("")
    ui.echo(load_hint(result["output"], result["input_shapes"], result["input_layouts"], dtypes,
                      result.get("input_names") or ()))


def describe_dynamic(dynamic_dims, num_inputs):
    """``dynamic dims (torch layout): input 0: 0, 2, 3; ...`` for the conversion report."""
    per_input = {}
    for entry in dynamic_dims:
        per_input.setdefault(entry["input"], []).append(entry["axis"])
    parts = [f"input {i}: " + (", ".join(str(a) for a in sorted(per_input[i])) if i in per_input else "none")
             for i in range(num_inputs)]
    return ("dynamic dims (torch layout): " + "; ".join(parts) +
            " (every other dim is checked against the example's size on each call)")


def load_hint(output, input_shapes, input_layouts, input_dtypes=(), input_names=()):
    from .layouts import ported_shape

    args = []
    for i, shape in enumerate(input_shapes):
        layout = input_layouts[i] if i < len(input_layouts) else None
        dtype = input_dtypes[i] if i < len(input_dtypes) else "float32"
        shape = tuple(ported_shape(shape, layout))
        if dtype in ("float32", "float16", "bfloat16", "float64"):
            args.append(f"mx.random.normal({shape})" + (f".astype(mx.{dtype})" if dtype != "float32" else ""))
        else:  # token ids / indices: 0 is valid for any table
            args.append(f"mx.zeros({shape}, dtype=mx.{'bool_' if dtype == 'bool' else dtype})")
        if i < len(input_names) and input_names[i]:  # a keyword input (--input-shape name=...)
            args[-1] = f"{input_names[i]}={args[-1]}"
    layout_note = "  # channels-last input" if any("->" in (l or "") for l in input_layouts) else ""
    return ("Load it (no torch needed):\n"
            "  import mlx.core as mx, porter\n"
            f"  model = porter.load({output!r})\n"
            f"  y = model({', '.join(args)}){layout_note}")


def convert_example(ui, name, output, input_shapes, io_layout, no_validate, grads, force, dynamic="auto",
                    hub=None, dtype=None):
    """``--example NAME``: build the example with seeded weights, save a real state_dict checkpoint, convert it."""
    try:
        from porter import examples
    except ImportError as exc:
        raise InputError(f"The built-in examples are not available ({first_line(exc)}).",
                         "Install Porter with its conversion extras: pip install 'porter-mlx[convert]'.")
    builders = examples.EXAMPLES
    if name not in builders:
        raise InputError(f"--example '{name}' is not a built-in example (available: "
                         f"{', '.join(builders) or 'none'}).", "Pick one of those names.")
    output = output or f"{name}-mlx"
    checkpoint = os.path.join(os.path.dirname(output), f"{name}.pt")
    if os.path.lexists(checkpoint) and not force:
        raise InputError(f"Example checkpoint '{checkpoint}' already exists.",
                         "Pass --force to overwrite it (and the output directory), or choose another place "
                         "with -o DIR.")
    check_destination(output, force, [checkpoint])
    created = make_parents(os.path.dirname(os.path.abspath(checkpoint)))
    try:
        _save_example_checkpoint(builders[name], checkpoint)
        result = run_convert(ui, checkpoint, output, model_spec=f"porter.examples:{name}",
                             input_shapes=input_shapes or ("1,3,224,224",), io_layout=io_layout,
                             validate=not no_validate, grads=grads, force=force, dynamic=dynamic, hub=hub,
                             dtype=dtype)
    except BaseException:
        if os.path.exists(checkpoint):
            os.remove(checkpoint)  # a failed command leaves nothing behind
        remove_created(created)
        raise
    result["checkpoint"] = checkpoint
    ui.echo("")
    ui.echo(f"The torch checkpoint {checkpoint} holds {name} with seeded random weights (torch.manual_seed(0), "
            "no download); compare again any time with:\n"
            f"  porter validate {output} --against {checkpoint}")
    ui.emit_json(result)


def _save_example_checkpoint(builder, checkpoint):
    import torch

    torch.manual_seed(0)
    model = builder()
    import tempfile

    tmp = None
    try:  # mkstemp: an unpredictable name created O_EXCL, so no planted link at "<name>.tmp" is written through
        handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(checkpoint)}.tmp-",
                                       dir=os.path.dirname(os.path.abspath(checkpoint)))
        os.close(handle)
        torch.save(model.state_dict(), tmp)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, checkpoint)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(exc, OSError):
            raise InputError(f"Cannot write the example checkpoint '{checkpoint}': {exc.strerror}.",
                             "Run from a writable directory or choose one with -o DIR.")
        raise
