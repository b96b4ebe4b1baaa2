"""From a checkpoint file and a description of its architecture to a torch model ready to convert, with inputs it
was checked to accept: what ``porter convert``, ``validate``, ``inspect`` and ``bench`` all start from."""

from dataclasses import dataclass, field

from .architecture import build_model, load_state_dict_strict, parse_model_kwargs, resolve_architecture
from .detect import describe_format
from .errors import CheckpointError
from .inputs import example_inputs, parse_input_shapes
from .load import STATE_DICT, load_checkpoint


@dataclass
class Source:
    """A torch model ready to convert, where it came from, and inputs it accepts.

    Attributes:
        path (str): the checkpoint file.
        model: torch.nn.Module, torch.jit.ScriptModule or torch.export.ExportedProgram (eval mode).
        example_inputs (tuple of torch.Tensor): inputs in torch layout the model was checked to accept.
        format (str): the file's format (``"torchscript"``, ``"export"``, ``"torch-save"``, ``"safetensors"``).
        kind (str): ``"module"`` (the file held the model) or ``"state_dict"`` (weights loaded into ``model_spec``).
        model_spec (str or None): ``"package.module:factory"`` built for a state_dict.
        model_kwargs (dict): the arguments it was called with.
        notes (list of str): what was done on the user's behalf (unwrapping, a guessed input shape).
    """

    path: str
    model: object
    example_inputs: tuple
    format: str
    kind: str
    model_spec: str = None
    model_kwargs: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def torch_module(self):
        """A callable torch nn.Module for this source (an ExportedProgram is unwrapped with ``.module()``)."""
        import torch

        if isinstance(self.model, torch.export.ExportedProgram):
            module = self.model.module()
            # The program's train/eval behaviour is baked into its graph and torch refuses .eval() on it; clear
            # the flag it carries so nothing reports "training mode" for what is an inference graph.
            for sub in module.modules():
                sub.training = False
            return module
        return self.model

    def metadata(self) -> dict:
        """What ``porter validate``/``bench`` need to rebuild the torch side later (stored in graph.json). The file
        by its name only: the folder is meant to be published, and the checkpoint's path would show the user's
        directories (``/home/alice/...``) in the model card."""
        import os

        return {"file": os.path.basename(self.path), "format": self.format, "kind": self.kind, "model": self.model_spec,
                "model_kwargs": self.model_kwargs,
                "input_shapes": [list(t.shape) for t in self.example_inputs],
                "input_names": list(getattr(self.example_inputs, "names", [None] * len(self.example_inputs)))}


def open_model(path, *, model=None, model_kwargs=None, arch=None, trust_pickle=False, input_shapes=(), seed=0,
               shapes_from="from --input-shape", format=None) -> Source:
    """Load the checkpoint ``path`` as a torch model with example inputs (imports torch).

    Args:
        path (str): a TorchScript archive, ``torch.export`` program, ``torch.save`` file or ``.safetensors``.
        model (str, optional): ``"package.module:factory"`` building the architecture of a state_dict (runs that
            code). Default: ``None``.
        model_kwargs (dict or str, optional): the factory's arguments (a dict or JSON text). Default: none.
        arch (str, optional): a built-in architecture instead of ``model`` (``architecture_names()``).
            Default: ``None``.
        trust_pickle (bool, optional): allow unpickling objects (runs code the file names). Default: ``False``.
        input_shapes (iterable, optional): torch-layout shapes, one per input, as int tuples or ``"1,3,224,224"``.
            Default: the shapes recorded in the file (``torch.export``), else inferred from the first weight.
        seed (int, optional): seed of the random example inputs. Default: ``0``.
        shapes_from (str, optional): where ``input_shapes`` came from, named in errors.
            Default: ``"from --input-shape"``.
        format (str, optional): the format :func:`detect_format` already returned for ``path``. Default: detect.
    Returns:
        Source: the model (eval mode), its checked example inputs, its format and notes.
    Raises:
        CheckpointError: any problem with the file, the architecture, the weights or the shapes, in one paragraph.

    Example::

        >>> src = porter.checkpoints.open_model("net.pt", model="mynet:Net", model_kwargs={"num_classes": 5},
        ...                                     input_shapes=[(1, 3, 64, 64)])
        >>> ported = porter.convert(src.model, src.example_inputs)
    """
    if model and arch:
        raise CheckpointError("--model and --arch both given.", "Use one: --arch NAME for a known architecture, or "
                              "--model package.module:factory for your own.")
    kwargs = parse_model_kwargs(model_kwargs)
    if model_kwargs is not None and not (model or arch):
        raise CheckpointError("--model-kwargs given without --model or --arch: they are the arguments of the "
                              "factory --model/--arch names.", "Give --model package.module:factory (or --arch NAME) "
                              "with them, or drop --model-kwargs.")
    shapes = parse_input_shapes(input_shapes, "--input-shape" if shapes_from == "from --input-shape" else
                                shapes_from)
    ckpt = load_checkpoint(path, trust_pickle=trust_pickle, format=format)
    spec = None
    if ckpt.kind == STATE_DICT:
        if not model and not arch:
            raise CheckpointError(f"Input file '{path}' holds only weights (a state_dict from a "
                                  f"{describe_format(ckpt.format)}); Porter needs the architecture to convert them.",
                                  "Name the code that builds the torch model with --model package.module:factory "
                                  "(e.g. --model torchvision.models:resnet18, --model mynet:Net) and its arguments "
                                  "with --model-kwargs JSON, or a known architecture with --arch NAME.")
        spec = model or resolve_architecture(arch)
        torch_model = build_model(spec, kwargs, "--model" if model else "--arch")
        load_state_dict_strict(torch_model, ckpt.state_dict, path, spec)
    else:
        if model or arch or model_kwargs is not None:
            raise CheckpointError(f"--model/--arch/--model-kwargs given, but '{path}' is a "
                                  f"{describe_format(ckpt.format)} that "
                                  "already contains the model.", "Drop --model/--arch (they are for state_dict "
                                  "checkpoints).")
        torch_model = ckpt.model
    source = Source(path, torch_model, (), ckpt.format, ckpt.kind, spec, kwargs, list(ckpt.notes))
    source.example_inputs, note = example_inputs(source.torch_module(), shapes, ckpt.example_inputs, seed=seed,
                                                 source=path, shapes_from=shapes_from)
    if note:
        source.notes.append(note)
    return source
