"""Cases for the zoo models whose torch twins ship with Porter (``porter.examples``: ResNet, ResNeXt, Wide ResNet,
VGG with and without BN, MobileNetV2)."""

from porter import examples

from . import Case

_SMALL_RESNET = {"num_classes": 7, "widths": (8, 16, 24, 32)}
_SMALL_DEEP = {"num_classes": 7, "widths": (4, 8, 8, 8)}  # 101/152 layers: keep the widths tiny
_SMALL_VGG = {"num_classes": 7, "width_divisor": 8, "hidden": 32}
# VGG's five pools need at least 32 pixels; 45x38 is the odd, non-square second size
CASES = {
    "resnet18": Case(examples.resnet18, _SMALL_RESNET, train=True, num_params=11689512),
    "resnet34": Case(examples.resnet34, _SMALL_RESNET, num_params=21797672),
    "resnet50": Case(examples.resnet50, {"num_classes": 7, "widths": (4, 8, 12, 16)}, num_params=25557032),
    "resnet101": Case(examples.resnet101, _SMALL_DEEP, num_params=44549160),
    "resnet152": Case(examples.resnet152, _SMALL_DEEP, inputs=((1, 3, 32, 32), (1, 3, 45, 38)), num_params=60192808),
    # ResNeXt's groups are fixed by the builder (as torchvision refuses another value): widths keep >= 1 per group
    "resnext50_32x4d": Case(examples.resnext50_32x4d, {"num_classes": 7, "widths": (16, 16, 16, 16)},
                            num_params=25028904),
    "resnext101_32x8d": Case(examples.resnext101_32x8d, {"num_classes": 7, "widths": (8, 8, 8, 8)},
                             inputs=((1, 3, 32, 32), (1, 3, 45, 38)), num_params=88791336),
    "resnext101_64x4d": Case(examples.resnext101_64x4d, {"num_classes": 7, "widths": (16, 16, 16, 16)},
                             inputs=((1, 3, 32, 32), (1, 3, 45, 38)), num_params=83455272),
    "wide_resnet50_2": Case(examples.wide_resnet50_2, {"num_classes": 7, "widths": (4, 8, 12, 16)},
                            num_params=68883240),
    "wide_resnet101_2": Case(examples.wide_resnet101_2, _SMALL_DEEP, inputs=((1, 3, 32, 32), (1, 3, 45, 38)),
                             num_params=126886696),
    "vgg11": Case(examples.vgg11, _SMALL_VGG, num_params=132863336),
    "vgg11_bn": Case(examples.vgg11_bn, _SMALL_VGG, train=True, train_kwargs={"dropout": 0.0}, num_params=132868840),
    "vgg13": Case(examples.vgg13, _SMALL_VGG, num_params=133047848),
    "vgg13_bn": Case(examples.vgg13_bn, _SMALL_VGG, num_params=133053736),
    "vgg16": Case(examples.vgg16, _SMALL_VGG, num_params=138357544),
    "vgg16_bn": Case(examples.vgg16_bn, _SMALL_VGG, num_params=138365992),
    "vgg19": Case(examples.vgg19, _SMALL_VGG, num_params=143667240),
    "vgg19_bn": Case(examples.vgg19_bn, _SMALL_VGG, num_params=143678248),
    "mobilenet_v2": Case(examples.mobilenet_v2, {"num_classes": 7, "width_mult": 0.25}, train=True,
                         train_input=(8, 3, 96, 96),
                         train_kwargs={"dropout": 0.0}, num_params=3504872),
}
