"""Hand-written MLX architectures that load torchvision-format checkpoints (``porter.zoo``).

Models are channels-last: input ``(N, H, W, 3)``, output ``(N, num_classes)``. Example::

    >>> from porter import zoo
    >>> zoo.list_models()[:2]
    ['mobilenet_v2', 'resnet18']
    >>> model = zoo.create("resnet18").load_checkpoint("resnet18.safetensors")

Importing this package never imports torch.
"""

from . import mobilenet, resnet, vgg  # noqa: F401  (importing a family registers its models)
from . import maxvit  # noqa: F401
from . import s3d  # noqa: F401
from . import swin  # noqa: F401
from . import video_resnet  # noqa: F401
from . import vit  # noqa: F401
from .registry import create, list_models, model_info, register_model

__all__ = ["create", "list_models", "model_info", "register_model"]
