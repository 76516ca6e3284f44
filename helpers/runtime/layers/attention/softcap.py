"""SoftcapCoreAttention replaces: Megatron-Bridge's Gemma2DotProductAttention (a TE-spec module;
torch SDPA cannot cap scores). Gemma 2 caps every attention score softly before the softmax,
cap * tanh(score / cap), and scales scores by 1/sqrt(query_pre_attn_scalar), not 1/sqrt(head_dim).

The scores are computed in full ([b, heads, s, s], as Megatron's local attention does), capped,
masked (causal, and the sliding window on the layers Megatron's window_attn_skip_freq picks), then
softmax in float32 and the values. Grouped-query heads share their K/V. Context parallel is refused
(helpers/job/rules/builder.py names it before start)."""
from __future__ import annotations

import torch


class SoftcapCoreAttention(torch.nn.Module):
    def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str = "self",
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 k_channels: int | None = None, v_channels: int | None = None, cp_comm_type=None,
                 pg_collection=None, **_unused):
        super().__init__()
        from helpers.runtime.layers.attention.core import layer_window

        if config.context_parallel_size > 1:
            raise ValueError("soft-capped attention is built for cp=1 only")
        self.cap = float(config.attn_logit_softcapping)
        scalar = getattr(config, "query_pre_attn_scalar", None) or config.kv_channels
        self.scale = softmax_scale if softmax_scale is not None else scalar ** -0.5
        self.window = layer_window(config, layer_number)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        """query [s, b, heads, d], key/value [s, b, kv_heads, d] -> [s, b, heads * d]."""
        from helpers.runtime.layers.attention.sdpa import sliding_window

        if attention_bias is not None or packed_seq_params is not None:
            raise ValueError("attention bias and packed sequences are not built for soft-capped attention")
        sq, b, heads, _ = query.shape
        sk, kv_heads = key.shape[0], key.shape[2]
        q = query.permute(1, 2, 0, 3)  # [b, heads, s, d]
        k, v = (t.permute(1, 2, 0, 3).repeat_interleave(heads // kv_heads, dim=1) for t in (key, value))
        scores = torch.matmul(q, k.transpose(-1, -2)).float() * self.scale
        scores = self.cap * torch.tanh(scores / self.cap)
        q_pos = torch.arange(sk - sq, sk, device=query.device)
        k_pos = torch.arange(sk, device=query.device)
        allowed = k_pos[None, :] <= q_pos[:, None] if attention_mask is None else ~attention_mask
        if self.window is not None:
            allowed = sliding_window(allowed, q_pos, k_pos, self.window)
        probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).to(v.dtype)
        if self.training and self.dropout:
            probs = torch.nn.functional.dropout(probs, self.dropout)
        out = torch.matmul(probs, v)  # [b, heads, s, d]
        return out.permute(2, 0, 1, 3).reshape(sq, b, heads * value.shape[-1])
