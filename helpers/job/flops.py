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
Norms, rotary, softmax and the optimizer are not counted (as in the paper). A MoE model's leading
`first_k_dense` layers count a dense MLP.

Megatron-LM's own count (`num_floating_point_operations`, megatron/training/training.py: its
throughput log and its checkpoints' FLOPs so far) differs in two terms, which tests/unit/test_flops.py
holds against it: it takes half the s x s square (the causal mask) and leaves out the router. Not
covered: multi-latent attention and Mamba hybrids (counted here as ordinary attention layers)."""
from __future__ import annotations

from helpers.job.models import ModelPreset

FORMULA = ("FLOPs/token = 3 * [L * (2h*d*(a+2g) + 2s*a*(dk+dv) + 2*a*dv*h + 2h*F*n [MoE: k*2h*Fe*n + 2h*E]) "
           "+ 2h*V]  (Narayanan et al. 2021 without recompute; = 72*L*h^2*(1 + s/6h + V/12hL) for MHA, "
           "FFN 4h, GeLU)")


def projections(model: ModelPreset) -> int:
    """Forward FLOPs per token of one layer's QKV and output projections."""
    h, a, g = model.hidden_size, model.num_attention_heads, model.kv_heads
    d = model.kv_channels or h // a
    return 2 * h * d * (a + 2 * g) + 2 * a * d * h


def attention_core(model: ModelPreset, seq_len: int) -> int:
    """Forward FLOPs per token of one layer's scores and values, over the full s x s square."""
    d = model.kv_channels or model.hidden_size // model.num_attention_heads
    return 2 * seq_len * model.num_attention_heads * (d + d)


def mlp(model: ModelPreset, moe: bool) -> int:
    """Forward FLOPs per token of one layer's MLP: dense, or (`moe`) the top-k routed experts, the
    shared experts and the router."""
    h, n = model.hidden_size, 3 if model.gated else 2
    if not moe:
        return 2 * h * model.ffn_hidden_size * n
    return (model.moe_router_topk * 2 * h * model.expert_ffn * n + 2 * h * model.num_experts
            + 2 * h * (model.moe_shared_expert_intermediate_size or 0) * n)


def logits(model: ModelPreset) -> int:
    """Forward FLOPs per token of the output layer."""
    return 2 * model.hidden_size * model.vocab_size


def flops_per_token(model: ModelPreset, seq_len: int) -> int:
    """Forward + backward FLOPs per token of the whole model (the leading `first_k_dense` layers of a
    MoE model with a dense MLP)."""
    attention = projections(model) + attention_core(model, seq_len)
    if not model.is_moe:
        return 3 * (model.num_layers * (attention + mlp(model, moe=False)) + logits(model))
    moe_layers = model.num_layers - model.first_k_dense
    layers = moe_layers * (attention + mlp(model, moe=True)) + model.first_k_dense * (attention + mlp(model, moe=False))
    return 3 * (layers + logits(model))


def mfu(tokens_per_s: float, model: ModelPreset, seq_len: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the device's dense peak."""
    return tokens_per_s * flops_per_token(model, seq_len) / peak_flops
