"""Functional forms of Porter's layers, with torch.nn.functional's names and argument order (channels-last)."""

from .adaptive_max import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d
from .conv import conv1d, conv2d, conv3d
from .conv_transpose import conv_transpose1d, conv_transpose2d, conv_transpose3d
from .fractional import fractional_max_pool2d, fractional_max_pool3d
from .max_pool import max_pool1d, max_pool2d, max_pool3d
from .padding import pad
