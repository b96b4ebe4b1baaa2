"""Porter's MLX layers: torch.nn's conv, pooling and activation layers, exact to torch, channels-last.

Every layer takes ``(N, *spatial, C)`` input (or unbatched ``(*spatial, C)`` where torch accepts unbatched input)
and has torch's class name, constructor arguments and defaults. Functional forms live in
:mod:`porter.layers.functional`.
"""

from ._export import active as exporting
from ._export import export_mode
from ._export import note as export_note
from ._grad_order import gated as gradient_order_gate
from ._native import status as native_status
from .activation import GELU, Hardsigmoid, Hardswish, Sigmoid, SiLU, Softmax, Tanh
from .adaptive_avg import AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d
from .adaptive_max import AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d
from .avg_pool import AvgPool1d, AvgPool2d, AvgPool3d
from .conv import Conv1d, Conv2d, Conv3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .layer_norm import GroupNorm, InstanceNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LayerNorm
from .fractional import FractionalMaxPool2d, FractionalMaxPool3d
from .linear import Linear
from .lp_pool import LPPool1d, LPPool2d, LPPool3d
from .max_pool import MaxPool1d, MaxPool2d, MaxPool3d
from .norm import BatchNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d
from .quantize import QuantizationReport, quantize_model
from .quantized_conv import QuantizedConv1d, QuantizedConv2d, QuantizedConv3d
from .rms_norm import RMSNorm
from .unpool import MaxUnpool1d, MaxUnpool2d, MaxUnpool3d
from .weight_cache import no_weight_cache
