"""Reading a converted model directory (``model.safetensors`` + ``graph.json``) for validate and bench."""

import os
import re

from porter.converters.safe_text import printable

from .errors import InputError, first_line

GRAPH = "graph.json"
WEIGHTS = "model.safetensors"


def check_artifact(directory: str) -> None:
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.exists(directory) else "is not a directory"
        raise InputError(f"Converted model directory '{directory}' {what}.",
                         "Give the folder `porter convert` wrote (it holds graph.json and model.safetensors).")
    missing = [name for name in (GRAPH, WEIGHTS) if not os.path.lexists(os.path.join(directory, name))]
    if WEIGHTS in missing and os.path.lexists(os.path.join(directory, WEIGHTS + ".index.json")):
        missing.remove(WEIGHTS)  # sharded weights: the index names the shards (checked by porter.load)
    if missing:
        raise InputError(f"'{directory}' is not a converted Porter model: {' and '.join(missing)} missing.",
                         "Give the folder `porter convert` wrote, or convert the model again.")


def recorded_source(ported) -> dict:
    """What ``porter convert`` recorded about the source (file, format, architecture, input shapes), as plain
    checked data: ``model`` a string, ``model_kwargs`` a dict, ``input_shapes`` lists of positive ints; anything
    else is dropped. Never imported or executed here."""
    meta = ported.graph.get("metadata") or {}
    source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    out = {}
    if isinstance(source.get("model"), str) and re.fullmatch(r"[\w.]{1,200}:[\w.]{1,200}", source["model"]):
        out["model"] = source["model"]
    if isinstance(source.get("model_kwargs"), dict) and source["model_kwargs"]:
        out["model_kwargs"] = source["model_kwargs"]
    shapes = source.get("input_shapes")
    if (isinstance(shapes, list) and 0 < len(shapes) <= 64 and all(
            isinstance(s, list) and 0 < len(s) <= 8 and all(isinstance(d, int) and not isinstance(d, bool)
                                                            for d in s) for s in shapes)):
        out["input_shapes"] = shapes  # positivity and size are checked with the options (porter/checkpoints/budget.py)
    return out


def load_ported(directory: str, ui=None):
    """``porter.load(directory)`` with a clear error (never imports torch); arrays the model never uses are said
    as a note on ``ui`` (:func:`unused_note`), not as a Python warning."""
    check_artifact(directory)
    import warnings

    import porter

    from porter.converters.graph_budget import GraphLimitError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", porter.UnusedArraysWarning)
            ported = porter.load(directory)
        if ui is not None and ported.unused_params:
            ui.info(unused_note(directory, ported))
        return ported
    except GraphLimitError as exc:
        raise InputError(f"Refusing to load '{directory}': {first_line(exc)}.",
                         "Raise the bound only for a model you trust to need it (porter --max-graph-bytes N / "
                         "--max-graph-macs N before the command).")
    except (OSError, ValueError) as exc:
        raise InputError(f"Cannot load the converted model in '{directory}': {first_line(exc)}.",
                         "Convert the model again (and check the Porter version that wrote it).")


def recorded_model(directory, against, meta, command):
    """The recorded architecture when it is one of Porter's own (--arch/--example); otherwise refuse: importing
    code named by a file would run whatever its author chose."""
    spec = meta["model"]
    from porter.checkpoints import builtin_architecture

    if builtin_architecture(spec) is not None and not meta.get("model_kwargs"):
        return spec
    import json

    kwargs = f" --model-kwargs '{json.dumps(meta['model_kwargs'])}'" if meta.get("model_kwargs") else ""
    raise InputError(f"'{directory}' was converted from a state_dict with the architecture '{spec}'{kwargs}, but "
                     "Porter does not import code named by a converted model's files (a crafted graph.json could "
                     "name any code).", f"If you trust that code, name it yourself: porter {command} {directory} "
                     f"--against {against} --model {spec}{kwargs}")




def unused_note(directory: str, ported) -> str:
    names = [printable(n) for n in ported.unused_params]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (f"note: the weights in '{directory}' hold {len(names)} array(s) that no mapped layer or node of "
            f"graph.json uses (loaded, never computed with): {shown}")
