"""From a checkpoint file and the command's options to a ready torch model and example inputs.

Shared by convert, validate, inspect and bench so every command reads checkpoints the same way.
"""

from dataclasses import dataclass, field

from . import formats
from .architecture import arch_spec, build_model, load_strict, parse_model_kwargs
from .budget import check_input_shapes
from .errors import InputError, torch_error_line

# Input sizes used when --input-shape is not given, by the rank of the first weight (conv1d/2d/3d, linear).
_GUESS_SPATIAL = {3: (128,), 4: (224, 224), 5: (16, 112, 112)}


@dataclass
class Source:
    """A torch model ready to convert, where it came from, and inputs it accepts.

    Attributes:
        model: torch.nn.Module, torch.jit.ScriptModule or torch.export.ExportedProgram.
        example_inputs: tuple of torch tensors (torch layout) the model was checked to accept.
        format: checkpoint format (formats.TORCHSCRIPT, ...).
        kind: "module" or formats.STATE_DICT.
        model_spec: ``package.module:factory`` used for a state_dict, else None.
        model_kwargs: arguments given to the factory.
        notes: things done on the user's behalf.
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
        """What ``porter validate``/``bench`` need to rebuild the torch side later (stored in graph.json)."""
        return {"file": self.path, "format": self.format, "kind": self.kind, "model": self.model_spec,
                "model_kwargs": self.model_kwargs,
                "input_shapes": [list(t.shape) for t in self.example_inputs]}


def parse_input_shapes(values, option="--input-shape"):
    """``--input-shape 1,3,224,224`` (repeatable, one per model input) -> list of int tuples, refused before
    anything is allocated when they would not fit in memory (``option`` names where they came from)."""
    shapes = []
    for text in values or ():
        try:
            shape = tuple(int(part) for part in str(text).split(",")) if len(str(text)) <= 200 else ()
        except ValueError:
            shape = ()
        if not shape or any(d <= 0 for d in shape):
            raise InputError(f"{option} '{text}' is not a list of positive integers.",
                             "Give the torch-layout shape of one input, e.g. --input-shape 1,3,224,224 (repeat "
                             "the option for a model with several inputs).")
        shapes.append(shape)
    check_input_shapes(shapes, option)
    return shapes


def open_source(path, *, model=None, model_kwargs=None, arch=None, trust_pickle=False, input_shapes=(),
                seed=0, shape_origin="from --input-shape") -> Source:
    """Load ``path`` with the architecture options and check the model accepts the example inputs."""
    if model and arch:
        raise InputError("--model and --arch both given.", "Use one: --arch NAME for a known architecture, or "
                         "--model package.module:factory for your own.")
    kwargs = parse_model_kwargs(model_kwargs)
    shapes = parse_input_shapes(input_shapes, "--input-shape" if shape_origin == "from --input-shape" else
                                shape_origin)
    ckpt = formats.load_checkpoint(path, trust_pickle=trust_pickle)
    spec = None
    if ckpt.kind == formats.STATE_DICT:
        if not model and not arch:
            raise InputError(f"Input file '{path}' holds only weights (a state_dict from a "
                             f"{formats.describe(ckpt.format)}); Porter needs the architecture to convert them.",
                             "Name the code that builds the torch model with --model package.module:factory "
                             "(e.g. --model torchvision.models:resnet18, --model mynet:Net) and its arguments with "
                             "--model-kwargs JSON, or a known architecture with --arch NAME.")
        spec = model or arch_spec(arch)
        torch_model = build_model(spec, kwargs, "--model" if model else "--arch")
        load_strict(torch_model, ckpt.state_dict, path, spec)
    else:
        if model or arch:
            raise InputError(f"--model/--arch given, but '{path}' is a {formats.describe(ckpt.format)} that "
                             "already contains the model.", "Drop --model/--arch (they are for state_dict "
                             "checkpoints).")
        torch_model = ckpt.model
    source = Source(path, torch_model, (), ckpt.format, ckpt.kind, spec, kwargs, list(ckpt.notes))
    source.example_inputs = _example_inputs(source, shapes, ckpt.example_inputs, seed, shape_origin)
    return source


def _example_inputs(source: Source, shapes, recorded, seed, shape_origin):
    import torch

    guessed_from = None
    if shapes:
        generator = torch.Generator().manual_seed(seed)
        inputs = tuple(torch.randn(shape, generator=generator) for shape in shapes)
    elif recorded:
        inputs = tuple(recorded)
    else:
        shape, guessed_from = _guess_shape(source)
        inputs = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)
        source.notes.append(f"input shape {_fmt(shape)} guessed from '{guessed_from}'; set it with --input-shape")
    try:
        with torch.no_grad():
            source.torch_module()(*inputs)
    except Exception as exc:
        given = ", ".join(_fmt(t.shape) for t in inputs)
        origin = (f"guessed from the first weight '{guessed_from}'" if guessed_from else
                  "recorded in the file" if not shapes else shape_origin)
        raise InputError(f"The model in '{source.path}' cannot take input of shape {given} ({origin}): torch "
                         f"raised {torch_error_line(exc)}.",
                         "Pass the torch-layout shape the model expects with --input-shape, e.g. --input-shape "
                         "1,3,224,224 (repeat it for several inputs).")
    return inputs


def _guess_shape(source: Source):
    module = source.torch_module()
    for name, param in module.named_parameters():
        if param.dim() in _GUESS_SPATIAL:
            return (1, param.shape[1]) + _GUESS_SPATIAL[param.dim()], name
        if param.dim() == 2:
            return (1, param.shape[1]), name
        break
    raise InputError(f"Porter cannot guess the input shape of the model in '{source.path}'.",
                     "Pass it with --input-shape, e.g. --input-shape 1,3,224,224 (torch layout; repeat the option "
                     "for several inputs).")


def _fmt(shape) -> str:
    return "(" + ",".join(str(int(d)) for d in shape) + ")"
