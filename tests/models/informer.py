"""Informer's ProbSparse self-attention (HF ``InformerProbSparseAttention``, the paper's ``ProbAttention``) in two
forms: HF's, which draws the key sample with ``torch.randint`` in every forward (eval too), and its deterministic
core with the sample passed in: each query's sparsity measure ``max - mean`` over its sampled logits, the top-u queries
(``topk(sorted=False)``: torch leaves their order to the kernel), their attention gathered by three broadcast
index tensors, and written by the same indices into a copy of V's mean expanded over the queries."""

from __future__ import annotations

import math

import torch
from torch import nn


def prob_sparse_attention(q, k, v, index_sample, n_top):
    """(B, H, L, D) queries/keys/values, (L_Q, sample_k) key indices -> (B, H, L_Q, D)."""
    B, H, L_Q, D = q.shape
    L_K = k.shape[2]
    k_sample = k.unsqueeze(-3).expand(B, H, L_Q, L_K, D)[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
    q_k_sample = torch.matmul(q.unsqueeze(-2), k_sample.transpose(-2, -1)).squeeze(-2)
    sparsity = q_k_sample.max(-1)[0] - torch.div(q_k_sample.sum(-1), L_K)
    top = sparsity.topk(n_top, sorted=False)[1]
    batch, head = torch.arange(B)[:, None, None], torch.arange(H)[None, :, None]
    attn = torch.softmax(torch.matmul(q[batch, head, top, :], k.transpose(-2, -1)) / math.sqrt(D), dim=-1)
    context = v.mean(dim=-2).unsqueeze(-2).expand(B, H, L_Q, v.shape[-1]).clone()
    context[batch, head, top, :] = torch.matmul(attn, v)
    return context


class ProbSparseCore(nn.Module):
    def __init__(self, n_top=3):
        super().__init__()
        self.n_top = n_top

    def forward(self, q, k, v, index_sample):
        return prob_sparse_attention(q, k, v, index_sample, self.n_top)


class SampledProbSparse(nn.Module):
    """HF's form: ``u = factor * ceil(log(L))`` keys drawn by ``torch.randint`` on every call."""

    def __init__(self, factor=1):
        super().__init__()
        self.factor = factor

    def forward(self, q, k, v):
        L_Q, L_K = q.shape[2], k.shape[2]
        u_part = min(self.factor * math.ceil(math.log1p(L_K)), L_K)
        u = min(self.factor * math.ceil(math.log1p(L_Q)), L_Q)
        return prob_sparse_attention(q, k, v, torch.randint(0, L_K, (L_Q, u_part)), u)
