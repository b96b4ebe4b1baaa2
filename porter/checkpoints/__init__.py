"""``porter.checkpoints``: read a PyTorch checkpoint file safely and turn it into a torch model to convert.

What ``porter convert`` does with a file, as a Python API (the command adds option parsing and error display):

- :func:`detect_format`: the format from the file's bytes (no torch, nothing unpickled); non-regular files, zip
  bombs and corrupted archives are refused.
- :func:`load_checkpoint`: load it (``weights_only`` unpickling; pickled objects only with ``trust_pickle=True``),
  unwrapping training checkpoints (``{"state_dict": ...}``) and ``module.`` prefixes (:func:`unwrap_state_dict`).
- :func:`build_model`, :func:`resolve_architecture`, :func:`load_state_dict_strict`: the architecture of a
  state_dict (``"package.module:factory"`` or a built-in name) and strict loading naming every mismatched key.
- :func:`infer_input_shape`, :func:`example_inputs`: inputs the model accepts.
- :func:`open_model`: all of the above in one call, returning a :class:`Source`.

Every problem raises one :class:`CheckpointError` (a ``ValueError``) naming the file or argument and what to do.
Importing this package imports neither torch nor mlx. Example::

    >>> import porter.checkpoints as ckpts
    >>> src = ckpts.open_model("resnet.pth", arch="resnet18", input_shapes=[(1, 3, 224, 224)])
    >>> ported = porter.convert(src.model, src.example_inputs)
"""

from .architecture import (architecture_names, build_model, builtin_architecture, load_state_dict_strict,
                           parse_model_kwargs, resolve_architecture)
from .budget import check_checkpoint_size, check_input_shapes
from .detect import (EXPORT, FORMAT_NAMES, SAFETENSORS, TORCH_SAVE, TORCHSCRIPT, check_readable, describe_format,
                     detect_format)
from .errors import CheckpointError
from .inputs import example_inputs, infer_input_shape, parse_input_shapes
from .load import MODULE, STATE_DICT, Checkpoint, load_checkpoint
from .pt2 import refuse_pickled_entries
from .source import Source, open_model
from .unwrap import WRAPPER_KEYS, WRAPPER_PREFIXES, unwrap_state_dict

__all__ = [
    "CheckpointError", "Checkpoint", "Source",
    "TORCHSCRIPT", "EXPORT", "TORCH_SAVE", "SAFETENSORS", "FORMAT_NAMES", "MODULE", "STATE_DICT",
    "WRAPPER_KEYS", "WRAPPER_PREFIXES",
    "detect_format", "describe_format", "check_readable", "load_checkpoint", "refuse_pickled_entries",
    "unwrap_state_dict",
    "architecture_names", "resolve_architecture", "builtin_architecture", "build_model", "parse_model_kwargs",
    "load_state_dict_strict",
    "parse_input_shapes", "infer_input_shape", "example_inputs", "check_input_shapes", "check_checkpoint_size",
    "open_model",
]
