"""``porter zoo``: the hand-written MLX architectures (``porter.zoo``)."""

import click

from .errors import InputError
from .ui import common_options


@click.group(short_help="List and describe the MLX model zoo.")
def zoo():
    """Architectures written directly in MLX that load torchvision-format checkpoints."""


@zoo.command("list")
@common_options()
def zoo_list(ui):
    """List the zoo's architectures."""
    import porter.zoo as zoo

    names = zoo.list_models()
    if not names:
        ui.echo("The zoo is empty: no MLX architectures are registered yet. Convert your own model with "
                "`porter convert`.")
    for name in names:
        ui.echo(f"{name:24s} {zoo.entry(name).summary}".rstrip())
    ui.emit_json({"ok": True, "models": names})


@zoo.command("info")
@click.argument("name")
@common_options()
def zoo_info(ui, name):
    """Describe the zoo architecture NAME."""
    import porter.zoo as zoo

    names = zoo.list_models()
    if name not in names:
        known = ", ".join(names) if names else "the zoo is empty"
        raise InputError(f"'{name}' is not in the zoo ({known}).", "See `porter zoo list`.")
    info = zoo.model_info(name)
    for key, value in info.items():
        ui.echo(f"{key:16s} {value}")
    ui.emit_json({"ok": True, "name": name, **info})


@zoo.command("convert")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@click.option("--arch", required=True, help="The zoo architecture the checkpoint is for (see `porter zoo list`).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The .safetensors file to write (torchvision's names and layout; load_checkpoint reads it).")
@click.option("--num-classes", type=click.IntRange(1, 100_000), default=None,
              help="Classifier outputs of the checkpoint, when not the architecture's default (1 to 100000).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@common_options()
def zoo_convert(ui, checkpoint, arch, output, num_classes, force):
    """Check a torchvision-format CHECKPOINT (.pth/.pt/.bin, read without torch) against the zoo architecture
    --arch and write it as a .safetensors file."""
    import os

    import mlx.core as mx

    from porter.torch_files import UnsafeCheckpointError, load_state_dict

    from porter.zoo import list_models

    if arch not in list_models():
        raise InputError(f"--arch '{arch}' is not in the zoo.", "See `porter zoo list`.")
    if not output.endswith(".safetensors"):
        raise InputError(f"Output '{output}' must end in .safetensors.", "Choose another name with -o.")
    if os.path.lexists(output) and not force:
        raise InputError(f"Output '{output}' already exists.", "Pass --force to replace it.")
    from .atomic import check_file_destination

    check_file_destination(output, "-o")  # a missing or read-only folder: before reading the checkpoint
    try:
        state = load_state_dict(checkpoint)
    except (OSError, ValueError) as exc:  # CheckpointFormatError is a ValueError
        kind = "refused" if isinstance(exc, UnsafeCheckpointError) else "unreadable"
        raise InputError(f"Checkpoint '{checkpoint}' is {kind}: {exc}")
    from porter.zoo import create

    model = create(arch, **({} if num_classes is None else {"num_classes": num_classes}))
    try:
        model.load_torch_state_dict(state)
    except ValueError as exc:
        raise InputError(f"Checkpoint '{checkpoint}' does not match --arch '{arch}': {exc}",
                         "Check --arch (and --num-classes for a fine-tuned classifier).")
    # mx.save_safetensors appends .safetensors to other names: the temporary file keeps the suffix. mkstemp makes
    # it (O_EXCL, an unpredictable name): a link planted under a guessable name in a shared folder is never followed
    import tempfile

    try:
        handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(output)}.tmp-", suffix=".safetensors",
                                       dir=os.path.dirname(os.path.abspath(output)))
        os.close(handle)
    except OSError as exc:
        raise InputError(f"Cannot write '{output}' ({exc.strerror}).", "Choose another output with -o.")
    try:
        mx.save_safetensors(tmp, {k: v if isinstance(v, mx.array) else mx.array(v) for k, v in state.items()})
        from porter.converters.files import umask

        os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600 -> a normal file
        os.replace(tmp, output)
    except (OSError, RuntimeError) as exc:
        raise InputError(f"Cannot write '{output}' ({getattr(exc, 'strerror', None) or exc}).", "Choose another output with -o.")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    ui.echo(f"Wrote {output}: {len(state)} tensors of {arch} (torchvision names).")
    ui.emit_json({"ok": True, "output": output, "arch": arch, "tensors": len(state)})
