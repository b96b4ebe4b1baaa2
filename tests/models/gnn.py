"""Message-passing graph networks in pure torch (the forms PyTorch Geometric's layers compute, written without it):
a GCN layer (self loops, symmetric degree normalisation ``deg^-1/2[src] * deg^-1/2[dst]``, messages summed into
their targets by ``index_add_``), a GraphSAGE layer (neighbour mean and max by ``scatter_reduce("mean"/"amax",
include_self=False)``) and a GAT layer (attention logits per edge, ``leaky_relu``, the softmax over each target's
incoming edges by ``scatter_reduce("amax")`` for the maximum and ``index_add_`` for the sum), then a mean readout
over the nodes.

Inputs: node features ``x`` (N, F) float and ``edge_index`` (2, E) int64 (row 0: sources, row 1: targets); N and E
vary between graphs. Every node has at least one incoming edge in the test graphs (a node without one gets
``scatter_reduce``'s untouched value, 0 here, for mean and max).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def add_self_loops(edge_index, num_nodes):
    loops = torch.arange(num_nodes, device=edge_index.device).unsqueeze(0).repeat(2, 1)
    return torch.cat([edge_index, loops], dim=1)


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        n = x.size(0)
        edge_index = add_self_loops(edge_index, n)
        row, col = edge_index[0], edge_index[1]
        deg = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, col, torch.ones_like(col, dtype=x.dtype))
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0)
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        h = self.lin(x)
        out = torch.zeros(n, h.size(1), dtype=h.dtype, device=h.device)
        return out.index_add_(0, col, h[row] * norm.unsqueeze(-1)) + self.bias


class SAGEConv(nn.Module):
    """Mean and max neighbour aggregation, concatenated, plus the root's own projection."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin_l = nn.Linear(2 * in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x, edge_index):
        row, col = edge_index[0], edge_index[1]
        index = col.unsqueeze(-1).expand(-1, x.size(1))
        messages = x[row]
        mean = torch.zeros_like(x).scatter_reduce(0, index, messages, reduce="mean", include_self=False)
        amax = torch.zeros_like(x).scatter_reduce(0, index, messages, reduce="amax", include_self=False)
        return self.lin_l(torch.cat([mean, amax], dim=-1)) + self.lin_r(x)


class GATConv(nn.Module):
    def __init__(self, in_channels, out_channels, heads=2, negative_slope=0.2):
        super().__init__()
        self.heads, self.out_channels, self.negative_slope = heads, out_channels, negative_slope
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x, edge_index):
        n = x.size(0)
        edge_index = add_self_loops(edge_index, n)
        row, col = edge_index[0], edge_index[1]
        h = self.lin(x).view(n, self.heads, self.out_channels)
        alpha_src, alpha_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)  # (N, heads)
        alpha = F.leaky_relu(alpha_src[row] + alpha_dst[col], self.negative_slope)  # (E, heads)
        index = col.unsqueeze(-1).expand_as(alpha)
        most = torch.full((n, self.heads), float("-inf"), dtype=alpha.dtype, device=alpha.device)
        most = most.scatter_reduce(0, index, alpha, reduce="amax", include_self=True)
        alpha = (alpha - most[col]).exp()
        denominator = torch.zeros(n, self.heads, dtype=alpha.dtype, device=alpha.device).index_add_(0, col, alpha)
        alpha = alpha / (denominator[col] + 1e-16)
        out = torch.zeros_like(h).index_add_(0, col, h[row] * alpha.unsqueeze(-1))
        return out.reshape(n, self.heads * self.out_channels) + self.bias


class GraphNet(nn.Module):
    """``forward(x, edge_index)`` -> ``(node_embeddings (N, hidden), graph_logits (classes,))``."""

    def __init__(self, in_channels=5, hidden=8, classes=3):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.conv3 = GATConv(hidden, hidden // 2, heads=2)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.relu(self.conv2(x, edge_index))
        x = self.norm(F.elu(self.conv3(x, edge_index)))
        return x, self.head(x.mean(dim=0))


def graph_net_small():
    return GraphNet()


def random_graph(nodes, extra_edges, features=5, seed=0, dtype=torch.float32):
    """seed -> (x (N, F), edge_index (2, E)): a ring (every node has an incoming edge) plus random edges."""
    gen = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(nodes), (torch.arange(nodes) + 1) % nodes])
    extra = torch.randint(0, nodes, (2, extra_edges), generator=gen)
    return torch.randn(nodes, features, generator=gen, dtype=dtype), torch.cat([ring, extra], dim=1)
