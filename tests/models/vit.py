"""A small Vision Transformer with torchvision's module names (conv_proj, class_token, encoder.*, heads.head).

The class is the zoo tests' torchvision twin (``tests/zoo/twins/vit.py``); here with a representation head.
"""

from __future__ import annotations

from tests.zoo.twins.vit import VisionTransformer


def vit_small(num_classes: int = 10) -> VisionTransformer:
    """32x32 images in 8x8 patches, two layers of four heads, hidden 32, MLP 64, pre-logits 24 (tanh)."""
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
                             num_classes=num_classes, representation_size=24)
