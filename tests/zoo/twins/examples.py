"""Cases for the zoo models whose torch twins ship with Porter (``porter.examples``: ResNet, VGG-BN, MobileNetV2)."""

from porter import examples

from . import Case

_SMALL_RESNET = {"num_classes": 7, "widths": (8, 16, 24, 32)}
# VGG's five pools need at least 32 pixels; 45x38 is the odd, non-square second size
CASES = {
    "resnet18": Case(examples.resnet18, _SMALL_RESNET, train=True, num_params=11689512),
    "resnet34": Case(examples.resnet34, _SMALL_RESNET, num_params=21797672),
    "resnet50": Case(examples.resnet50, {"num_classes": 7, "widths": (4, 8, 12, 16)}, num_params=25557032),
    "vgg11_bn": Case(examples.vgg11_bn, {"num_classes": 7, "width_divisor": 8, "hidden": 32}, train=True,
                     train_kwargs={"dropout": 0.0}, num_params=132868840),
    "vgg16_bn": Case(examples.vgg16_bn, {"num_classes": 7, "width_divisor": 8, "hidden": 32}, num_params=138365992),
    "mobilenet_v2": Case(examples.mobilenet_v2, {"num_classes": 7, "width_mult": 0.25}, train=True,
                         train_input=(8, 3, 96, 96),
                         train_kwargs={"dropout": 0.0}, num_params=3504872),
}
