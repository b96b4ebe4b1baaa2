"""A twin of transformers' ``SiglipModel`` as ``modeling_siglip.py`` writes it in the 4.4x releases (eager
attention; module structure and ``state_dict`` names: ``vision_model.embeddings.patch_embedding`` /
``position_embedding``, ``vision_model.encoder.layers.<i>.self_attn.q_proj`` / ``k_proj`` / ``v_proj`` /
``out_proj``, ``.layer_norm1``, ``.mlp.fc1`` / ``fc2``, ``.layer_norm2``, ``vision_model.post_layernorm``,
``vision_model.head.probe`` / ``.attention.in_proj_weight`` / ``.layernorm`` / ``.mlp``, ``text_model.embeddings
.token_embedding`` / ``position_embedding``, ``text_model.encoder.*``, ``text_model.final_layer_norm``,
``text_model.head``, ``logit_scale``, ``logit_bias``; ``position_ids`` non-persistent buffers), small sizes.

Stresses: two towers in one forward; the vision tower's patch conv flattened to tokens, its multihead attention
pooling head (a learned probe ``repeat``-ed to the batch querying the tokens through ``nn.MultiheadAttention``,
then a residual MLP, row 0 taken); the text tower pooled on the last token through a linear head, its padding mask
built by ``_prepare_4d_attention_mask`` (``masked_fill`` of the inverted mask with ``finfo.min``); both embeddings
L2-normalised (``x / x.norm(p=2, dim=-1, keepdim=True)``) and the sigmoid-loss logits ``text @ image.T *
logit_scale.exp() + logit_bias`` and their transpose; tanh-GELU MLPs, softmax in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.llm_variants import PytorchGELUTanh


class SiglipVisionEmbeddings(nn.Module):
    def __init__(self, num_channels, hidden_size, image_size, patch_size):
        super().__init__()
        self.patch_size = patch_size
        self.patch_embedding = nn.Conv2d(num_channels, hidden_size, kernel_size=patch_size, stride=patch_size,
                                         padding="valid")
        self.num_patches = (image_size // patch_size) ** 2
        self.num_positions = self.num_patches
        self.position_embedding = nn.Embedding(self.num_positions, hidden_size)
        self.register_buffer("position_ids", torch.arange(self.num_positions).expand((1, -1)), persistent=False)

    def forward(self, pixel_values):
        target_dtype = self.patch_embedding.weight.dtype
        patch_embeds = self.patch_embedding(pixel_values.to(dtype=target_dtype))
        embeddings = patch_embeds.flatten(2).transpose(1, 2)
        return embeddings + self.position_embedding(self.position_ids)


class SiglipTextEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position_embeddings):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, hidden_size)
        self.position_embedding = nn.Embedding(max_position_embeddings, hidden_size)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids):
        seq_length = input_ids.shape[-1]
        position_ids = self.position_ids[:, :seq_length]
        return self.token_embedding(input_ids) + self.position_embedding(position_ids)


class SiglipAttention(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        self.embed_dim = hidden_size
        self.num_heads = heads
        self.head_dim = hidden_size // heads
        self.scale = self.head_dim ** -0.5
        self.dropout = 0.0
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask=None):
        batch_size, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(batch_size, q_len, self.num_heads, self.head_dim)
        key_states = self.k_proj(hidden_states).view(batch_size, q_len, self.num_heads, self.head_dim)
        value_states = self.v_proj(hidden_states).view(batch_size, q_len, self.num_heads, self.head_dim)
        query_states, key_states = query_states.transpose(1, 2), key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scale
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return self.out_proj(attn_output.reshape(batch_size, q_len, self.embed_dim))


class SiglipMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.activation_fn = PytorchGELUTanh()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states):
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


class SiglipEncoderLayer(nn.Module):
    def __init__(self, hidden_size, heads, intermediate_size, eps):
        super().__init__()
        self.self_attn = SiglipAttention(hidden_size, heads)
        self.layer_norm1 = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = SiglipMLP(hidden_size, intermediate_size)
        self.layer_norm2 = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, hidden_states, attention_mask):
        hidden_states = hidden_states + self.self_attn(self.layer_norm1(hidden_states), attention_mask)
        return (hidden_states + self.mlp(self.layer_norm2(hidden_states)),)


class SiglipEncoder(nn.Module):
    def __init__(self, layers, **layer):
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(**layer) for _ in range(layers))

    def forward(self, inputs_embeds, attention_mask=None):
        hidden_states = inputs_embeds
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask)[0]
        return (hidden_states,)


class SiglipMultiheadAttentionPoolingHead(nn.Module):
    def __init__(self, hidden_size, heads, intermediate_size, eps):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, hidden_size))
        self.attention = nn.MultiheadAttention(hidden_size, heads, batch_first=True)
        self.layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = SiglipMLP(hidden_size, intermediate_size)

    def forward(self, hidden_state):
        batch_size = hidden_state.shape[0]
        probe = self.probe.repeat(batch_size, 1, 1)
        hidden_state = self.attention(probe, hidden_state, hidden_state)[0]
        residual = hidden_state
        hidden_state = self.layernorm(hidden_state)
        hidden_state = residual + self.mlp(hidden_state)
        return hidden_state[:, 0]


class SiglipVisionTransformer(nn.Module):
    def __init__(self, num_channels, image_size, patch_size, layers, hidden_size, heads, intermediate_size, eps):
        super().__init__()
        self.embeddings = SiglipVisionEmbeddings(num_channels, hidden_size, image_size, patch_size)
        self.encoder = SiglipEncoder(layers, hidden_size=hidden_size, heads=heads,
                                     intermediate_size=intermediate_size, eps=eps)
        self.post_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.head = SiglipMultiheadAttentionPoolingHead(hidden_size, heads, intermediate_size, eps)

    def forward(self, pixel_values):
        last_hidden_state = self.post_layernorm(self.encoder(self.embeddings(pixel_values))[0])
        return last_hidden_state, self.head(last_hidden_state)


def _prepare_4d_attention_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class SiglipTextTransformer(nn.Module):
    def __init__(self, vocab_size, max_position_embeddings, layers, hidden_size, heads, intermediate_size, eps):
        super().__init__()
        self.embeddings = SiglipTextEmbeddings(vocab_size, hidden_size, max_position_embeddings)
        self.encoder = SiglipEncoder(layers, hidden_size=hidden_size, heads=heads,
                                     intermediate_size=intermediate_size, eps=eps)
        self.final_layer_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.head = nn.Linear(hidden_size, hidden_size)

    def forward(self, input_ids, attention_mask=None):
        hidden_states = self.embeddings(input_ids)
        if attention_mask is not None:
            attention_mask = _prepare_4d_attention_mask(attention_mask, hidden_states.dtype)
        last_hidden_state = self.final_layer_norm(self.encoder(hidden_states, attention_mask)[0])
        return last_hidden_state, self.head(last_hidden_state[:, -1, :])


class SiglipModel(nn.Module):
    """``forward(input_ids, pixel_values, attention_mask=None)`` -> ``(logits_per_image (B_img, B_text),
    logits_per_text, text_embeds, image_embeds)``."""

    def __init__(self, vocab_size: int = 64, max_position_embeddings: int = 16, text_layers: int = 2,
                 image_size: int = 24, patch_size: int = 6, vision_layers: int = 2, hidden_size: int = 24,
                 heads: int = 4, intermediate_size: int = 40, eps: float = 1e-6):
        super().__init__()
        self.text_model = SiglipTextTransformer(vocab_size, max_position_embeddings, text_layers, hidden_size,
                                                heads, intermediate_size, eps)
        self.vision_model = SiglipVisionTransformer(3, image_size, patch_size, vision_layers, hidden_size, heads,
                                                    intermediate_size, eps)
        self.logit_scale = nn.Parameter(torch.randn(1))
        self.logit_bias = nn.Parameter(torch.randn(1))

    def forward(self, input_ids, pixel_values, attention_mask=None):
        image_embeds = self.vision_model(pixel_values)[1]
        text_embeds = self.text_model(input_ids, attention_mask)[1]
        image_embeds = image_embeds / image_embeds.norm(p=2, dim=-1, keepdim=True)
        text_embeds = text_embeds / text_embeds.norm(p=2, dim=-1, keepdim=True)
        logits_per_text = torch.matmul(text_embeds, image_embeds.t()) * self.logit_scale.exp() + self.logit_bias
        return logits_per_text.t(), logits_per_text, text_embeds, image_embeds


def siglip_small() -> SiglipModel:
    """24x24 images in 6x6 patches (16 tokens), texts up to 16 tokens."""
    return SiglipModel()
