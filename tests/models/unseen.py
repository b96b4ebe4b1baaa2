"""Registry of twins of architectures Porter was not written against (``tests/converters/test_unseen_models.py``).

``UNSEEN[name] = ModelSpec(builder, inputs, second_inputs)`` as :data:`tests.models.REGISTRY` (builder(seed) -> a
seeded eval-mode model; example and second input shapes, torch layout), kept apart from ``REGISTRY`` so the
coverage suites over it keep their run time. Each twin keeps its reference implementation's module structure and
``state_dict`` names (the module docstrings name the source); fixed buffers a real checkpoint holds (YOLO's DFL
``arange`` weight, Whisper's sinusoidal positions) keep their real values after the seeded randomisation.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from . import ModelSpec
from ._common import randomize_
from .dense_vit import dinov2_small, segformer_small
from .detection import yolov8_small
from .diffusion import unet2d_small
from .generative import dcgan_small, esrgan_small, espcn_small, stylegan2_small
from .sequence import crnn_small, pointnet_small, sinusoids, tcn_small, wavenet_small, whisper_encoder_small
from .vision_more import convlstm_small, mobilevit_small


def _seeded(make: Callable[[], nn.Module], fix: Callable[[nn.Module], None] = None) -> Callable[..., nn.Module]:
    def build(seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        model = randomize_(make(), seed)
        if fix is not None:
            with torch.no_grad():
                fix(model)
        return model

    build.__name__ = getattr(make, "__name__", "build")
    return build


def _real_dfl(model):
    dfl = model.model[-1].dfl.conv
    dfl.weight.copy_(torch.arange(dfl.in_channels, dtype=torch.float).view(1, -1, 1, 1))


def _real_positions(model):
    w = model.embed_positions.weight
    w.copy_(sinusoids(*w.shape))


UNSEEN = {
    # Two sizes the yolov8n graph takes (multiples of 32): square and 256x384, batch 1 and 2.
    "yolov8": ModelSpec(_seeded(yolov8_small, _real_dfl), ((1, 3, 320, 320),), ((2, 3, 256, 384),)),
    "unet2d": ModelSpec(_seeded(unet2d_small), ((2, 3, 16, 16), (2,)), ((1, 3, 24, 20), (1,))),
    # Pretrained on a 4x4 patch grid; both sizes resize the position embedding (6x5 and 7x4 patches).
    "dinov2": ModelSpec(_seeded(dinov2_small), ((2, 3, 24, 20),), ((1, 3, 28, 16),)),
    "segformer": ModelSpec(_seeded(segformer_small), ((2, 3, 64, 64),), ((1, 3, 48, 80),)),
    "whisper_encoder": ModelSpec(_seeded(whisper_encoder_small, _real_positions), ((2, 8, 40),), ((1, 8, 57),)),
    # The LSTM's sequence length is T = W / 4 + 1: the second width gives another length.
    "crnn": ModelSpec(_seeded(crnn_small), ((2, 1, 32, 40),), ((3, 1, 32, 57),)),
    "tcn": ModelSpec(_seeded(tcn_small), ((2, 3, 30),), ((1, 3, 17),)),
    "wavenet": ModelSpec(_seeded(wavenet_small), ((2, 1, 40),), ((1, 1, 23),)),
    "pointnet": ModelSpec(_seeded(pointnet_small), ((2, 3, 50),), ((3, 3, 37),)),
    "stylegan2": ModelSpec(_seeded(stylegan2_small), ((2, 16), (2, 1, 4, 4), (2, 1, 8, 8), (2, 1, 8, 8)),
                           ((3, 16), (3, 1, 4, 4), (3, 1, 8, 8), (3, 1, 8, 8))),
    "esrgan": ModelSpec(_seeded(esrgan_small), ((1, 3, 12, 12),), ((2, 3, 9, 13),)),
    "espcn": ModelSpec(_seeded(espcn_small), ((2, 1, 12, 12),), ((1, 1, 10, 7),)),
    # torch.export specializes a size-1 dim: the latent's 1x1 map is static (a 2x2 latent is refused; tested).
    "dcgan": ModelSpec(_seeded(dcgan_small), ((2, 8, 1, 1),), ((3, 8, 1, 1),)),
    # timm's MobileViT block: maps that are a multiple of the 2x2 patch skip its resize branch (the capture took
    # that branch: a 9x11 map is refused by name).
    "mobilevit": ModelSpec(_seeded(mobilevit_small), ((2, 3, 32, 32),), ((1, 3, 48, 40),)),
    # (B, T, C, H, W): the Python loop over time is unrolled for T = 4 (another length is refused; tested).
    "convlstm": ModelSpec(_seeded(convlstm_small), ((2, 4, 2, 6, 7),), ((3, 4, 2, 9, 5),)),
}
