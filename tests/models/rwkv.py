"""A twin of transformers' ``RwkvModel`` (RWKV-4; module structure and ``state_dict`` names: ``embeddings``,
``blocks.<i>.pre_ln`` (block 0 only), ``.ln1``, ``.ln2``, ``.attention.time_decay``/``time_first``/``time_mix_key``/
``key``/``output``, ``.feed_forward.time_mix_receptance``/``key``/``value``, ``ln_out``), small sizes.

Stresses: the token shift ``nn.ZeroPad2d((0, 0, 1, -1))`` (a negative pad: crop the last step, zero-pad the first);
time-mix interpolation with ``(1, 1, C)`` parameters; the WKV recurrence as transformers' CPU fallback
(``rwkv_linear_attention_cpu``: a Python loop over time with running max/exp rescaling, ``torch.zeros_like`` output
written per step, ``- 1e38`` initial max); squared-ReLU channel mix; with ``use_cache`` the five-tensor state
(built in the forward, written by ``state[i][:, :, layer_id] = ...``) returned; ``rescale_every``: in eval the
forward divides block weights in place once (``_rescale_layers``) and halves the hidden state every few blocks.
"""

from __future__ import annotations

import torch
from torch import nn


def rwkv_linear_attention_cpu(time_decay, time_first, key, value, state=None, return_state=False):
    _, seq_length, _ = key.size()
    output = torch.zeros_like(key)
    if state is None:
        num_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        den_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        max_state = torch.zeros_like(key[:, 0], dtype=torch.float32) - 1e38
    else:
        num_state, den_state, max_state = state
    time_decay = -torch.exp(time_decay)
    for current_index in range(seq_length):
        current_key = key[:, current_index].float()
        current_value = value[:, current_index]
        max_for_output = torch.maximum(max_state, current_key + time_first)
        e1 = torch.exp(max_state - max_for_output)
        e2 = torch.exp(current_key + time_first - max_for_output)
        numerator = e1 * num_state + e2 * current_value
        denominator = e1 * den_state + e2
        output[:, current_index] = (numerator / denominator).to(output.dtype)
        max_for_state = torch.maximum(max_state + time_decay, current_key)
        e1 = torch.exp(max_state + time_decay - max_for_state)
        e2 = torch.exp(current_key - max_for_state)
        num_state = e1 * num_state + e2 * current_value
        den_state = e1 * den_state + e2
        max_state = max_for_state
    if return_state or state is not None:
        state = [num_state, den_state, max_state]
    return output, state


class RwkvSelfAttention(nn.Module):
    def __init__(self, hidden: int, attention_hidden: int, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.time_decay = nn.Parameter(torch.empty(attention_hidden))
        self.time_first = nn.Parameter(torch.empty(attention_hidden))
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, hidden))
        self.time_mix_value = nn.Parameter(torch.empty(1, 1, hidden))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, hidden))
        self.key = nn.Linear(hidden, attention_hidden, bias=False)
        self.value = nn.Linear(hidden, attention_hidden, bias=False)
        self.receptance = nn.Linear(hidden, attention_hidden, bias=False)
        self.output = nn.Linear(attention_hidden, hidden, bias=False)

    def extract_key_value(self, hidden, state=None):
        if hidden.size(1) == 1 and state is not None:
            shifted = state[1][:, :, self.layer_id]
        else:
            shifted = self.time_shift(hidden)
            if state is not None:
                shifted[:, 0] = state[1][:, :, self.layer_id]
        key = hidden * self.time_mix_key + shifted * (1 - self.time_mix_key)
        value = hidden * self.time_mix_value + shifted * (1 - self.time_mix_value)
        receptance = hidden * self.time_mix_receptance + shifted * (1 - self.time_mix_receptance)
        key, value = self.key(key), self.value(value)
        receptance = torch.sigmoid(self.receptance(receptance))
        if state is not None:
            state[1][:, :, self.layer_id] = hidden[:, -1]
        return receptance, key, value, state

    def forward(self, hidden, state=None, use_cache=False):
        receptance, key, value, state = self.extract_key_value(hidden, state=state)
        layer_state = tuple(s[:, :, self.layer_id] for s in state[2:]) if state is not None else None
        rwkv, layer_state = rwkv_linear_attention_cpu(self.time_decay, self.time_first, key, value,
                                                      state=layer_state, return_state=use_cache)
        if layer_state is not None:
            state[2][:, :, self.layer_id] = layer_state[0]
            state[3][:, :, self.layer_id] = layer_state[1]
            state[4][:, :, self.layer_id] = layer_state[2]
        return self.output(receptance * rwkv), state


class RwkvFeedForward(nn.Module):
    def __init__(self, hidden: int, intermediate: int, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, hidden))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, hidden))
        self.key = nn.Linear(hidden, intermediate, bias=False)
        self.receptance = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, hidden, state=None):
        if hidden.size(1) == 1 and state is not None:
            shifted = state[0][:, :, self.layer_id]
        else:
            shifted = self.time_shift(hidden)
            if state is not None:
                shifted[:, 0] = state[0][:, :, self.layer_id]
        key = hidden * self.time_mix_key + shifted * (1 - self.time_mix_key)
        receptance = hidden * self.time_mix_receptance + shifted * (1 - self.time_mix_receptance)
        key = torch.square(torch.relu(self.key(key)))
        value = self.value(key)
        receptance = torch.sigmoid(self.receptance(receptance))
        if state is not None:
            state[0][:, :, self.layer_id] = hidden[:, -1]
        return receptance * value, state


class RwkvBlock(nn.Module):
    def __init__(self, hidden: int, intermediate: int, layer_id: int, eps: float = 1e-5):
        super().__init__()
        self.layer_id = layer_id
        if layer_id == 0:
            self.pre_ln = nn.LayerNorm(hidden, eps=eps)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)
        self.attention = RwkvSelfAttention(hidden, hidden, layer_id)
        self.feed_forward = RwkvFeedForward(hidden, intermediate, layer_id)

    def forward(self, hidden, state=None, use_cache=False):
        if self.layer_id == 0:
            hidden = self.pre_ln(hidden)
        attention, state = self.attention(self.ln1(hidden), state=state, use_cache=use_cache)
        hidden = hidden + attention
        feed_forward, state = self.feed_forward(self.ln2(hidden), state=state)
        return hidden + feed_forward, state


class RwkvModel(nn.Module):
    """``forward(input_ids, use_cache=False)`` -> ``(last_hidden_state,)``, or ``(last_hidden_state, state)`` with
    ``use_cache`` (state: five ``(B, hidden, layers)`` tensors, the last three float32)."""

    def __init__(self, vocab_size: int = 64, hidden: int = 16, intermediate: int = 32, layers: int = 2,
                 rescale_every: int = 0):
        super().__init__()
        self.hidden, self.num_layers, self.rescale_every = hidden, layers, rescale_every
        self.embeddings = nn.Embedding(vocab_size, hidden)
        self.blocks = nn.ModuleList(RwkvBlock(hidden, intermediate, i) for i in range(layers))
        self.ln_out = nn.LayerNorm(hidden)
        self.layers_are_rescaled = False

    def forward(self, input_ids, use_cache: bool = False):
        if input_ids.size(1) == 1 or not self.training:  # transformers' condition (use_cache defaults on in eval)
            self._rescale_layers()
        inputs_embeds = self.embeddings(input_ids)
        state = None
        if use_cache:
            shape = (inputs_embeds.size(0), self.hidden, self.num_layers)
            state = [torch.zeros(*shape, dtype=inputs_embeds.dtype if i <= 1 else torch.float32,
                                 device=inputs_embeds.device) for i in range(5)]
            state[4] -= 1e30
        hidden_states = inputs_embeds
        for idx, block in enumerate(self.blocks):
            hidden_states, state = block(hidden_states, state=state, use_cache=use_cache)
            if self.layers_are_rescaled and self.rescale_every > 0 and (idx + 1) % self.rescale_every == 0:
                hidden_states = hidden_states / 2
        hidden_states = self.ln_out(hidden_states)
        return (hidden_states, state) if use_cache else (hidden_states,)

    def _rescale_layers(self):
        if self.layers_are_rescaled == (not self.training):
            return
        if self.rescale_every > 0:
            with torch.no_grad():
                for block_id, block in enumerate(self.blocks):
                    factor = 2 ** int(block_id // self.rescale_every)
                    if self.training:
                        block.attention.output.weight.mul_(factor)
                        block.feed_forward.value.weight.mul_(factor)
                    else:
                        block.attention.output.weight.div_(factor)
                        block.feed_forward.value.weight.div_(factor)
        self.layers_are_rescaled = not self.training


def rwkv_small() -> nn.Module:
    return RwkvModel()


def rwkv_rescaled_small() -> nn.Module:
    """``rescale_every=1``: block 1's output weights halved in the first eval forward, the hidden state halved
    after every block."""
    return RwkvModel(rescale_every=1)
