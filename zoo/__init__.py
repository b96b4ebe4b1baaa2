"""Hand-written MLX architectures that load torchvision-format checkpoints (``porter.zoo``).

Models are channels-last: input ``(N, H, W, 3)``, output ``(N, num_classes)``. Example::

    >>> from porter import zoo
    >>> zoo.list_models()[:2]
    ['mobilenet_v2', 'resnet18']
    >>> model = zoo.create("resnet18").load_checkpoint("resnet18.safetensors")

Importing this package never imports torch.
"""

# importing a family registers its models
from . import alexnet, densenet, googlenet, inception, mobilenet, resnet, squeezenet, vgg  # noqa: F401
from . import convnext, efficientnet, lraspp, mnasnet, mobilenetv3, regnet, shufflenetv2  # noqa: F401
from . import maxvit, s3d, swin, video_resnet, vit  # noqa: F401
from . import deeplabv3_mobilenet, segmentation  # noqa: F401
from .registry import ZooEntry, create, entry, list_models, model_info, register_model

__all__ = ["ZooEntry", "create", "entry", "list_models", "model_info", "register_model"]
