"""HF Mamba (``transformers/models/mamba/modeling_mamba.py``: ``MambaForCausalLM`` with ``MambaMixer``'s
``slow_forward``, the path taken without the CUDA kernels) with HF's module structure and ``state_dict`` names
(``backbone.embeddings``, ``backbone.layers.<i>.norm``, ``.mixer.in_proj``, ``.mixer.conv1d``, ``.mixer.x_proj``,
``.mixer.dt_proj``, ``.mixer.A_log``, ``.mixer.D``, ``.mixer.out_proj``, ``backbone.norm_f``, ``lm_head`` tied to
the embeddings), so a checkpoint's keys match at full size.

Stresses: a causal depthwise Conv1d (padding ``k - 1`` on both sides, then cropped to the sequence length); the
selective scan written as a Python loop over the sequence (``for i in range(seq_len)``: unrolled by the capture, so
the port is built for the example's length); ``softplus``; ``exp`` of ``-exp(A_log)`` times the time steps; a
``matmul`` per step and ``stack`` of the steps; ``chunk``/``split`` of projections; RMSNorm in float32; the
residual kept in float32 (``residual_in_fp32``).
"""

from __future__ import annotations

import torch
from torch import nn


class MambaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MambaMixer(nn.Module):
    def __init__(self, hidden_size: int, state_size: int, conv_kernel: int, intermediate_size: int,
                 time_step_rank: int, use_conv_bias: bool = True, use_bias: bool = False):
        super().__init__()
        self.hidden_size, self.ssm_state_size = hidden_size, state_size
        self.conv_kernel_size, self.intermediate_size = conv_kernel, intermediate_size
        self.time_step_rank = time_step_rank
        self.conv1d = nn.Conv1d(intermediate_size, intermediate_size, bias=use_conv_bias, kernel_size=conv_kernel,
                                groups=intermediate_size, padding=conv_kernel - 1)
        self.act = nn.SiLU()
        self.in_proj = nn.Linear(hidden_size, intermediate_size * 2, bias=use_bias)
        self.x_proj = nn.Linear(intermediate_size, time_step_rank + state_size * 2, bias=False)
        self.dt_proj = nn.Linear(time_step_rank, intermediate_size, bias=True)
        A = torch.arange(1, state_size + 1, dtype=torch.float32)[None, :]
        A = A.expand(intermediate_size, -1).contiguous()
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(intermediate_size))
        self.out_proj = nn.Linear(intermediate_size, hidden_size, bias=use_bias)

    def slow_forward(self, input_states):
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        projected_states = self.in_proj(input_states).transpose(1, 2)
        hidden_states, gate = projected_states.chunk(2, dim=1)
        ssm_state = torch.zeros((batch_size, self.intermediate_size, self.ssm_state_size),
                                device=hidden_states.device, dtype=dtype)
        hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])
        ssm_parameters = self.x_proj(hidden_states.transpose(1, 2))
        time_step, B, C = torch.split(ssm_parameters, [self.time_step_rank, self.ssm_state_size,
                                                       self.ssm_state_size], dim=-1)
        discrete_time_step = self.dt_proj(time_step)
        discrete_time_step = nn.functional.softplus(discrete_time_step).transpose(1, 2)
        A = -torch.exp(self.A_log.float())
        discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
        discrete_B = discrete_time_step[:, :, :, None] * B[:, None, :, :].float()
        deltaB_u = discrete_B * hidden_states[:, :, :, None].float()
        scan_outputs = []
        for i in range(seq_len):
            ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
            scan_output = torch.matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))
            scan_outputs.append(scan_output[:, :, 0])
        scan_output = torch.stack(scan_outputs, dim=-1)
        scan_output = scan_output + (hidden_states * self.D[None, :, None])
        scan_output = scan_output * self.act(gate)
        return self.out_proj(scan_output.transpose(1, 2))

    def forward(self, hidden_states):
        return self.slow_forward(hidden_states)


class MambaBlock(nn.Module):
    def __init__(self, hidden_size: int, **mixer):
        super().__init__()
        self.residual_in_fp32 = True
        self.norm = MambaRMSNorm(hidden_size, eps=1e-5)
        self.mixer = MambaMixer(hidden_size, **mixer)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        if self.residual_in_fp32:
            residual = residual.to(torch.float32)
        hidden_states = self.mixer(hidden_states)
        return residual + hidden_states


class MambaModel(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, num_hidden_layers: int, **mixer):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(MambaBlock(hidden_size, **mixer) for _ in range(num_hidden_layers))
        self.norm_f = MambaRMSNorm(hidden_size, eps=1e-5)

    def forward(self, input_ids):
        hidden_states = self.embeddings(input_ids)
        for mixer_block in self.layers:
            hidden_states = mixer_block(hidden_states)
        return self.norm_f(hidden_states)


class MambaForCausalLM(nn.Module):
    """``forward(input_ids)``: token ids ``(B, T)`` -> logits ``(B, T, vocab)``."""

    def __init__(self, vocab_size: int = 64, hidden_size: int = 16, state_size: int = 4, num_hidden_layers: int = 2,
                 conv_kernel: int = 4, expand: int = 2, time_step_rank: int = 2):
        super().__init__()
        self.backbone = MambaModel(vocab_size, hidden_size, num_hidden_layers, state_size=state_size,
                                   conv_kernel=conv_kernel, intermediate_size=expand * hidden_size,
                                   time_step_rank=time_step_rank)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        self.lm_head.weight = self.backbone.embeddings.weight

    def forward(self, input_ids):
        return self.lm_head(self.backbone(input_ids).to(self.lm_head.weight.dtype)).float()


def mamba_small() -> MambaForCausalLM:
    return MambaForCausalLM()
