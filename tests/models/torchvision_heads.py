"""torchvision's detection heads at test size, with torchvision's module structure and ``state_dict`` names
(``torchvision.models.detection``), everything up to the box ops whose shapes depend on the data (NMS, the
score thresholds, the per-image box lists):

* FCOS (``fcos_resnet50_fpn``'s ``backbone`` + ``head``): ResNet + FPN with P6/P7 from P5, a classification tower
  and a regression tower of conv + ``GroupNorm(32)`` + ReLU shared over the levels, ReLU on the box distances, a
  centre-ness branch; each level ``view``-``permute``-``reshape``d to ``(N, HWA, K)`` and concatenated;
* SSD300 (``ssd300_vgg16``'s ``backbone`` + ``head``): ``SSDFeatureExtractorVGG`` over VGG-16's features (the third
  pool in ``ceil_mode``, conv4_3 L2-normalised with a learnt per-channel ``scale_weight``, pool5 3x3 stride 1, the
  atrous fc6 (dilation 6), fc7, four extra blocks down to 1x1, the first stages frozen) and ``SSDHead``
  (one conv per level, ``SSDScoringHead``'s flatten);
* SSDlite320 (``ssdlite320_mobilenet_v3_large``): the MobileNetV3 features split at the C4 expansion, four extra
  blocks (1x1, depthwise 3x3 stride 2, 1x1, ReLU6), ``SSDLiteHead``'s depthwise + pointwise prediction blocks;
* the RPN on an FPN (``fasterrcnn_resnet50_fpn_v2``'s ``rpn.head``: ``RPNHead(conv_depth=2)``), its
  ``concat_box_prediction_layers`` and the pre-NMS top-n of ``filter_proposals`` (``topk`` per level, the level
  offsets, the gather ``objectness[batch_idx, top_n_idx]``, sigmoid);
* the RoI heads on pooled features (``roi_heads``): v2's ``FastRCNNConvFCHead`` (conv + BN + ReLU, ``Flatten``,
  Linear) and ``FastRCNNPredictor``, Mask R-CNN v2's ``MaskRCNNHeads`` (with BN) and ``MaskRCNNPredictor``
  (2x2 stride-2 transposed conv), Keypoint R-CNN's ``KeypointRCNNHeads`` and ``KeypointRCNNPredictor`` (4x4 stride-2
  transposed conv, then a bilinear x2 ``interpolate`` by ``scale_factor``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from porter.examples import BasicBlock, ResNet
from tests.models._common import calibrate_batch_norms
from tests.models.torchvision_dense import BackboneWithFPN, LastLevelP6P7
from tests.zoo.twins._mobile_ops import Conv2dNormActivation
from tests.zoo.twins.mobilenetv3 import mobilenet_v3_large


def _flatten_level(out, columns):
    """``(N, A * K, H, W) -> (N, HWA, K)``, as every torchvision head lays out its per-level outputs."""
    N, _, H, W = out.shape
    out = out.view(N, -1, columns, H, W).permute(0, 3, 4, 1, 2)
    return out.reshape(N, -1, columns)


# ---------------------------------------------------------------------------------------------------- FCOS
class FCOSClassificationHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, num_convs=4, prior_probability=0.01,
                 norm_layer=None):
        super().__init__()
        self.num_classes = num_classes
        self.num_anchors = num_anchors
        norm_layer = norm_layer or partial(nn.GroupNorm, 32)
        conv = []
        for _ in range(num_convs):
            conv += [nn.Conv2d(in_channels, in_channels, 3, 1, 1), norm_layer(in_channels), nn.ReLU()]
        self.conv = nn.Sequential(*conv)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability) / prior_probability))

    def forward(self, x):
        return torch.cat([_flatten_level(self.cls_logits(self.conv(f)), self.num_classes) for f in x], dim=1)


class FCOSRegressionHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_convs=4, norm_layer=None):
        super().__init__()
        norm_layer = norm_layer or partial(nn.GroupNorm, 32)
        conv = []
        for _ in range(num_convs):
            conv += [nn.Conv2d(in_channels, in_channels, 3, 1, 1), norm_layer(in_channels), nn.ReLU()]
        self.conv = nn.Sequential(*conv)
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)
        self.bbox_ctrness = nn.Conv2d(in_channels, num_anchors * 1, 3, 1, 1)

    def forward(self, x):
        regression, ctrness = [], []
        for features in x:
            feature = self.conv(features)
            regression.append(_flatten_level(F.relu(self.bbox_reg(feature)), 4))
            ctrness.append(_flatten_level(self.bbox_ctrness(feature), 1))
        return torch.cat(regression, dim=1), torch.cat(ctrness, dim=1)


class FCOSHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, num_convs=4):
        super().__init__()
        self.classification_head = FCOSClassificationHead(in_channels, num_anchors, num_classes, num_convs)
        self.regression_head = FCOSRegressionHead(in_channels, num_anchors, num_convs)

    def forward(self, x):
        cls_logits = self.classification_head(x)
        bbox_regression, bbox_ctrness = self.regression_head(x)
        return {"cls_logits": cls_logits, "bbox_regression": bbox_regression, "bbox_ctrness": bbox_ctrness}


class FCOSNetwork(nn.Module):
    """FCOS's ``backbone`` (ResNet, FPN over layer2-4, P6/P7 from P5) and ``head``: the head's outputs."""

    def __init__(self, widths=(8, 16, 24, 32), out_channels=64, num_classes=5, num_convs=2):
        super().__init__()
        resnet = ResNet(BasicBlock, [1, 1, 1, 1], widths=widths)
        self.backbone = BackboneWithFPN(resnet, {"layer2": "0", "layer3": "1", "layer4": "2"}, list(widths[1:]),
                                        out_channels, LastLevelP6P7(out_channels, out_channels))
        self.head = FCOSHead(out_channels, 1, num_classes, num_convs)

    def forward(self, images):
        return self.head(list(self.backbone(images).values()))


def fcos_small() -> nn.Module:
    return FCOSNetwork()


# ---------------------------------------------------------------------------------------------------- SSD
class SSDScoringHead(nn.Module):
    def __init__(self, module_list, num_columns):
        super().__init__()
        self.module_list = module_list
        self.num_columns = num_columns

    def forward(self, x):
        return torch.cat([_flatten_level(module(f), self.num_columns) for module, f in zip(self.module_list, x)],
                         dim=1)


class SSDClassificationHead(SSDScoringHead):
    def __init__(self, in_channels, num_anchors, num_classes):
        super().__init__(nn.ModuleList(nn.Conv2d(c, num_classes * a, 3, padding=1)
                                       for c, a in zip(in_channels, num_anchors)), num_classes)


class SSDRegressionHead(SSDScoringHead):
    def __init__(self, in_channels, num_anchors):
        super().__init__(nn.ModuleList(nn.Conv2d(c, 4 * a, 3, padding=1) for c, a in zip(in_channels, num_anchors)),
                         4)


class SSDHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes):
        super().__init__()
        self.classification_head = SSDClassificationHead(in_channels, num_anchors, num_classes)
        self.regression_head = SSDRegressionHead(in_channels, num_anchors)

    def forward(self, x):
        return {"bbox_regression": self.regression_head(x), "cls_logits": self.classification_head(x)}


def vgg16_features(width=1 / 16):
    """torchvision's ``vgg16().features`` (configuration "D", no batch norm) at ``width`` of its channels."""
    layers, channels = [], 3
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            out = int(v * width)
            layers += [nn.Conv2d(channels, out, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            channels = out
    return nn.Sequential(*layers)


class SSDFeatureExtractorVGG(nn.Module):
    def __init__(self, backbone, highres=False, width=1 / 16):
        super().__init__()
        _, _, maxpool3_pos, maxpool4_pos, _ = (i for i, layer in enumerate(backbone) if isinstance(layer, nn.MaxPool2d))
        backbone[maxpool3_pos].ceil_mode = True  # the paper's 38x38 conv4_3 map at 300x300
        c = lambda n: int(n * width)  # noqa: E731
        self.scale_weight = nn.Parameter(torch.ones(c(512)) * 20)
        self.features = nn.Sequential(*backbone[:maxpool4_pos])
        extra = nn.ModuleList([
            nn.Sequential(nn.Conv2d(c(1024), c(256), 1), nn.ReLU(inplace=True),
                          nn.Conv2d(c(256), c(512), 3, padding=1, stride=2), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(c(512), c(128), 1), nn.ReLU(inplace=True),
                          nn.Conv2d(c(128), c(256), 3, padding=1, stride=2), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(c(256), c(128), 1), nn.ReLU(inplace=True),
                          nn.Conv2d(c(128), c(256), 3), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(c(256), c(128), 1), nn.ReLU(inplace=True),
                          nn.Conv2d(c(128), c(256), 3), nn.ReLU(inplace=True)),
        ])
        if highres:
            extra.append(nn.Sequential(nn.Conv2d(c(256), c(128), 1), nn.ReLU(inplace=True),
                                       nn.Conv2d(c(128), c(256), 4), nn.ReLU(inplace=True)))
        fc = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=False),
            nn.Conv2d(c(512), c(1024), kernel_size=3, padding=6, dilation=6),
            nn.ReLU(inplace=True),
            nn.Conv2d(c(1024), c(1024), kernel_size=1),
            nn.ReLU(inplace=True),
        )
        extra.insert(0, nn.Sequential(*backbone[maxpool4_pos:-1], fc))
        self.extra = extra

    def forward(self, x):
        x = self.features(x)
        output = [self.scale_weight.view(1, -1, 1, 1) * F.normalize(x)]
        for block in self.extra:
            x = block(x)
            output.append(x)
        return OrderedDict([(str(i), v) for i, v in enumerate(output)])


def _vgg_extractor(trainable_layers, width):
    backbone = vgg16_features(width)
    stage_indices = [i for i, b in enumerate(backbone) if isinstance(b, nn.MaxPool2d)]
    freeze_before = stage_indices[len(stage_indices) - trainable_layers]
    for b in backbone[:freeze_before]:
        for parameter in b.parameters():
            parameter.requires_grad_(False)
    return SSDFeatureExtractorVGG(backbone, False, width)


class SSDNetwork(nn.Module):
    """SSD's ``backbone`` and ``head`` on a batch of images at the model's fixed size: the head's outputs."""

    def __init__(self, backbone, head):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, images):
        return self.head(list(self.backbone(images).values()))


def ssd300_vgg16_small(num_classes=5, trainable_layers=3, width=1 / 16) -> nn.Module:
    """``ssd300_vgg16`` at 1/16 width, the first three VGG stages frozen (``trainable_backbone_layers=3``); the
    default boxes' aspect ratios give 4, 6, 6, 6, 4, 4 anchors per place."""
    backbone = _vgg_extractor(trainable_layers, width)
    c = lambda n: int(n * width)  # noqa: E731
    out_channels = [c(512), c(1024), c(512), c(256), c(256), c(256)]
    return SSDNetwork(backbone, SSDHead(out_channels, [4, 6, 6, 6, 4, 4], num_classes))


# ---------------------------------------------------------------------------------------------------- SSDlite
def _prediction_block(in_channels, out_channels, kernel_size, norm_layer):
    return nn.Sequential(
        Conv2dNormActivation(in_channels, in_channels, kernel_size=kernel_size, groups=in_channels,
                             norm_layer=norm_layer, activation_layer=nn.ReLU6),
        nn.Conv2d(in_channels, out_channels, 1),
    )


def _extra_block(in_channels, out_channels, norm_layer):
    mid = out_channels // 2
    return nn.Sequential(
        Conv2dNormActivation(in_channels, mid, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6),
        Conv2dNormActivation(mid, mid, kernel_size=3, stride=2, groups=mid, norm_layer=norm_layer,
                             activation_layer=nn.ReLU6),
        Conv2dNormActivation(mid, out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6),
    )


class SSDLiteClassificationHead(SSDScoringHead):
    def __init__(self, in_channels, num_anchors, num_classes, norm_layer):
        super().__init__(nn.ModuleList(_prediction_block(c, num_classes * a, 3, norm_layer)
                                       for c, a in zip(in_channels, num_anchors)), num_classes)


class SSDLiteRegressionHead(SSDScoringHead):
    def __init__(self, in_channels, num_anchors, norm_layer):
        super().__init__(nn.ModuleList(_prediction_block(c, 4 * a, 3, norm_layer)
                                       for c, a in zip(in_channels, num_anchors)), 4)


class SSDLiteHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, norm_layer):
        super().__init__()
        self.classification_head = SSDLiteClassificationHead(in_channels, num_anchors, num_classes, norm_layer)
        self.regression_head = SSDLiteRegressionHead(in_channels, num_anchors, norm_layer)

    def forward(self, x):
        return {"bbox_regression": self.regression_head(x), "cls_logits": self.classification_head(x)}


class SSDLiteFeatureExtractorMobileNet(nn.Module):
    def __init__(self, backbone, c4_pos, norm_layer, width_mult=1.0, min_depth=16):
        super().__init__()
        if backbone[c4_pos].use_res_connect:
            raise ValueError("the C4 block must not be residual")
        self.features = nn.Sequential(
            nn.Sequential(*backbone[:c4_pos], backbone[c4_pos].block[0]),  # until the C4 expansion
            nn.Sequential(backbone[c4_pos].block[1:], *backbone[c4_pos + 1:]),  # from the C4 depthwise on
        )
        depth = lambda d: max(min_depth, int(d * width_mult))  # noqa: E731
        self.extra = nn.ModuleList([
            _extra_block(backbone[-1].out_channels, depth(512), norm_layer),
            _extra_block(depth(512), depth(256), norm_layer),
            _extra_block(depth(256), depth(256), norm_layer),
            _extra_block(depth(256), depth(128), norm_layer),
        ])

    def forward(self, x):
        output = []
        for block in self.features:
            x = block(x)
            output.append(x)
        for block in self.extra:
            x = block(x)
            output.append(x)
        return OrderedDict([(str(i), v) for i, v in enumerate(output)])


def ssdlite320_mobilenet_v3_large_small(num_classes=5, width_mult=0.25) -> nn.Module:
    """``ssdlite320_mobilenet_v3_large`` (reduced tail, every layer trainable) at ``width_mult`` 0.25; 6 anchors
    per place on each of the six maps (20, 10, 5, 3, 2, 1 at 320x320)."""
    norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)
    features = mobilenet_v3_large(width_mult=width_mult, reduced_tail=True).features
    for m in features.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 0.03  # ssdlite320 builds its backbone with this norm layer
    stage_indices = [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)] + [len(features) - 1]
    backbone = SSDLiteFeatureExtractorMobileNet(features, stage_indices[-2], norm_layer, width_mult=width_mult)
    with torch.no_grad():
        probe = backbone.eval()(torch.zeros(1, 3, 320, 320))  # det_utils.retrieve_out_channels: eval, then back
    backbone.train()
    out_channels = [v.shape[1] for v in probe.values()]
    return SSDNetwork(backbone, SSDLiteHead(out_channels, [6] * 6, num_classes, norm_layer))


# ---------------------------------------------------------------------------------------------------- RPN
class RPNHead(nn.Module):
    def __init__(self, in_channels, num_anchors, conv_depth=1):
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, kernel_size=3, norm_layer=None)
                                    for _ in range(conv_depth)])
        self.cls_logits = nn.Conv2d(in_channels, num_anchors, kernel_size=1, stride=1)
        self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=1, stride=1)

    def forward(self, x):
        logits, bbox_reg = [], []
        for feature in x:
            t = self.conv(feature)
            logits.append(self.cls_logits(t))
            bbox_reg.append(self.bbox_pred(t))
        return logits, bbox_reg


def concat_box_prediction_layers(box_cls, box_regression):
    cls_flat, reg_flat = [], []
    for cls_level, reg_level in zip(box_cls, box_regression):
        A = reg_level.shape[1] // 4
        cls_flat.append(_flatten_level(cls_level, cls_level.shape[1] // A))
        reg_flat.append(_flatten_level(reg_level, 4))
    return torch.cat(cls_flat, dim=1).flatten(0, -2), torch.cat(reg_flat, dim=1).reshape(-1, 4)


class RegionProposalNetwork(nn.Module):
    """The RPN's head and its eval-mode scoring up to the box ops: the flattened objectness and deltas, and each
    image's pre-NMS top ``pre_nms_top_n`` objectness per level (sigmoid) with their anchor indices."""

    def __init__(self, head, pre_nms_top_n):
        super().__init__()
        self.head = head
        self._pre_nms_top_n = {"training": pre_nms_top_n, "testing": pre_nms_top_n}

    def pre_nms_top_n(self):
        return self._pre_nms_top_n["training" if self.training else "testing"]

    def _get_top_n_idx(self, objectness, num_anchors_per_level):
        r, offset = [], 0
        for ob in objectness.split(num_anchors_per_level, 1):
            num_anchors = ob.shape[1]
            _, top_n_idx = ob.topk(min(self.pre_nms_top_n(), num_anchors), dim=1)
            r.append(top_n_idx + offset)
            offset += num_anchors
        return torch.cat(r, dim=1)

    def forward(self, features):
        features = list(features.values())
        objectness, pred_bbox_deltas = self.head(features)
        num_images = features[0].shape[0]
        num_anchors_per_level = [o[0].shape[0] * o[0].shape[1] * o[0].shape[2] for o in objectness]
        objectness, pred_bbox_deltas = concat_box_prediction_layers(objectness, pred_bbox_deltas)
        scores = objectness.detach().reshape(num_images, -1)
        top_n_idx = self._get_top_n_idx(scores, num_anchors_per_level)
        batch_idx = torch.arange(num_images)[:, None]
        return {"objectness": objectness, "pred_bbox_deltas": pred_bbox_deltas,
                "top_scores": torch.sigmoid(scores[batch_idx, top_n_idx]), "top_n_idx": top_n_idx}


class RPNNetwork(nn.Module):
    """``backbone`` (ResNet + FPN, P6 by max pooling as ``LastLevelMaxPool``) and ``rpn``, torchvision's names."""

    def __init__(self, widths=(8, 16, 24, 32), out_channels=16, num_anchors=3, pre_nms_top_n=20):
        super().__init__()
        resnet = ResNet(BasicBlock, [1, 1, 1, 1], widths=widths)
        self.backbone = BackboneWithFPN(resnet, {"layer1": "0", "layer2": "1", "layer3": "2", "layer4": "3"},
                                        list(widths), out_channels, LastLevelMaxPool())
        self.rpn = RegionProposalNetwork(RPNHead(out_channels, num_anchors, conv_depth=2), pre_nms_top_n)

    def forward(self, images):
        return self.rpn(self.backbone(images))


class LastLevelMaxPool(nn.Module):
    def forward(self, x, y, names):
        names.append("pool")
        x.append(F.max_pool2d(x[-1], kernel_size=1, stride=2, padding=0))
        return x, names


def rpn_fpn_small() -> nn.Module:
    return RPNNetwork()


# ---------------------------------------------------------------------------------------------------- RoI heads
class FastRCNNConvFCHead(nn.Sequential):
    def __init__(self, input_size, conv_layers, fc_layers, norm_layer=None):
        in_channels, in_height, in_width = input_size
        blocks, previous = [], in_channels
        for current in conv_layers:
            blocks.append(Conv2dNormActivation(previous, current, norm_layer=norm_layer))
            previous = current
        blocks.append(nn.Flatten())
        previous = previous * in_height * in_width
        for current in fc_layers:
            blocks += [nn.Linear(previous, current), nn.ReLU(inplace=True)]
            previous = current
        super().__init__(*blocks)


class FastRCNNPredictor(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_classes * 4)

    def forward(self, x):
        x = x.flatten(start_dim=1)
        return self.cls_score(x), self.bbox_pred(x)


class MaskRCNNHeads(nn.Sequential):
    def __init__(self, in_channels, layers, dilation, norm_layer=None):
        blocks, previous = [], in_channels
        for features in layers:
            blocks.append(Conv2dNormActivation(previous, features, kernel_size=3, stride=1, padding=dilation,
                                               dilation=dilation, norm_layer=norm_layer))
            previous = features
        super().__init__(*blocks)


class MaskRCNNPredictor(nn.Sequential):
    def __init__(self, in_channels, dim_reduced, num_classes):
        super().__init__(OrderedDict([
            ("conv5_mask", nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0)),
            ("relu", nn.ReLU(inplace=True)),
            ("mask_fcn_logits", nn.Conv2d(dim_reduced, num_classes, 1, 1, 0)),
        ]))


class KeypointRCNNHeads(nn.Sequential):
    def __init__(self, in_channels, layers):
        d, previous = [], in_channels
        for out_channels in layers:
            d += [nn.Conv2d(previous, out_channels, 3, stride=1, padding=1), nn.ReLU(inplace=True)]
            previous = out_channels
        super().__init__(*d)


class KeypointRCNNPredictor(nn.Module):
    def __init__(self, in_channels, num_keypoints):
        super().__init__()
        deconv_kernel = 4
        self.kps_score_lowres = nn.ConvTranspose2d(in_channels, num_keypoints, deconv_kernel, stride=2,
                                                   padding=deconv_kernel // 2 - 1)
        self.up_scale = 2
        self.out_channels = num_keypoints

    def forward(self, x):
        x = self.kps_score_lowres(x)
        return F.interpolate(x, scale_factor=float(self.up_scale), mode="bilinear", align_corners=False,
                             recompute_scale_factor=False)


class RoIHeads(nn.Module):
    """torchvision's ``RoIHeads`` modules (box, mask and keypoint branches) on features already pooled per region:
    box features ``(R, C, 7, 7)``, mask and keypoint features ``(R, C, 14, 14)``."""

    def __init__(self, box_head, box_predictor, mask_head, mask_predictor, keypoint_head, keypoint_predictor):
        super().__init__()
        self.box_head = box_head
        self.box_predictor = box_predictor
        self.mask_head = mask_head
        self.mask_predictor = mask_predictor
        self.keypoint_head = keypoint_head
        self.keypoint_predictor = keypoint_predictor

    def forward(self, box_features, mask_features, keypoint_features):
        class_logits, box_regression = self.box_predictor(self.box_head(box_features))
        return {"class_logits": class_logits, "box_regression": box_regression,
                "mask_logits": self.mask_predictor(self.mask_head(mask_features)),
                "keypoint_logits": self.keypoint_predictor(self.keypoint_head(keypoint_features))}


class RoIHeadsNetwork(nn.Module):
    def __init__(self, channels=16, num_classes=5, num_keypoints=6):
        super().__init__()
        self.roi_heads = RoIHeads(
            FastRCNNConvFCHead((channels, 7, 7), [channels] * 2, [32], norm_layer=nn.BatchNorm2d),
            FastRCNNPredictor(32, num_classes),
            MaskRCNNHeads(channels, [channels] * 2, 1, norm_layer=nn.BatchNorm2d),
            MaskRCNNPredictor(channels, channels, num_classes),
            KeypointRCNNHeads(channels, [channels] * 2),
            KeypointRCNNPredictor(channels, num_keypoints))

    def forward(self, box_features, mask_features, keypoint_features):
        return self.roi_heads(box_features, mask_features, keypoint_features)


def roi_heads_small() -> nn.Module:
    return RoIHeadsNetwork()


def calibrate_ssdlite(model: nn.Module) -> None:
    """:func:`calibrate_batch_norms` on a seeded batch of eight 320x320 images: with random statistics SSDlite's
    activations grew 60x through the backbone and torch's own float32 output sat 1.5e-4 of its range from its
    float64 one."""
    calibrate_batch_norms(model, torch.randn(8, 3, 320, 320, generator=torch.Generator().manual_seed(11)))
