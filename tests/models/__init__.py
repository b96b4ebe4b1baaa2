"""Registry of torch reference models for the converter coverage tests (issue 3's coverage list).

``REGISTRY[name] = ModelSpec(builder, inputs, second_inputs)``:
    builder: ``builder(seed=0) -> nn.Module`` in eval mode with seeded random weights and BatchNorm statistics.
    inputs: the example input shapes (a tuple of shapes, torch layout), used for conversion.
    second_inputs: shapes of a second, different input size the model accepts (other spatial size and batch;
        batch only where the architecture fixes the spatial size, as ViT's position embedding does), or ``None``
        when no other size is possible.

Every model keeps torchvision's module structure and ``state_dict`` names where torchvision has the
architecture, at small width and depth so the coverage test stays fast.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Optional, Tuple

import torch
from torch import nn

from porter.examples import BasicBlock, Bottleneck, ResNet

from ._common import randomize_
from .branchy import densenet_small, googlenet_small
from .classic import alexnet_small, squeezenet_small, vgg_bn_small
from .mobile import efficientnet_small, mobilenet_v2_small, mobilenet_v3_small
from .modern import convnext_small, regnet_small, shufflenet_v2_small
from .segmentation import deeplabv3_small, monai_unet3d_small, segnet_small, unet_small
from .shape_guarded import basic_unet_small
from .speech import hifigan_small, wav2vec2_small
from .text import bert_small, gpt2_small, llama_small, t5_small
from .video_audio import audio_cnn_small, r3d_small
from .vit import vit_small

Shapes = Tuple[Tuple[int, ...], ...]


class ModelSpec(NamedTuple):
    builder: Callable[..., nn.Module]
    inputs: Shapes
    second_inputs: Optional[Shapes]


def _seeded(make: Callable[[], nn.Module]) -> Callable[..., nn.Module]:
    def build(seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return randomize_(make(), seed)

    build.__name__ = getattr(make, "__name__", "build")
    return build


def make_inputs(shapes: Shapes, seed: int = 0) -> Tuple[torch.Tensor, ...]:
    """Seeded standard-normal float32 inputs of the given torch-layout shapes."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen) for s in shapes)


def _img(n: int, size: int, c: int = 3) -> Shapes:
    return ((n, c, size, size),)


REGISTRY = {
    "resnet_basic": ModelSpec(
        _seeded(partial(ResNet, BasicBlock, [2, 1, 1, 1], num_classes=10, widths=(8, 16, 16, 32))),
        _img(2, 32), _img(1, 45)),
    "resnet_bottleneck": ModelSpec(
        _seeded(partial(ResNet, Bottleneck, [1, 2, 1, 1], num_classes=10, widths=(4, 8, 8, 8))),
        _img(2, 32), _img(1, 45)),
    "vgg_bn": ModelSpec(_seeded(vgg_bn_small), _img(2, 32), _img(1, 48)),
    "alexnet": ModelSpec(_seeded(alexnet_small), _img(2, 96), _img(1, 127)),
    "squeezenet": ModelSpec(_seeded(squeezenet_small), _img(2, 33), _img(1, 45)),
    "densenet": ModelSpec(_seeded(densenet_small), _img(2, 32), _img(1, 45)),
    "googlenet": ModelSpec(_seeded(googlenet_small), _img(2, 64), _img(1, 50)),
    "mobilenet_v2": ModelSpec(_seeded(mobilenet_v2_small), _img(2, 32), _img(1, 45)),
    "mobilenet_v3": ModelSpec(_seeded(mobilenet_v3_small), _img(2, 32), _img(1, 45)),
    "efficientnet": ModelSpec(_seeded(efficientnet_small), _img(2, 32), _img(1, 45)),
    "shufflenet_v2": ModelSpec(_seeded(shufflenet_v2_small), _img(2, 64), _img(1, 50)),
    "convnext": ModelSpec(_seeded(convnext_small), _img(2, 32), _img(1, 48)),
    "regnet": ModelSpec(_seeded(regnet_small), _img(2, 32), _img(1, 45)),
    # The position embedding fixes the image size: the second input differs in batch size only.
    "vit": ModelSpec(_seeded(vit_small), _img(2, 32), _img(3, 32)),
    "r3d": ModelSpec(_seeded(r3d_small), ((1, 3, 4, 32, 32),), ((2, 3, 3, 24, 24),)),
    "audio_cnn": ModelSpec(_seeded(audio_cnn_small), ((2, 1, 8000),), ((1, 1, 6001),)),
    "segnet_unpool": ModelSpec(_seeded(segnet_small), _img(2, 32), _img(1, 30)),
    "deeplabv3": ModelSpec(_seeded(deeplabv3_small), _img(2, 32), _img(1, 40)),
    "unet": ModelSpec(_seeded(unet_small), _img(2, 32), _img(1, 48)),
    # Issue 11: patterns of popular model families (text models take float token embeddings; BERT a mask score)
    "bert": ModelSpec(_seeded(bert_small), ((2, 6, 16), (2, 6)), ((3, 9, 16), (3, 9))),
    "gpt2": ModelSpec(_seeded(gpt2_small), ((2, 7, 16),), ((1, 11, 16),)),
    # 20 tokens: relative distances past both bucket thresholds (8 bidirectional, 16 causal) take the log path
    "t5": ModelSpec(_seeded(t5_small), ((2, 7, 16),), ((3, 20, 16),)),
    "llama": ModelSpec(_seeded(llama_small), ((2, 6, 16),), ((1, 9, 16),)),
    "wav2vec2": ModelSpec(_seeded(wav2vec2_small), ((2, 400),), ((1, 333),)),
    "hifigan": ModelSpec(_seeded(hifigan_small), ((2, 8, 12),), ((1, 8, 17),)),
    "monai_unet3d": ModelSpec(_seeded(monai_unet3d_small), ((2, 1, 8, 8, 8),), ((1, 1, 12, 10, 6),)),
    # MONAI BasicUNet's UpCat pads odd sizes before the skip concatenation: converted at an odd size, it runs at
    # other odd sizes (even ones are refused by the port's input checks: tests/converters/test_input_checks.py).
    "basic_unet": ModelSpec(_seeded(basic_unet_small), ((1, 3, 17, 15),), ((2, 3, 21, 19),)),
}
