"""From what ``torch.save`` stored to a plain state_dict: training-checkpoint wrappers (``{"state_dict": ...,
"epoch": 3}``, ``{"model": ...}``) and whole-model prefixes (``module.`` from DataParallel, ``_orig_mod.`` from
``torch.compile``) are undone, each noted for the user."""

from .errors import CheckpointError

# Training scripts wrap the weights in a dict with bookkeeping next to them; these keys hold the weights.
WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module", "net", "weights")

# Prefixes a wrapper module adds to every key of its inner model's state_dict.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrap_state_dict(obj, source: str = "the checkpoint"):
    """The state_dict inside ``obj`` (what ``torch.load`` returned) and notes on what was unwrapped.

    Args:
        obj: a dict of name -> tensor, or a dict holding one under one of :data:`WRAPPER_KEYS`.
        source (str, optional): the file it came from, named in errors. Default: ``"the checkpoint"``.
    Returns:
        (dict, list[str]): name -> tensor with any common wrapper prefix stripped, and one note per change made.
    Raises:
        CheckpointError: ``obj`` holds no state_dict (a tensor, an empty dict, other objects), naming what it holds.
    """
    import torch

    notes = []
    state = obj
    if isinstance(obj, dict) and not _all_tensors(obj):
        for key in WRAPPER_KEYS:
            if isinstance(obj.get(key), dict) and obj[key] and _all_tensors(obj[key]):
                state = obj[key]
                notes.append(f"weights taken from the checkpoint's '{key}' entry")
                break
    if not isinstance(state, dict) or not state or not _all_tensors(state):
        if isinstance(obj, torch.Tensor):
            what = "a single tensor"
        elif isinstance(obj, dict):
            keys = ", ".join(repr(k) for k in list(obj)[:8]) + (", ..." if len(obj) > 8 else "")
            what = f"a dict with keys {keys}" if obj else "an empty dict"
        else:
            what = f"a {type(obj).__name__}"
        raise CheckpointError(f"Input file '{source}' holds {what}, not a state_dict (a dict of parameter name -> "
                              "tensor).", "Save `model.state_dict()` (or a dict holding it under 'state_dict' or "
                              "'model'), a TorchScript archive or a torch.export program.")
    state = dict(state)
    prefix = _common_wrapper_prefix(state)
    if prefix:
        state = {key[len(prefix):]: value for key, value in state.items()}
        notes.append(f"stripped the '{prefix}' prefix from every key (DataParallel/compile wrapper)")
    return state, notes


def _all_tensors(mapping: dict) -> bool:
    import torch

    return all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in mapping.items())


def _common_wrapper_prefix(state: dict) -> str:
    for prefix in WRAPPER_PREFIXES:
        if all(key.startswith(prefix) for key in state):
            return prefix
    return ""
