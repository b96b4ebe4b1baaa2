"""The models ``benchmarks/models.py`` times: one per torchvision family at its standard input, by group.

``register(name, builder, chw, group)``: ``builder`` is ``"module:function"`` (no arguments, returns the torch
model; ``benchmarks.twins:build`` with ``kwargs={"name": ...}`` for the twins of ``tests/zoo/twins``), ``chw`` the
input shape without the batch (torch layout), ``group`` one of :data:`GROUPS`. Input sizes are torchvision's eval
crops (Inception-V3 299, EfficientNet-V2-S 384, Swin-V2-T 256); segmentation runs at 224x224 (torchvision resizes
to 520: four times the pixels, too slow for a sweep at batch 8), video at 16 frames of 112x112 (S3D 16x224x224).
"""

from __future__ import annotations

GROUPS = ("classification", "video", "segmentation")
MODELS: dict = {}


def register(name: str, builder: str, chw: tuple, group: str, zoo: str | None = None, kwargs: dict | None = None):
    """Add a model; ``zoo`` names a ``porter.zoo`` model that loads the same state_dict (for ``--path zoo``)."""
    if name in MODELS or name in GROUPS or name == "all":
        raise ValueError(f"[benchmarks.model_list] model {name!r} is already registered or is a group name")
    if group not in GROUPS:
        raise ValueError(f"[benchmarks.model_list] 'group' must be one of {GROUPS} but got {group!r}")
    MODELS[name] = dict(builder=builder, builder_kwargs=dict(kwargs or {}), chw=tuple(chw), group=group, zoo=zoo)


def _twin(name: str, chw: tuple, group: str, zoo: str | None = None) -> None:
    register(name, "benchmarks.twins:build", chw, group, zoo=zoo, kwargs={"name": name})


IMAGE = (3, 224, 224)
VIDEO = (3, 16, 112, 112)
register("resnet18", "porter.examples:resnet18", IMAGE, "classification", zoo="resnet18")
register("resnet50", "porter.examples:resnet50", IMAGE, "classification")
register("mobilenet_v2", "porter.examples:mobilenet_v2", IMAGE, "classification", zoo="mobilenet_v2")
for _name, _chw in [("alexnet", IMAGE), ("vgg11_bn", IMAGE), ("resnext50_32x4d", IMAGE), ("wide_resnet50_2", IMAGE),
                    ("densenet121", IMAGE), ("googlenet", IMAGE), ("inception_v3", (3, 299, 299)),
                    ("squeezenet1_0", IMAGE), ("mobilenet_v3_large", IMAGE), ("mnasnet1_0", IMAGE),
                    ("shufflenet_v2_x1_0", IMAGE), ("efficientnet_b0", IMAGE), ("efficientnet_v2_s", (3, 384, 384)),
                    ("regnet_y_400mf", IMAGE), ("regnet_x_400mf", IMAGE), ("convnext_tiny", IMAGE),
                    ("vit_b_16", IMAGE), ("swin_t", IMAGE), ("swin_v2_t", (3, 256, 256)), ("maxvit_t", IMAGE)]:
    _twin(_name, _chw, "classification")
for _name in ("r3d_18", "mc3_18", "r2plus1d_18"):
    _twin(_name, VIDEO, "video")
_twin("s3d", (3, 16, 224, 224), "video")
for _name in ("fcn_resnet50", "deeplabv3_resnet50", "lraspp_mobilenet_v3_large"):
    _twin(_name, IMAGE, "segmentation")


def select(names: str) -> list:
    """``"all"``, group names and model names, comma-separated, in order, each model once."""
    chosen = []
    for item in (n.strip() for n in names.split(",") if n.strip()):
        if item == "all":
            found = list(MODELS)
        elif item in GROUPS:
            found = [n for n, m in MODELS.items() if m["group"] == item]
        elif item in MODELS:
            found = [item]
        else:
            raise ValueError(f"--models: unknown model or group {item!r}; groups: all, {', '.join(GROUPS)}; "
                             f"models: {', '.join(MODELS)}")
        chosen += [n for n in found if n not in chosen]
    if not chosen:
        raise ValueError("--models: no model named")
    return chosen
