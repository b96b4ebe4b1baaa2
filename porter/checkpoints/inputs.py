"""Example inputs for a torch model: from given shapes, from the file (``torch.export`` records them), or inferred
from the model's first weight; always checked by running the model on them once.

Shapes are torch's layout (``(N, C, H, W)``) and are refused before anything is allocated when they would not fit
in memory (:mod:`.budget`).
"""

from .budget import check_input_shapes
from .errors import CheckpointError, torch_error_line

# Input sizes used when no shape is given, by the rank of the first weight (conv1d/2d/3d; linear takes (1, in)).
GUESS_SPATIAL = {3: (128,), 4: (224, 224), 5: (16, 112, 112)}


def parse_input_shapes(values, option: str = "--input-shape") -> list:
    """Input shapes, one per model input, as int tuples.

    Args:
        values (iterable): each a tuple of ints or text ``"1,3,224,224"`` (``--input-shape``, repeatable).
        option (str, optional): where they came from, named in errors. Default: ``"--input-shape"``.
    Raises:
        CheckpointError: a shape that is not positive integers, or inputs that would not fit in memory.
    """
    shapes = []
    for value in values or ():
        if isinstance(value, (tuple, list)):
            shape = tuple(value) if all(isinstance(d, int) and not isinstance(d, bool) for d in value) else ()
        else:
            text = str(value)
            try:
                shape = tuple(int(part) for part in text.split(",")) if len(text) <= 200 else ()
            except ValueError:
                shape = ()
        if not shape or any(d <= 0 for d in shape):
            raise CheckpointError(f"{option} '{_text(value)}' is not a list of positive integers.",
                                  "Give the torch-layout shape of one input, e.g. --input-shape 1,3,224,224 (repeat "
                                  "the option for a model with several inputs).")
        shapes.append(shape)
    check_input_shapes(shapes, option)
    return shapes


def _text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def infer_input_shape(module, source: str = "the model"):
    """A batch-of-one input shape for ``module`` (torch layout), from its first parameter, and that parameter's name.

    A conv weight of rank 3/4/5 gives ``(1, C_in) + GUESS_SPATIAL[rank]`` (e.g. ``(1, 3, 224, 224)``); a linear
    weight ``(1, in_features)``. ``source`` names the model in the error.

    Raises:
        CheckpointError: the first parameter is of neither kind (or there is none): give the shape instead.
    """
    for name, param in module.named_parameters():
        if param.dim() in GUESS_SPATIAL:
            return (1, param.shape[1]) + GUESS_SPATIAL[param.dim()], name
        if param.dim() == 2:
            return (1, param.shape[1]), name
        break
    raise CheckpointError(f"Porter cannot guess the input shape of the model in '{source}'.",
                          "Pass it with --input-shape, e.g. --input-shape 1,3,224,224 (torch layout; repeat the "
                          "option for several inputs).")


def example_inputs(module, shapes, recorded=None, *, seed: int = 0, source: str = "the model",
                   shapes_from: str = "from --input-shape"):
    """Inputs ``module`` was checked to accept, and a note when the shape was inferred.

    Seeded ``randn`` of ``shapes`` when given, else the ``recorded`` inputs, else one input of
    :func:`infer_input_shape`. ``shapes_from`` says where ``shapes`` came from, in errors.

    Returns:
        (tuple of torch.Tensor, str or None): the inputs and a note for the user (set when the shape was guessed).
    Raises:
        CheckpointError: the model raises on the inputs; the message quotes torch's error and the shapes tried.
    """
    import torch

    guessed_from = note = None
    if shapes:
        generator = torch.Generator().manual_seed(seed)
        inputs = tuple(torch.randn(shape, generator=generator) for shape in shapes)
    elif recorded:
        inputs = tuple(recorded)
    else:
        shape, guessed_from = infer_input_shape(module, source)
        inputs = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)
        note = f"input shape {_fmt(shape)} guessed from '{guessed_from}'; set it with --input-shape"
    try:
        with torch.no_grad():
            module(*inputs)
    except Exception as exc:
        given = ", ".join(_fmt(t.shape) for t in inputs)
        origin = (f"guessed from the first weight '{guessed_from}'" if guessed_from else
                  "recorded in the file" if not shapes else shapes_from)
        raise CheckpointError(f"The model in '{source}' cannot take input of shape {given} ({origin}): torch "
                              f"raised {torch_error_line(exc)}.",
                              "Pass the torch-layout shape the model expects with --input-shape, e.g. --input-shape "
                              "1,3,224,224 (repeat it for several inputs).")
    return inputs, note


def _fmt(shape) -> str:
    return "(" + ",".join(str(int(d)) for d in shape) + ")"
