"""Twin of transformers' ``XLNetLMHeadModel`` (written here from the reference's structure): time-major
(``(len, batch, ...)``) relative attention by ``einsum`` with three biases (content ``r_w_bias``, position
``r_r_bias``, segment ``r_s_bias``), sinusoidal relative positions from ``klen`` down to ``-qlen``, ``rel_shift_bnij``
(reshape, drop a row, reshape, ``index_select``), segment embeddings through a one-hot of ``token_type_ids[:, None]
!= token_type_ids[None, :]``, the padding mask as ``- 1e30 * mask`` with the content stream's own position allowed
(``-eye``), and two-stream attention: with ``perm_mask`` and ``target_mapping`` a query stream starting from
``mask_emb`` attends through the permutation mask and is gathered/scattered by ``target_mapping`` einsums. Module
and ``state_dict`` names are transformers' (``transformer.word_embedding``, ``transformer.mask_emb``,
``transformer.layer.0.rel_attn.q`` (``(d_model, n_head, d_head)`` parameters), ``...rel_attn.seg_embed``,
``transformer.layer.0.ff.layer_1``, ``lm_loss``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class XLNetRelativeAttention(nn.Module):
    def __init__(self, d_model, n_head, d_head, layer_norm_eps=1e-12, dropout=0.1):
        super().__init__()
        self.n_head, self.d_head, self.d_model = n_head, d_head, d_model
        self.scale = 1 / (d_head ** 0.5)
        for name in ("q", "k", "v", "o", "r"):
            setattr(self, name, nn.Parameter(torch.empty(d_model, n_head, d_head).normal_(0, 0.02)))
        self.r_r_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.r_s_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.r_w_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.seg_embed = nn.Parameter(torch.zeros(2, n_head, d_head))
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    @staticmethod
    def rel_shift_bnij(x, klen=-1):
        x_size = x.shape
        x = x.reshape(x_size[0], x_size[1], x_size[3], x_size[2])
        x = x[:, :, 1:, :]
        x = x.reshape(x_size[0], x_size[1], x_size[2], x_size[3] - 1)
        return torch.index_select(x, 3, torch.arange(klen, device=x.device, dtype=torch.long))

    def rel_attn_core(self, q_head, k_head_h, v_head_h, k_head_r, seg_mat=None, attn_mask=None):
        ac = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_w_bias, k_head_h)  # content
        bd = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_r_bias, k_head_r)  # position
        bd = self.rel_shift_bnij(bd, klen=ac.shape[3])
        if seg_mat is None:
            ef = 0
        else:  # segment
            ef = torch.einsum("ibnd,snd->ibns", q_head + self.r_s_bias, self.seg_embed)
            ef = torch.einsum("ijbs,ibns->bnij", seg_mat, ef)
        attn_score = (ac + bd + ef) * self.scale
        if attn_mask is not None:
            if attn_mask.dtype == torch.float16:
                attn_score = attn_score - 65500 * torch.einsum("ijbn->bnij", attn_mask)
            else:
                attn_score = attn_score - 1e30 * torch.einsum("ijbn->bnij", attn_mask)
        attn_prob = self.dropout(F.softmax(attn_score, dim=3))
        return torch.einsum("bnij,jbnd->ibnd", attn_prob, v_head_h)

    def post_attention(self, h, attn_vec):
        attn_out = self.dropout(torch.einsum("ibnd,hnd->ibh", attn_vec, self.o))
        return self.layer_norm(attn_out + h)

    def forward(self, h, g, attn_mask_h, attn_mask_g, r, seg_mat, target_mapping=None):
        k_head_h = torch.einsum("ibh,hnd->ibnd", h, self.k)
        v_head_h = torch.einsum("ibh,hnd->ibnd", h, self.v)
        k_head_r = torch.einsum("ibh,hnd->ibnd", r.type(self.r.dtype), self.r)
        q_head_h = torch.einsum("ibh,hnd->ibnd", h, self.q)
        attn_vec_h = self.rel_attn_core(q_head_h, k_head_h, v_head_h, k_head_r, seg_mat, attn_mask_h)
        output_h = self.post_attention(h, attn_vec_h)
        if g is None:
            return output_h, None
        q_head_g = torch.einsum("ibh,hnd->ibnd", g, self.q)  # the query stream: positions, not contents
        if target_mapping is not None:
            q_head_g = torch.einsum("mbnd,mlb->lbnd", q_head_g, target_mapping)
            attn_vec_g = self.rel_attn_core(q_head_g, k_head_h, v_head_h, k_head_r, seg_mat, attn_mask_g)
            attn_vec_g = torch.einsum("lbnd,mlb->mbnd", attn_vec_g, target_mapping)
        else:
            attn_vec_g = self.rel_attn_core(q_head_g, k_head_h, v_head_h, k_head_r, seg_mat, attn_mask_g)
        return output_h, self.post_attention(g, attn_vec_g)


class XLNetFeedForward(nn.Module):
    def __init__(self, d_model, d_inner, layer_norm_eps=1e-12, dropout=0.1):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.layer_1 = nn.Linear(d_model, d_inner)
        self.layer_2 = nn.Linear(d_inner, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation_function = nn.GELU()

    def forward(self, inp):
        output = self.dropout(self.activation_function(self.layer_1(inp)))
        output = self.dropout(self.layer_2(output))
        return self.layer_norm(output + inp)


class XLNetLayer(nn.Module):
    def __init__(self, d_model, n_head, d_head, d_inner):
        super().__init__()
        self.rel_attn = XLNetRelativeAttention(d_model, n_head, d_head)
        self.ff = XLNetFeedForward(d_model, d_inner)
        self.dropout = nn.Dropout(0.1)

    def forward(self, output_h, output_g, attn_mask_h, attn_mask_g, r, seg_mat, target_mapping=None):
        output_h, output_g = self.rel_attn(output_h, output_g, attn_mask_h, attn_mask_g, r, seg_mat, target_mapping)
        if output_g is not None:
            output_g = self.ff(output_g)
        return self.ff(output_h), output_g


class XLNetModel(nn.Module):
    """``attn_type="bi"``, no memory, no ``bi_data``, ``clamp_len`` off."""

    def __init__(self, vocab_size=64, d_model=16, n_layer=2, n_head=2, d_inner=32):
        super().__init__()
        self.d_model = d_model
        self.word_embedding = nn.Embedding(vocab_size, d_model)
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, d_model))
        self.layer = nn.ModuleList([XLNetLayer(d_model, n_head, d_model // n_head, d_inner) for _ in range(n_layer)])
        self.dropout = nn.Dropout(0.1)

    @staticmethod
    def positional_embedding(pos_seq, inv_freq, bsz=None):
        sinusoid_inp = torch.einsum("i,d->id", pos_seq, inv_freq)
        pos_emb = torch.cat([torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)], dim=-1)[:, None, :]
        return pos_emb if bsz is None else pos_emb.expand(-1, bsz, -1)

    def relative_positional_encoding(self, qlen, klen, bsz=None):
        freq_seq = torch.arange(0, self.d_model, 2.0, dtype=torch.int64).float()
        inv_freq = 1 / torch.pow(10000, (freq_seq / self.d_model))
        fwd_pos_seq = torch.arange(klen, -qlen, -1.0, dtype=torch.int64).float()  # "bi": klen .. -qlen + 1
        return self.positional_embedding(fwd_pos_seq, inv_freq, bsz)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, perm_mask=None, target_mapping=None):
        input_ids = input_ids.transpose(0, 1).contiguous()  # time-major from here on
        qlen, bsz = input_ids.shape
        token_type_ids = token_type_ids.transpose(0, 1).contiguous() if token_type_ids is not None else None
        attention_mask = attention_mask.transpose(0, 1).contiguous() if attention_mask is not None else None
        perm_mask = perm_mask.permute(1, 2, 0).contiguous() if perm_mask is not None else None
        target_mapping = target_mapping.permute(1, 2, 0).contiguous() if target_mapping is not None else None
        klen = qlen
        dtype_float = self.word_embedding.weight.dtype

        input_mask = 1.0 - attention_mask if attention_mask is not None else None
        if input_mask is not None and perm_mask is not None:
            data_mask = input_mask[None] + perm_mask
        elif input_mask is not None:
            data_mask = input_mask[None]
        else:
            data_mask = perm_mask
        attn_mask = None if data_mask is None else (data_mask[:, :, :, None] > 0).to(dtype_float)
        if attn_mask is not None:  # the content stream always sees its own position
            non_tgt_mask = -torch.eye(qlen).to(attn_mask)
            non_tgt_mask = ((attn_mask + non_tgt_mask[:, :, None, None]) > 0).to(attn_mask)
        else:
            non_tgt_mask = None

        output_h = self.dropout(self.word_embedding(input_ids))
        output_g = None
        if target_mapping is not None:
            output_g = self.dropout(self.mask_emb.expand(target_mapping.shape[0], bsz, -1))
        seg_mat = None
        if token_type_ids is not None:
            seg_mat = (token_type_ids[:, None] != token_type_ids[None, :]).long()
            seg_mat = F.one_hot(seg_mat, num_classes=2).to(dtype_float)
        pos_emb = self.dropout(self.relative_positional_encoding(qlen, klen, bsz=bsz).to(output_h.device))
        for layer_module in self.layer:
            output_h, output_g = layer_module(output_h, output_g, non_tgt_mask, attn_mask, pos_emb, seg_mat,
                                              target_mapping)
        output = self.dropout(output_g if output_g is not None else output_h)
        return output.permute(1, 0, 2).contiguous()


class XLNetLMHeadModel(nn.Module):
    def __init__(self, **config):
        super().__init__()
        self.transformer = XLNetModel(**config)
        self.lm_loss = nn.Linear(self.transformer.d_model, self.transformer.word_embedding.num_embeddings)
        self.lm_loss.weight = self.transformer.word_embedding.weight

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, perm_mask=None, target_mapping=None):
        return self.lm_loss(self.transformer(input_ids, attention_mask, token_type_ids, perm_mask, target_mapping))


def xlnet_small() -> nn.Module:
    """d_model 16, 2 heads of 8, two layers, tied ``lm_loss``."""
    return XLNetLMHeadModel()
