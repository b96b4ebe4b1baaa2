"""Porter's MLX layers: torch.nn's conv and pooling layers, exact to torch, channels-last.

Every layer takes ``(N, *spatial, C)`` input (or unbatched ``(*spatial, C)`` where torch accepts unbatched input)
and has torch's class name, constructor arguments and defaults. Functional forms live in
:mod:`porter.layers.functional`.
"""

from .adaptive_max import AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d
from .conv import Conv1d, Conv2d, Conv3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .fractional import FractionalMaxPool2d, FractionalMaxPool3d
from .max_pool import MaxPool1d, MaxPool2d, MaxPool3d
