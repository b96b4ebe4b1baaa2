"""A VQ-VAE (van den Oord et al. 2017) in the form of the widely copied PyTorch implementation (``_encoder``,
``_pre_vq_conv``, ``_vq_vae._embedding``, ``_decoder`` with residual stacks), small sizes.

Stresses: the codebook's nearest neighbour by ``argmin`` over squared distances (``|x|^2 + |e|^2 - 2 x e^T``) on the
NHWC-flattened latents, the one-hot ``zeros(...).scatter_(1, indices, 1)`` encodings, the quantized vectors both by
``F.embedding`` of the indices and by the one-hot ``matmul`` (the two must agree), the straight-through estimator
``x + (q - x).detach()``, the codebook and commitment losses (``F.mse_loss`` with one side ``detach``ed), the
perplexity of the code usage (``exp(-sum(p log(p + 1e-10)))``), conv and transposed-conv stacks.
Outputs ``(loss, reconstruction, perplexity, indices)``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self._block = nn.Sequential(nn.ReLU(True), nn.Conv2d(channels, hidden, 3, 1, 1, bias=False),
                                    nn.ReLU(True), nn.Conv2d(hidden, channels, 1, 1, bias=False))

    def forward(self, x):
        return x + self._block(x)


class ResidualStack(nn.Module):
    def __init__(self, channels, layers, hidden):
        super().__init__()
        self._layers = nn.ModuleList(Residual(channels, hidden) for _ in range(layers))

    def forward(self, x):
        for layer in self._layers:
            x = layer(x)
        return F.relu(x)


class Encoder(nn.Module):
    def __init__(self, in_channels, hidden, layers, res_hidden):
        super().__init__()
        self._conv_1 = nn.Conv2d(in_channels, hidden // 2, 4, 2, 1)
        self._conv_2 = nn.Conv2d(hidden // 2, hidden, 4, 2, 1)
        self._conv_3 = nn.Conv2d(hidden, hidden, 3, 1, 1)
        self._residual_stack = ResidualStack(hidden, layers, res_hidden)

    def forward(self, x):
        x = F.relu(self._conv_2(F.relu(self._conv_1(x))))
        return self._residual_stack(self._conv_3(x))


class Decoder(nn.Module):
    def __init__(self, in_channels, hidden, layers, res_hidden, out_channels):
        super().__init__()
        self._conv_1 = nn.Conv2d(in_channels, hidden, 3, 1, 1)
        self._residual_stack = ResidualStack(hidden, layers, res_hidden)
        self._conv_trans_1 = nn.ConvTranspose2d(hidden, hidden // 2, 4, 2, 1)
        self._conv_trans_2 = nn.ConvTranspose2d(hidden // 2, out_channels, 4, 2, 1)

    def forward(self, x):
        x = self._residual_stack(self._conv_1(x))
        return self._conv_trans_2(F.relu(self._conv_trans_1(x)))


class VectorQuantizer(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost):
        super().__init__()
        self._embedding_dim, self._num_embeddings = embedding_dim, num_embeddings
        self._embedding = nn.Embedding(num_embeddings, embedding_dim)
        self._embedding.weight.data.uniform_(-1 / num_embeddings, 1 / num_embeddings)
        self._commitment_cost = commitment_cost

    def forward(self, inputs):
        inputs = inputs.permute(0, 2, 3, 1).contiguous()  # NCHW -> NHWC
        flat = inputs.view(-1, self._embedding_dim)
        distances = (torch.sum(flat ** 2, dim=1, keepdim=True) + torch.sum(self._embedding.weight ** 2, dim=1)
                     - 2 * torch.matmul(flat, self._embedding.weight.t()))
        indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(indices.shape[0], self._num_embeddings, device=inputs.device)
        encodings.scatter_(1, indices, 1)
        by_matmul = torch.matmul(encodings, self._embedding.weight).view(inputs.shape)
        quantized = F.embedding(indices.squeeze(1), self._embedding.weight).view(inputs.shape)
        quantized = 0.5 * (quantized + by_matmul)  # the same vectors, two ways
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        q_latent_loss = F.mse_loss(quantized, inputs.detach())
        loss = q_latent_loss + self._commitment_cost * e_latent_loss
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, indices.view(inputs.shape[:-1])


class VQVAE(nn.Module):
    """``forward(x)`` with x (N, 3, H, W), H and W multiples of 4 -> ``(loss, x_recon, perplexity, indices)``."""

    def __init__(self, hidden=16, res_layers=1, res_hidden=8, num_embeddings=12, embedding_dim=6,
                 commitment_cost=0.25):
        super().__init__()
        self._encoder = Encoder(3, hidden, res_layers, res_hidden)
        self._pre_vq_conv = nn.Conv2d(hidden, embedding_dim, 1, 1)
        self._vq_vae = VectorQuantizer(num_embeddings, embedding_dim, commitment_cost)
        self._decoder = Decoder(embedding_dim, hidden, res_layers, res_hidden, 3)

    def forward(self, x):
        loss, quantized, perplexity, indices = self._vq_vae(self._pre_vq_conv(self._encoder(x)))
        return loss, self._decoder(quantized), perplexity, indices


def vqvae_small():
    return VQVAE()
