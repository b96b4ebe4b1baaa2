"""Porter's MLX layers: torch.nn's conv and pooling layers, exact to torch, channels-last.

Every layer takes ``(N, *spatial, C)`` input (or unbatched ``(*spatial, C)`` where torch accepts unbatched input)
and has torch's class name, constructor arguments and defaults. Functional forms live in
:mod:`porter.layers.functional`.
"""

from .conv import Conv1d, Conv2d, Conv3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

__all__ = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
]
