"""The torch architecture a state_dict belongs to, and strict loading of the weights into it.

An architecture is named as ``"package.module:factory"`` (a class or function, imported and called with keyword
arguments) or as a built-in name: a zoo model's (``porter.zoo``; its entry names the torch model whose
``state_dict`` format it loads) or one of Porter's torch examples (``porter.examples``). Weights are loaded
strictly: every missing, unexpected and mis-shaped key is listed by name.
"""

import importlib
import json
import os
import sys

from .errors import CheckpointError, first_line


def parse_model_kwargs(kwargs):
    """The factory's keyword arguments: a dict, JSON text of an object (``--model-kwargs``), or None (-> ``{}``)."""
    if kwargs is None or isinstance(kwargs, dict):
        return dict(kwargs or {})
    if not isinstance(kwargs, str):
        raise CheckpointError(f"--model-kwargs must be a dict or JSON text, got {type(kwargs).__name__}.",
                              """Give a JSON object, e.g. --model-kwargs '{"num_classes": 10}'.""")
    if not kwargs:
        return {}
    try:
        parsed = json.loads(kwargs)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"--model-kwargs is not valid JSON: {exc.msg} at character {exc.pos}.",
                              """Give a JSON object, e.g. --model-kwargs '{"num_classes": 10}'.""")
    if not isinstance(parsed, dict):
        raise CheckpointError(f"--model-kwargs must be a JSON object, got {type(parsed).__name__}.",
                              """Give a JSON object, e.g. --model-kwargs '{"num_classes": 10}'.""")
    return parsed


def _examples() -> dict:
    from porter.examples import EXAMPLES  # imports torch

    return EXAMPLES


def architecture_names() -> list:
    """Names accepted as ``arch``: the zoo's, then Porter's torch examples not already in the zoo."""
    import porter.zoo as zoo

    names = zoo.list_models()
    return names + [name for name in _examples() if name not in names]


def resolve_architecture(name: str) -> str:
    """A built-in architecture name (``--arch NAME``) -> the ``"package.module:factory"`` of its torch model.

    Raises:
        CheckpointError: ``name`` is not built in; the message lists the names that are.
    """
    import porter.zoo as zoo

    if name in zoo.list_models():
        return zoo.entry(name).torch_model
    if name in _examples():
        return f"porter.examples:{name}"
    raise CheckpointError(f"--arch '{name}' is not an architecture Porter knows (known: "
                          f"{', '.join(architecture_names())}).",
                          "Give your own with --model package.module:factory instead.")


def builtin_architecture(spec: str):
    """The built-in name whose torch model is ``spec`` (Porter's own code, safe to import), or None."""
    import porter.zoo as zoo

    for name in zoo.list_models():
        if zoo.entry(name).torch_model == spec:
            return name
    return next((name for name in _examples() if f"porter.examples:{name}" == spec), None)


def build_model(spec: str, kwargs: dict = None, option: str = "--model"):
    """Import ``package.module:factory`` and call it with ``kwargs``; returns the torch module in eval mode.

    ``option`` names where ``spec`` came from in errors. The current directory is importable, as with
    ``python -c`` (``"mynet:Net"`` finds ``./mynet.py``). Running the factory runs that code: name only code
    you trust.
    """
    kwargs = parse_model_kwargs(kwargs)
    import torch

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CheckpointError(f"{option} '{spec}' is not of the form package.module:factory.",
                              "Name the module and the class or function that builds the model, e.g. "
                              "--model torchvision.models:resnet18 or --model mynet:Net (mynet.py in the current "
                              "directory).")
    # `--model mynet:Net` should find mynet.py in the current directory, as `python -c` would.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CheckpointError(f"{option} '{spec}': cannot import module '{module_name}' ({first_line(exc)}).",
                              "Check the spelling, install the package, or run porter from the directory holding the "
                              "file.")
    except Exception as exc:
        raise CheckpointError(f"{option} '{spec}': importing module '{module_name}' failed with "
                              f"{type(exc).__name__}: {first_line(exc)}.", "Fix the error in that module.")
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise CheckpointError(f"{option} '{spec}': module '{module_name}' has no attribute '{attr}'.",
                                  "Name a class or function defined in that module.")
    if not callable(factory):
        raise CheckpointError(f"{option} '{spec}': '{attr}' is not a class or function.",
                              "Name the class or function that builds the model.")
    try:
        model = factory(**kwargs)
    except TypeError as exc:
        raise CheckpointError(f"{option} '{spec}' could not be called with --model-kwargs {json.dumps(kwargs)}: "
                              f"{first_line(exc)}.", "Pass the arguments it takes as a JSON object in --model-kwargs.")
    except Exception as exc:
        raise CheckpointError(f"{option} '{spec}' raised {type(exc).__name__} while building the model: "
                              f"{first_line(exc)}.", "Check --model-kwargs and the factory.")
    if not isinstance(model, torch.nn.Module):
        raise CheckpointError(f"{option} '{spec}' returned a {type(model).__name__}, not a torch.nn.Module.",
                              "Name the class or function that builds the torch model.")
    return model.eval()


def load_state_dict_strict(model, state_dict: dict, source: str = "the checkpoint", spec: str = None):
    """Load ``state_dict`` into the torch ``model``, refusing any mismatch and listing every offending key by name.

    ``source`` (the file) and ``spec`` (the architecture; default: the model's class) are named in the error.
    Returns the model.
    """
    spec = spec or type(model).__name__
    expected = model.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    mismatched = [f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {tuple(expected[k].shape)}"
                  for k in expected if k in state_dict and tuple(state_dict[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or mismatched:
        details = ([f"missing from the checkpoint: {k}" for k in missing]
                   + [f"unexpected in the checkpoint: {k}" for k in unexpected]
                   + [f"shape mismatch {m}" for m in mismatched])
        counts = ", ".join(f"{n} {what}" for n, what in ((len(missing), "missing"), (len(unexpected), "unexpected"),
                                                      (len(mismatched), "mis-shaped")) if n)
        raise CheckpointError(f"The weights in '{source}' do not match the architecture {spec} ({counts} keys).",
                              "Check that --model/--arch and --model-kwargs (e.g. num_classes) describe the model that "
                              "saved these weights.", details)
    try:
        model.load_state_dict(state_dict, strict=True)
    except Exception as exc:
        raise CheckpointError(f"Loading the weights in '{source}' into {spec} failed: {first_line(exc)}.",
                              "Check that the checkpoint was saved from this architecture.")
    return model
