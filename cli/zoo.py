"""``porter zoo``: the hand-written MLX architectures (``porter.zoo``)."""

import click

from .errors import InputError
from .ui import common_options


def _registry():
    """(list_models, model_info) from porter.zoo, or None while the zoo has no registry."""
    import porter.zoo as zoo

    list_models = getattr(zoo, "list_models", None)
    model_info = getattr(zoo, "model_info", None)
    if callable(list_models) and callable(model_info):
        return list_models, model_info
    return None


@click.group(short_help="List and describe the MLX model zoo.")
def zoo():
    """Architectures written directly in MLX that load torchvision-format checkpoints."""


@zoo.command("list")
@common_options()
def zoo_list(ui):
    """List the zoo's architectures."""
    registry = _registry()
    names = list(registry[0]()) if registry else []
    if not names:
        ui.echo("The zoo is empty: no MLX architectures are registered yet. Convert your own model with "
                "`porter convert`.")
    for name in names:
        info = registry[1](name)
        summary = info.get("summary", "") if isinstance(info, dict) else getattr(info, "summary", "")
        ui.echo(f"{name:24s} {summary}".rstrip())
    ui.emit_json({"ok": True, "models": names})


@zoo.command("info")
@click.argument("name")
@common_options()
def zoo_info(ui, name):
    """Describe the zoo architecture NAME."""
    registry = _registry()
    names = list(registry[0]()) if registry else []
    if name not in names:
        known = ", ".join(names) if names else "the zoo is empty"
        raise InputError(f"'{name}' is not in the zoo ({known}).", "See `porter zoo list`.")
    info = registry[1](name)
    info = info if isinstance(info, dict) else dict(vars(info))
    for key, value in info.items():
        ui.echo(f"{key:16s} {value}")
    ui.emit_json({"ok": True, "name": name, **info})
