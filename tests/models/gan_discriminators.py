"""Small twins of HiFi-GAN's discriminators (``jik876/hifi-gan`` ``models.py``; the same blocks in every vocoder
repository since): module structure and ``state_dict`` names as the original, channel widths as arguments.

* ``MultiPeriodDiscriminator``: ``DiscriminatorP`` reflect-pads the waveform to a multiple of its period (a
  branch on ``t % period``), views it as ``(B, C, T / p, p)`` and runs ``(k, 1)`` Conv2d stacks under
  ``torch.nn.utils.weight_norm`` (``weight_g``/``weight_v``);
* ``MultiScaleDiscriminator``: ``DiscriminatorS`` grouped Conv1d stacks, the first under the old hook form of
  ``torch.nn.utils.spectral_norm`` (``weight_orig``, ``weight_u``, ``weight_v``: in eval the stored vectors give
  sigma), the others under weight norm, ``AvgPool1d(4, 2, padding=2)`` between scales;
* ``SNProjection``: a Linear/Conv under ``torch.nn.utils.parametrizations.spectral_norm``
  (``parametrizations.weight.original``, ``_u``, ``_v``), as SN-GAN discriminators written against torch 2 use.

Each returns nested lists (scores and feature maps per sub-discriminator), as the originals.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import AvgPool1d, Conv1d, Conv2d
from torch.nn.utils import spectral_norm, weight_norm
from torch.nn.utils.parametrizations import spectral_norm as parametrized_spectral_norm

LRELU_SLOPE = 0.1


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class DiscriminatorP(nn.Module):
    def __init__(self, period, kernel_size=5, stride=3, use_spectral_norm=False, widths=(4, 8, 8, 16)):
        super().__init__()
        self.period = period
        norm_f = weight_norm if not use_spectral_norm else spectral_norm
        chans = (1,) + tuple(widths)
        convs = [norm_f(Conv2d(chans[i], chans[i + 1], (kernel_size, 1), (stride, 1),
                               padding=(get_padding(5, 1), 0))) for i in range(len(widths))]
        convs.append(norm_f(Conv2d(widths[-1], widths[-1], (kernel_size, 1), 1, padding=(2, 0))))
        self.convs = nn.ModuleList(convs)
        self.conv_post = norm_f(Conv2d(widths[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []
        b, c, t = x.shape
        if t % self.period != 0:
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods=(2, 3)):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorP(p) for p in periods])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class DiscriminatorS(nn.Module):
    def __init__(self, use_spectral_norm=False, widths=(8, 8, 16, 16)):
        super().__init__()
        norm_f = weight_norm if not use_spectral_norm else spectral_norm
        w = widths
        self.convs = nn.ModuleList([
            norm_f(Conv1d(1, w[0], 15, 1, padding=7)),
            norm_f(Conv1d(w[0], w[1], 41, 2, groups=4, padding=20)),
            norm_f(Conv1d(w[1], w[2], 41, 2, groups=4, padding=20)),
            norm_f(Conv1d(w[2], w[3], 41, 4, groups=8, padding=20)),
            norm_f(Conv1d(w[3], w[3], 5, 1, padding=2)),
        ])
        self.conv_post = norm_f(Conv1d(w[3], 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiScaleDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorS(use_spectral_norm=True), DiscriminatorS(),
                                             DiscriminatorS()])
        self.meanpools = nn.ModuleList([AvgPool1d(4, 2, padding=2), AvgPool1d(4, 2, padding=2)])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i - 1](y)
                y_hat = self.meanpools[i - 1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class SNProjection(nn.Module):
    """An SN-GAN-style critic over images: parametrized spectral norm on every conv and the linear head."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.conv1 = parametrized_spectral_norm(Conv2d(3, width, 3, 1, 1))
        self.conv2 = parametrized_spectral_norm(Conv2d(width, 2 * width, 4, 2, 1))
        self.linear = parametrized_spectral_norm(nn.Linear(2 * width, 1))

    def forward(self, x):
        x = F.leaky_relu(self.conv1(x), 0.1)
        x = F.leaky_relu(self.conv2(x), 0.1)
        return self.linear(x.sum(dim=(2, 3)))


def mpd_small() -> nn.Module:
    return MultiPeriodDiscriminator()


def msd_small() -> nn.Module:
    return MultiScaleDiscriminator()


def sn_critic_small() -> nn.Module:
    return SNProjection()


@torch.no_grad()
def fix_spectral_vectors(model: nn.Module) -> None:
    """After seeded randomisation: unit ``u``/``v`` vectors one power iteration from the weight, as a trained
    checkpoint holds (random ones give a meaningless sigma, possibly near 0)."""
    for module in model.modules():
        if hasattr(module, "weight_orig") and hasattr(module, "weight_u"):
            w = module.weight_orig.flatten(1)
            v = F.normalize(torch.randn(w.shape[1]), dim=0)
            u = F.normalize(w @ v, dim=0)
            module.weight_u.copy_(u)
            module.weight_v.copy_(F.normalize(w.t() @ u, dim=0))
        parametrizations = getattr(module, "parametrizations", None)
        if parametrizations is not None and "weight" in parametrizations:
            for p in parametrizations.weight:
                if hasattr(p, "_u"):
                    w = parametrizations.weight.original.flatten(1)
                    u = F.normalize(w @ F.normalize(torch.randn(w.shape[1]), dim=0), dim=0)
                    p._u.copy_(u)
                    p._v.copy_(F.normalize(w.t() @ u, dim=0))
