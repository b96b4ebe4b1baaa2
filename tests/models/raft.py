"""Twin of torchvision's ``RAFT`` optical flow model (``torchvision.models.optical_flow.raft``: module structure and
``state_dict`` names ``feature_encoder.convnormrelu.<0,1>``/``layer<i>.<j>.convnormrelu<k>``/``downsample``/``conv``,
``context_encoder...``, ``update_block.motion_encoder.convcorr1``/``convflow1``/``conv``,
``update_block.recurrent_block.convgru1.convz``/``convr``/``convq``, ``update_block.flow_head.conv1``/``conv2``,
``mask_predictor.convrelu.0``/``conv``), as ``raft_small`` and ``raft_large`` build it, narrowed.

Stresses: two images through one encoder (``cat`` on the batch, then ``chunk``); the all-pairs correlation volume
(a batched matmul over every pair of positions, divided by ``sqrt(torch.tensor(C))``), pooled into a pyramid by
``avg_pool2d`` with the maps folded into the batch; its lookups: ``linspace``/``meshgrid`` offsets added to the
current coordinates and ``grid_sample`` (bilinear, zeros padding, ``align_corners=True``, absolute pixel coordinates
normalised in the model) at every level, halved per level; the iterative refinement: a fixed number of updates,
each a ConvGRU (sigmoid/tanh gates over concatenated maps; raft_large's two separable (1, 5)/(5, 1) GRUs), a flow
head and ``coords1.detach()`` (no gradient through the coordinates); the flow upsampled by 8 each update either by
bilinear ``interpolate(align_corners=True)`` (small) or convexly (large: a softmax over 9 taps of ``F.unfold`` of
the flow, weighted by a predicted mask); a list of flows out; ``InstanceNorm2d`` (feature encoders) and
``BatchNorm2d`` or no norm (context encoders).
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tests.zoo.twins._mobile_ops import Conv2dNormActivation


def grid_sample(img: Tensor, absolute_grid: Tensor, mode: str = "bilinear", align_corners: Optional[bool] = None):
    """``F.grid_sample`` with absolute pixel coordinates."""
    h, w = img.shape[-2:]
    xgrid, ygrid = absolute_grid.split([1, 1], dim=-1)
    normalized_grid = torch.cat([2 * xgrid / (w - 1) - 1, 2 * ygrid / (h - 1) - 1], dim=-1)
    return F.grid_sample(img, normalized_grid, mode=mode, align_corners=align_corners)


def make_coords_grid(batch_size: int, h: int, w: int):
    coords = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch_size, 1, 1, 1)


def upsample_flow(flow, up_mask: Optional[Tensor] = None):
    """The flow at 8 times the size: bilinear, or a convex combination of each 3x3 neighbourhood by ``up_mask``."""
    batch_size, _, h, w = flow.shape
    new_h, new_w = h * 8, w * 8
    if up_mask is None:
        return 8 * F.interpolate(flow, size=(new_h, new_w), mode="bilinear", align_corners=True)
    up_mask = torch.softmax(up_mask.view(batch_size, 1, 9, 8, 8, h, w), dim=2)
    upsampled_flow = F.unfold(8 * flow, kernel_size=3, padding=1).view(batch_size, 2, 9, 1, 1, h, w)
    upsampled_flow = torch.sum(up_mask * upsampled_flow, dim=2)
    return upsampled_flow.permute(0, 1, 4, 2, 5, 3).reshape(batch_size, 2, new_h, new_w)


class ResidualBlock(nn.Module):
    def __init__(self, in_channels, out_channels, *, norm_layer, stride=1, always_project: bool = False):
        super().__init__()
        self.convnormrelu1 = Conv2dNormActivation(in_channels, out_channels, norm_layer=norm_layer, kernel_size=3,
                                                  stride=stride, bias=True)
        self.convnormrelu2 = Conv2dNormActivation(out_channels, out_channels, norm_layer=norm_layer, kernel_size=3,
                                                  bias=True)
        if stride == 1 and not always_project:
            self.downsample = nn.Identity()
        else:
            self.downsample = Conv2dNormActivation(in_channels, out_channels, norm_layer=norm_layer, kernel_size=1,
                                                   stride=stride, bias=True, activation_layer=None)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.convnormrelu2(self.convnormrelu1(x))
        return self.relu(self.downsample(x) + y)


class BottleneckBlock(nn.Module):
    def __init__(self, in_channels, out_channels, *, norm_layer, stride=1):
        super().__init__()
        self.convnormrelu1 = Conv2dNormActivation(in_channels, out_channels // 4, norm_layer=norm_layer,
                                                  kernel_size=1, bias=True)
        self.convnormrelu2 = Conv2dNormActivation(out_channels // 4, out_channels // 4, norm_layer=norm_layer,
                                                  kernel_size=3, stride=stride, bias=True)
        self.convnormrelu3 = Conv2dNormActivation(out_channels // 4, out_channels, norm_layer=norm_layer,
                                                  kernel_size=1, bias=True)
        self.relu = nn.ReLU(inplace=True)
        if stride == 1:
            self.downsample = nn.Identity()
        else:
            self.downsample = Conv2dNormActivation(in_channels, out_channels, norm_layer=norm_layer, kernel_size=1,
                                                   stride=stride, bias=True, activation_layer=None)

    def forward(self, x):
        y = self.convnormrelu3(self.convnormrelu2(self.convnormrelu1(x)))
        return self.relu(self.downsample(x) + y)


class FeatureEncoder(nn.Module):
    """Downsamples by 8: a 7x7 stride-2 stem and three pairs of blocks (strides 1, 2, 2), then a 1x1 conv."""

    def __init__(self, *, block=ResidualBlock, layers=(64, 64, 96, 128, 256), strides=(2, 1, 2, 2),
                 norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.convnormrelu = Conv2dNormActivation(3, layers[0], norm_layer=norm_layer, kernel_size=7,
                                                 stride=strides[0], bias=True)
        self.layer1 = self._make_2_blocks(block, layers[0], layers[1], norm_layer, strides[1])
        self.layer2 = self._make_2_blocks(block, layers[1], layers[2], norm_layer, strides[2])
        self.layer3 = self._make_2_blocks(block, layers[2], layers[3], norm_layer, strides[3])
        self.conv = nn.Conv2d(layers[3], layers[4], kernel_size=1)
        self.output_dim = layers[-1]
        self.downsample_factor = 2 ** sum(s == 2 for s in strides)

    @staticmethod
    def _make_2_blocks(block, in_channels, out_channels, norm_layer, first_stride):
        return nn.Sequential(block(in_channels, out_channels, norm_layer=norm_layer, stride=first_stride),
                             block(out_channels, out_channels, norm_layer=norm_layer, stride=1))

    def forward(self, x):
        x = self.convnormrelu(x)
        return self.conv(self.layer3(self.layer2(self.layer1(x))))


class MotionEncoder(nn.Module):
    def __init__(self, *, in_channels_corr, corr_layers=(256, 192), flow_layers=(128, 64), out_channels=128):
        super().__init__()
        self.convcorr1 = Conv2dNormActivation(in_channels_corr, corr_layers[0], norm_layer=None, kernel_size=1)
        if len(corr_layers) == 2:
            self.convcorr2 = Conv2dNormActivation(corr_layers[0], corr_layers[1], norm_layer=None, kernel_size=3)
        else:
            self.convcorr2 = nn.Identity()
        self.convflow1 = Conv2dNormActivation(2, flow_layers[0], norm_layer=None, kernel_size=7)
        self.convflow2 = Conv2dNormActivation(flow_layers[0], flow_layers[1], norm_layer=None, kernel_size=3)
        self.conv = Conv2dNormActivation(corr_layers[-1] + flow_layers[-1], out_channels - 2, norm_layer=None,
                                         kernel_size=3)
        self.out_channels = out_channels

    def forward(self, flow, corr_features):
        corr = self.convcorr2(self.convcorr1(corr_features))
        flow_features = self.convflow2(self.convflow1(flow))
        corr_flow = self.conv(torch.cat([corr, flow_features], dim=1))
        return torch.cat([corr_flow, flow], dim=1)


class ConvGRU(nn.Module):
    def __init__(self, *, input_size, hidden_size, kernel_size, padding):
        super().__init__()
        self.convz = nn.Conv2d(hidden_size + input_size, hidden_size, kernel_size=kernel_size, padding=padding)
        self.convr = nn.Conv2d(hidden_size + input_size, hidden_size, kernel_size=kernel_size, padding=padding)
        self.convq = nn.Conv2d(hidden_size + input_size, hidden_size, kernel_size=kernel_size, padding=padding)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


def _pass_through_h(h, _):
    return h


class RecurrentBlock(nn.Module):
    def __init__(self, *, input_size, hidden_size, kernel_size=((1, 5), (5, 1)), padding=((0, 2), (2, 0))):
        super().__init__()
        self.convgru1 = ConvGRU(input_size=input_size, hidden_size=hidden_size, kernel_size=kernel_size[0],
                                padding=padding[0])
        if len(kernel_size) == 2:
            self.convgru2 = ConvGRU(input_size=input_size, hidden_size=hidden_size, kernel_size=kernel_size[1],
                                    padding=padding[1])
        else:
            self.convgru2 = _pass_through_h
        self.hidden_size = hidden_size

    def forward(self, h, x):
        return self.convgru2(self.convgru1(h, x), x)


class FlowHead(nn.Module):
    def __init__(self, *, in_channels, hidden_size):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, hidden_size, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_size, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.conv2(self.relu(self.conv1(x)))


class UpdateBlock(nn.Module):
    def __init__(self, *, motion_encoder, recurrent_block, flow_head):
        super().__init__()
        self.motion_encoder = motion_encoder
        self.recurrent_block = recurrent_block
        self.flow_head = flow_head
        self.hidden_state_size = recurrent_block.hidden_size

    def forward(self, hidden_state, context, corr_features, flow):
        x = torch.cat([context, self.motion_encoder(flow, corr_features)], dim=1)
        hidden_state = self.recurrent_block(hidden_state, x)
        return hidden_state, self.flow_head(hidden_state)


class MaskPredictor(nn.Module):
    def __init__(self, *, in_channels, hidden_size, multiplier=0.25):
        super().__init__()
        self.convrelu = Conv2dNormActivation(in_channels, hidden_size, norm_layer=None, kernel_size=3)
        self.conv = nn.Conv2d(hidden_size, 8 * 8 * 9, 1, padding=0)
        self.multiplier = multiplier

    def forward(self, x):
        return self.multiplier * self.conv(self.convrelu(x))


class CorrBlock(nn.Module):
    """The correlation pyramid of two feature maps, and its lookups around given coordinates within ``radius``."""

    def __init__(self, *, num_levels: int = 4, radius: int = 4):
        super().__init__()
        self.num_levels, self.radius = num_levels, radius
        self.corr_pyramid: List[Tensor] = [torch.tensor(0)]
        self.out_channels = num_levels * (2 * radius + 1) ** 2

    def build_pyramid(self, fmap1, fmap2):
        if fmap1.shape != fmap2.shape:
            raise ValueError(f"Input feature maps should have the same shape, got {fmap1.shape} != {fmap2.shape}")
        corr_volume = self._compute_corr_volume(fmap1, fmap2)
        batch_size, h, w, num_channels, _, _ = corr_volume.shape
        corr_volume = corr_volume.reshape(batch_size * h * w, num_channels, h, w)
        self.corr_pyramid = [corr_volume]
        for _ in range(self.num_levels - 1):
            corr_volume = F.avg_pool2d(corr_volume, kernel_size=2, stride=2)
            self.corr_pyramid.append(corr_volume)

    def index_pyramid(self, centroids_coords):
        side = 2 * self.radius + 1
        di = torch.linspace(-self.radius, self.radius, side)
        dj = torch.linspace(-self.radius, self.radius, side)
        delta = torch.stack(torch.meshgrid(di, dj, indexing="ij"), dim=-1).to(centroids_coords.device)
        delta = delta.view(1, side, side, 2)
        batch_size, _, h, w = centroids_coords.shape
        centroids_coords = centroids_coords.permute(0, 2, 3, 1).reshape(batch_size * h * w, 1, 1, 2)
        indexed_pyramid = []
        for corr_volume in self.corr_pyramid:
            sampling_coords = centroids_coords + delta
            indexed = grid_sample(corr_volume, sampling_coords, align_corners=True, mode="bilinear")
            indexed_pyramid.append(indexed.view(batch_size, h, w, -1))
            centroids_coords = centroids_coords / 2
        corr_features = torch.cat(indexed_pyramid, dim=-1).permute(0, 3, 1, 2).contiguous()
        if corr_features.shape != (batch_size, self.out_channels, h, w):
            raise ValueError(f"Output shape of index pyramid is incorrect, got {corr_features.shape}")
        return corr_features

    def _compute_corr_volume(self, fmap1, fmap2):
        batch_size, num_channels, h, w = fmap1.shape
        fmap1 = fmap1.view(batch_size, num_channels, h * w)
        fmap2 = fmap2.view(batch_size, num_channels, h * w)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2).view(batch_size, h, w, 1, h, w)
        return corr / torch.sqrt(torch.tensor(num_channels))


class RAFT(nn.Module):
    def __init__(self, *, feature_encoder, context_encoder, corr_block, update_block, mask_predictor=None):
        super().__init__()
        self.feature_encoder = feature_encoder
        self.context_encoder = context_encoder
        self.corr_block = corr_block
        self.update_block = update_block
        self.mask_predictor = mask_predictor

    def forward(self, image1, image2, num_flow_updates: int = 12):
        batch_size, _, h, w = image1.shape
        if (h, w) != image2.shape[-2:]:
            raise ValueError(f"input images should have the same shape, got ({h}, {w}) != {image2.shape[-2:]}")
        if not (h % 8 == 0) and (w % 8 == 0):
            raise ValueError(f"input image H and W should be divisible by 8, got {h} (h) and {w} (w)")
        fmaps = self.feature_encoder(torch.cat([image1, image2], dim=0))
        fmap1, fmap2 = torch.chunk(fmaps, chunks=2, dim=0)
        self.corr_block.build_pyramid(fmap1, fmap2)
        context_out = self.context_encoder(image1)
        hidden_state_size = self.update_block.hidden_state_size
        out_channels_context = context_out.shape[1] - hidden_state_size
        hidden_state, context = torch.split(context_out, [hidden_state_size, out_channels_context], dim=1)
        hidden_state = torch.tanh(hidden_state)
        context = F.relu(context)
        coords0 = make_coords_grid(batch_size, h // 8, w // 8).to(fmap1.device)
        coords1 = make_coords_grid(batch_size, h // 8, w // 8).to(fmap1.device)
        flow_predictions = []
        for _ in range(num_flow_updates):
            coords1 = coords1.detach()  # no gradient through the coordinates, as in the paper
            corr_features = self.corr_block.index_pyramid(centroids_coords=coords1)
            flow = coords1 - coords0
            hidden_state, delta_flow = self.update_block(hidden_state, context, corr_features, flow)
            coords1 = coords1 + delta_flow
            up_mask = None if self.mask_predictor is None else self.mask_predictor(hidden_state)
            flow_predictions.append(upsample_flow(flow=(coords1 - coords0), up_mask=up_mask))
        return flow_predictions


def _raft(*, feature_layers, feature_block, feature_norm, context_layers, context_block, context_norm, num_levels,
          radius, corr_layers, flow_layers, motion_out, hidden, gru_kernels, gru_padding, head_hidden, mask_hidden):
    corr_block = CorrBlock(num_levels=num_levels, radius=radius)
    motion_encoder = MotionEncoder(in_channels_corr=corr_block.out_channels, corr_layers=corr_layers,
                                   flow_layers=flow_layers, out_channels=motion_out)
    recurrent_block = RecurrentBlock(input_size=motion_out + context_layers[-1] - hidden, hidden_size=hidden,
                                     kernel_size=gru_kernels, padding=gru_padding)
    update_block = UpdateBlock(motion_encoder=motion_encoder, recurrent_block=recurrent_block,
                               flow_head=FlowHead(in_channels=hidden, hidden_size=head_hidden))
    mask_predictor = None if mask_hidden is None else MaskPredictor(in_channels=hidden, hidden_size=mask_hidden)
    return RAFT(feature_encoder=FeatureEncoder(block=feature_block, layers=feature_layers, norm_layer=feature_norm),
                context_encoder=FeatureEncoder(block=context_block, layers=context_layers, norm_layer=context_norm),
                corr_block=corr_block, update_block=update_block, mask_predictor=mask_predictor)


class Updates(nn.Module):
    """Calls RAFT with a fixed number of flow updates (the reference's default is 12)."""

    def __init__(self, raft: RAFT, num_flow_updates: int):
        super().__init__()
        self.raft = raft
        self.num_flow_updates = num_flow_updates

    def forward(self, image1, image2):
        return self.raft(image1, image2, num_flow_updates=self.num_flow_updates)


def raft_small_twin(num_flow_updates=3):
    """``raft_small``'s options (bottleneck blocks, instance norm / no norm, radius 3, one 3x3 GRU, bilinear
    upsampling) at 8-24 channels. Three pyramid levels, not four: at 64x64 frames (8x8 features) a fourth level is
    1x1, where the lookup's ``2 * x / (w - 1) - 1`` divides by zero and every flow is NaN (torchvision's smallest
    frames, 128x128, give a 2x2 fourth level)."""
    return Updates(_raft(
        feature_layers=(8, 8, 16, 16, 24), feature_block=BottleneckBlock, feature_norm=nn.InstanceNorm2d,
        context_layers=(8, 8, 16, 16, 24), context_block=BottleneckBlock, context_norm=None,
        num_levels=3, radius=3, corr_layers=(24,), flow_layers=(16, 8), motion_out=20, hidden=16,
        gru_kernels=(3,), gru_padding=(1,), head_hidden=16, mask_hidden=None), num_flow_updates)


def raft_large_twin(num_flow_updates=2):
    """``raft_large``'s options (residual blocks, instance norm / batch norm, radius 4, the separable GRU pair,
    convex upsampling by the mask predictor) at 8-32 channels; three pyramid levels, as above."""
    return Updates(_raft(
        feature_layers=(8, 8, 16, 16, 32), feature_block=ResidualBlock, feature_norm=nn.InstanceNorm2d,
        context_layers=(8, 8, 16, 16, 32), context_block=ResidualBlock, context_norm=nn.BatchNorm2d,
        num_levels=3, radius=4, corr_layers=(32, 24), flow_layers=(16, 8), motion_out=20, hidden=16,
        gru_kernels=((1, 5), (5, 1)), gru_padding=((0, 2), (2, 0)), head_hidden=16, mask_hidden=32),
        num_flow_updates)
