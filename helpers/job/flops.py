"""Training FLOPs per token of a GPT (forward + backward, no activation recompute), the count
Megatron's papers use for MFU, generalised beyond their FFN = 4h multi-head GPT.

Narayanan et al. 2021 (eq. 3 without recomputation): 72 B s L h^2 (1 + s/(6h) + V/(12 h L)) per
iteration of B sequences of s tokens. It counts every matrix multiply twice per multiply-add,
times 3 for forward + backward (backward = two GEMMs per forward GEMM), and the attention score
and value products over the full s x s square (no causal halving). Per token and layer, forward:
  QKV projection 2 h d (a + 2 g)   (a query heads, g key/value heads, d head size)
  scores and values 2 s a (dk + dv) (dk = dv = d except MLA)
  output projection 2 a dv h
  MLP 2 h F n (n = 2 weight matrices, 3 for a gated unit); MoE: top-k experts of width F_e,
  plus shared experts and the router (2 h E)
and once per token the logits 2 h V. With g = a, d = h/a, F = 4h, n = 2 this is the formula above.
Norms, rotary, softmax and the optimizer are not counted (as in the paper)."""
from __future__ import annotations

from helpers.job.models import ModelPreset

FORMULA = ("FLOPs/token = 3 * [L * (2h*d*(a+2g) + 2s*a*(dk+dv) + 2*a*dv*h + 2h*F*n [MoE: k*2h*Fe*n + 2h*E]) "
           "+ 2h*V]  (Narayanan et al. 2021 without recompute; = 72*L*h^2*(1 + s/6h + V/12hL) for MHA, "
           "FFN 4h, GeLU)")


def flops_per_token(model: ModelPreset, seq_len: int) -> float:
    h, a, g = model.hidden_size, model.num_attention_heads, model.kv_heads
    d = model.kv_channels or h // a
    n = 3 if model.gated else 2
    attention = 2 * h * d * (a + 2 * g) + 2 * seq_len * a * (d + d) + 2 * a * d * h
    if model.is_moe:
        mlp = model.moe_router_topk * 2 * h * model.expert_ffn * n + 2 * h * model.num_experts
        mlp += 2 * h * (model.moe_shared_expert_intermediate_size or 0) * n
    else:
        mlp = 2 * h * model.ffn_hidden_size * n
    return 3 * (model.num_layers * (attention + mlp) + 2 * h * model.vocab_size)


def mfu(tokens_per_s: float, model: ModelPreset, seq_len: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the device's dense peak."""
    return tokens_per_s * flops_per_token(model, seq_len) / peak_flops
