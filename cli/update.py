"""``porter update``: newer torch weights (a checkpoint of the same architecture) into a converted model folder."""

import os
import shutil
import stat

import click

from .artifact import load_ported
from .atomic import atomic_directory, check_destination
from .errors import InputError
from .ui import common_options

# what porter.save writes: never carried over from the old folder (stale weights shards, the old index)
_WRITTEN = ("graph.json", "config.json", "README.md", "model.safetensors.index.json")


def _written_by_save(name: str) -> bool:
    return name in _WRITTEN or (name.startswith("model") and name.endswith(".safetensors"))


@click.command("update", short_help="Load a newer torch checkpoint's weights into a converted model.",
               epilog="\b\nExit status: 0 success, 2 usage or input error (nothing written), 3 internal error.")
@click.argument("directory", metavar="DIR")
@click.argument("checkpoint", metavar="CHECKPOINT")
@click.option("-o", "--output", metavar="OUT",
              help="Write the updated model to this new folder. Default: replace DIR (atomically).")
@click.option("--force", is_flag=True, help="With -o: replace an existing converted model folder OUT.")
@click.option("--no-strict", "no_strict", is_flag=True,
              help="Load the keys that match and list the rest, instead of refusing missing or unexpected keys.")
@click.option("--trust-pickle", is_flag=True,
              help="Let CHECKPOINT unpickle Python objects (runs code it names: only for files you trust).")
@click.option("--max-shard-size", metavar="SIZE", default="5GiB", show_default=True,
              help="Split the weights into model-0000i-of-0000N.safetensors + an index past this size.")
@click.option("--base-model", metavar="OWNER/NAME", help="Hub repo id of the original model, for the model card.")
@click.option("--repo-id", metavar="OWNER/NAME",
              help="Hub repo id for the model card's usage snippet. Default: the output folder's name.")
@common_options()
def update(ui, directory, checkpoint, output, force, no_strict, trust_pickle, max_shard_size, base_model, repo_id):
    """Load the weights in CHECKPOINT (a state_dict, safetensors, TorchScript or torch.export file of the same
    architecture, e.g. the model trained further) into the converted model in DIR.

    Each weight goes through the layout transform its layer got at conversion; the model keeps its dtype. Missing
    or unexpected keys are refused unless --no-strict; a shape mismatch always is. The new folder is written
    completely before it replaces DIR (or OUT): on any failure the old folder is left as it was. Other files in DIR
    (a tokenizer, say) are kept when DIR is replaced.
    """
    from porter.checkpoints import detect_format

    from .convert import hub_options

    hub = hub_options(max_shard_size, base_model, repo_id)
    detect_format(checkpoint)  # a bad file fails fast, before the model is loaded
    in_place = output is None
    target = directory if in_place else output
    if in_place and force:
        raise InputError("--force is only used with -o.", "Without -o, DIR itself is replaced.")
    inputs = [checkpoint] + ([] if in_place else [directory])
    check_destination(target, force or in_place, inputs)
    ported = load_ported(directory)
    from porter.converters.weights_update import WeightsUpdateError
    from porter.update import read_state_dict

    with ui.progress(["loading checkpoint", "loading weights", "writing"]) as progress:
        with progress.step("loading checkpoint"):
            state, notes = read_state_dict(checkpoint, trust_pickle=trust_pickle)
        for note in notes:
            ui.info(f"note: {note}")
        with progress.step("loading weights"):
            try:
                missing, unexpected = ported.load_torch_state_dict(state, strict=not no_strict)
            except WeightsUpdateError as exc:
                details = ([f"missing: {k}" for k in exc.missing_keys] + [f"unexpected: {k}" for k in
                                                                          exc.unexpected_keys])
                raise InputError(f"Cannot load '{checkpoint}' into '{directory}': {exc}", details=details[:200])
        metadata = dict(ported.graph.get("metadata") or {})
        metadata.pop("validation", None)  # measured on the old weights
        metadata["weights_update"] = {"checkpoint": os.path.basename(os.path.abspath(checkpoint)),
                                      "missing_keys": missing[:1000], "unexpected_keys": unexpected[:1000]}
        import porter

        with progress.step("writing"):
            with atomic_directory(target, force or in_place, inputs) as tmp:
                porter.save(ported, tmp, metadata=metadata,
                            **{"repo_id": os.path.basename(os.path.abspath(target)), **hub})
                if in_place:
                    _carry_over(directory, tmp)
                porter.load(tmp)  # what was written loads back
    loaded = len(ported.graph["params"]) - len(missing)
    ui.echo(f"Updated '{target}' with the weights of '{checkpoint}'" + (f" (from '{directory}')" if not in_place
                                                                         else "") + ".")
    if missing:
        ui.echo(f"  kept (missing from the checkpoint): {', '.join(missing[:20])}"
                + (f", ... ({len(missing)} in all)" if len(missing) > 20 else ""))
    if unexpected:
        ui.echo(f"  ignored (not in the model): {', '.join(unexpected[:20])}"
                + (f", ... ({len(unexpected)} in all)" if len(unexpected) > 20 else ""))
    ui.echo(f"Check it against torch: porter validate {target} --against {checkpoint} (with --model/--arch for a "
            "state_dict).")
    ui.emit_json({"ok": True, "output": target, "checkpoint": checkpoint, "notes": notes, "loaded": loaded,
                  "missing_keys": missing, "unexpected_keys": unexpected})


def _carry_over(old: str, new: str) -> None:
    """Copy the old folder's other entries (files porter.save does not write) into the new folder, links as
    links (never followed). Anything else (a named pipe, a socket, a device: opening a pipe to copy it waits for a
    writer forever) is refused naming it, before DIR is replaced: dropping it would lose it with the old folder."""
    for name in sorted(os.listdir(old)):
        if _written_by_save(name) or os.path.lexists(os.path.join(new, name)):
            continue
        source, dest = os.path.join(old, name), os.path.join(new, name)
        if os.path.islink(source):
            os.symlink(os.readlink(source), dest)
        elif os.path.isdir(source):
            shutil.copytree(source, dest, symlinks=True, copy_function=_copy_regular)
        else:
            _copy_regular(source, dest)


def _copy_regular(source: str, dest: str) -> None:
    mode = os.lstat(source).st_mode
    if not stat.S_ISREG(mode):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device file"
        raise InputError(f"Cannot carry '{source}' over into the updated folder: it is {kind}, not a regular file, "
                         "folder or link; nothing was written.",
                         "Move it out of the folder, or write the update elsewhere with -o OUT.")
    shutil.copy2(source, dest)
