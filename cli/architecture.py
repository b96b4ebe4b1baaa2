"""The torch architecture a state_dict belongs to: ``--model package.module:factory`` or ``--arch NAME``.

A state_dict holds weights only; to convert it Porter builds the torch model that owns them and loads the weights
strictly, listing every missing, unexpected and mis-shaped key by name.
"""

import importlib
import json
import os
import sys

from .errors import InputError, first_line


def parse_model_kwargs(text):
    """``--model-kwargs`` JSON -> dict (None -> {})."""
    if not text:
        return {}
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--model-kwargs is not valid JSON: {exc.msg} at character {exc.pos}.",
                         """Give a JSON object, e.g. --model-kwargs '{"num_classes": 10}'.""")
    if not isinstance(kwargs, dict):
        raise InputError(f"--model-kwargs must be a JSON object, got {type(kwargs).__name__}.",
                         """Give a JSON object, e.g. --model-kwargs '{"num_classes": 10}'.""")
    return kwargs


def arch_names():
    """Architecture names accepted by ``--arch``: the zoo's, then Porter's built-in examples."""
    names = []
    zoo = _zoo_api()
    if zoo is not None:
        names.extend(zoo.list_models())
    try:
        from porter import examples
    except ImportError:
        examples = None
    if examples is not None:
        names.extend(n for n in getattr(examples, "EXAMPLES", {}) if n not in names)
    return names


def _zoo_api():
    import porter.zoo as zoo

    if callable(getattr(zoo, "list_models", None)) and callable(getattr(zoo, "model_info", None)):
        return zoo
    return None


def arch_spec(name: str) -> str:
    """``--arch NAME`` -> the ``package.module:factory`` of the torch model it names."""
    zoo = _zoo_api()
    if zoo is not None and name in zoo.list_models():
        info = zoo.model_info(name)
        spec = info.get("torch_model") if isinstance(info, dict) else getattr(info, "torch_model", None)
        if spec:
            return spec
    try:
        from porter import examples
    except ImportError:
        examples = None
    if examples is not None and name in getattr(examples, "EXAMPLES", {}):
        return f"porter.examples:{name}"
    known = ", ".join(arch_names()) or "none available yet"
    raise InputError(f"--arch '{name}' is not an architecture Porter knows (known: {known}).",
                     "Give your own with --model package.module:factory instead.")


def builtin_arch(spec: str):
    """The ``--arch`` name whose architecture is ``spec`` (Porter's own code), or None."""
    for name in arch_names():
        try:
            if arch_spec(name) == spec:
                return name
        except InputError:
            continue
    return None


def build_model(spec: str, kwargs: dict, option: str = "--model"):
    """Import ``package.module:factory`` and call it with ``kwargs``; returns the torch module in eval mode."""
    import torch

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{option} '{spec}' is not of the form package.module:factory.",
                         "Name the module and the class or function that builds the model, e.g. "
                         "--model torchvision.models:resnet18 or --model mynet:Net (mynet.py in the current "
                         "directory).")
    # `--model mynet:Net` should find mynet.py in the current directory, as `python -c` would.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{option} '{spec}': cannot import module '{module_name}' ({first_line(exc)}).",
                         "Check the spelling, install the package, or run porter from the directory holding the "
                         "file.")
    except Exception as exc:
        raise InputError(f"{option} '{spec}': importing module '{module_name}' failed with "
                         f"{type(exc).__name__}: {first_line(exc)}.", "Fix the error in that module.")
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise InputError(f"{option} '{spec}': module '{module_name}' has no attribute '{attr}'.",
                             "Name a class or function defined in that module.")
    if not callable(factory):
        raise InputError(f"{option} '{spec}': '{attr}' is not a class or function.",
                         "Name the class or function that builds the model.")
    try:
        model = factory(**kwargs)
    except TypeError as exc:
        raise InputError(f"{option} '{spec}' could not be called with --model-kwargs {json.dumps(kwargs)}: "
                         f"{first_line(exc)}.", "Pass the arguments it takes as a JSON object in --model-kwargs.")
    except Exception as exc:
        raise InputError(f"{option} '{spec}' raised {type(exc).__name__} while building the model: "
                         f"{first_line(exc)}.", "Check --model-kwargs and the factory.")
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{option} '{spec}' returned a {type(model).__name__}, not a torch.nn.Module.",
                         "Name the class or function that builds the torch model.")
    return model.eval()


def load_strict(model, state_dict: dict, source: str, spec: str):
    """Load ``state_dict`` into ``model``, refusing any mismatch and listing every offending key by name."""
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
        raise InputError(f"The weights in '{source}' do not match the architecture {spec} ({counts} keys).",
                         "Check that --model/--arch and --model-kwargs (e.g. num_classes) describe the model that "
                         "saved these weights.", details)
    try:
        model.load_state_dict(state_dict, strict=True)
    except Exception as exc:
        raise InputError(f"Loading the weights in '{source}' into {spec} failed: {first_line(exc)}.",
                         "Check that the checkpoint was saved from this architecture.")
    return model
