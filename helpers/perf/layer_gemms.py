"""The forward GEMMs of one layer on one rank for one microbatch, by kind of layer (dense
attention + MLP, MoE, multi-latent attention, a hybrid's Mamba mixer), with TP, CP, EP and ETP
splitting them as Megatron-Core does. Tokens per rank: T = seq/CP x micro batch (with sequence
parallel the column-parallel GEMMs gather their input back to T tokens first).

  attention   QKV: T x h -> (a/tp + 2 max(g/tp, 1)) d (KV heads replicated when tp > g); out: a d/tp -> h
  MLA         [q down h -> q_lora, up q_lora -> a(qk+rope)/tp | q h -> a(qk+rope)/tp]; kv down
              h -> (kv_lora + rope)/tp (the kit's column-parallel down projections); kv up
              kv_lora -> a(qk + v)/tp; out a v/tp -> h
  MLP         fc1 h -> (2 if gated) F/tp; fc2 F/tp -> h
  MoE         router h -> E; each of the E/ep local experts gets T k etp/tp/(E/ep) tokens (balanced
              routing: every rank computes T k/tp token-expert pairs' worth of its ETP shard);
              shared experts as an MLP of their width
  Mamba       in_proj h -> (2 inner + 2 groups state + heads)/tp, out_proj inner/tp -> h, and the
              chunked scan (SSD) as the batched products it runs per chunk of Q tokens and head:
              C.B^T (Q x state x Q), its masked product with x (Q x Q x P), the chunk states
              B^T.x (state x Q x P) and their read-out C.states (Q x state x P)
The attention core (scores and values) is helpers/advisor/time/attention.py's."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf.gemm import Gemm


def tokens(lay: Layout) -> int:
    return lay.seq_len // lay.cp * lay.micro_batch


def attention(model: ModelPreset, lay: Layout) -> list[Gemm]:
    h, a, tp, T = model.hidden_size, model.num_attention_heads, lay.tp, tokens(lay)
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
        q = ([Gemm("q_down", T, h, model.q_lora_rank), Gemm("q_up", T, model.q_lora_rank, a * (qk + rope) // tp)]
             if model.q_lora_rank else [Gemm("q", T, h, a * (qk + rope) // tp)])
        return q + [Gemm("kv_down", T, h, max((model.kv_lora_rank + rope) // tp, 1)),
                    Gemm("kv_up", T, model.kv_lora_rank, a * (qk + v) // tp),
                    Gemm("proj", T, a * v // tp, h)]
    d = model.kv_channels or h // a
    kv_local = max(model.kv_heads // tp, 1)
    return [Gemm("qkv", T, h, (a // tp + 2 * kv_local) * d), Gemm("proj", T, a * d // tp, h)]


def mlp(model: ModelPreset, lay: Layout, width: int, name: str = "mlp") -> list[Gemm]:
    T, tp = tokens(lay), lay.tp
    return [Gemm(f"{name}.fc1", T, model.hidden_size, (2 if model.gated else 1) * width // tp),
            Gemm(f"{name}.fc2", T, width // tp, model.hidden_size)]


def routed_pairs(model: ModelPreset, lay: Layout) -> float:
    """Token-expert pairs one rank computes (on its ETP shard of each expert) per microbatch."""
    return tokens(lay) * model.moe_router_topk * lay.expert_tp / lay.tp


def moe(model: ModelPreset, lay: Layout) -> list[Gemm]:
    h, T = model.hidden_size, tokens(lay)
    local = model.num_experts // lay.ep
    per_expert = max(round(routed_pairs(model, lay) / local), 1)
    F = model.expert_ffn // lay.expert_tp
    out = [Gemm("router", T, h, model.num_experts),
           Gemm("experts.fc1", per_expert, h, (2 if model.gated else 1) * F, batch=local),
           Gemm("experts.fc2", per_expert, F, h, batch=local)]
    if model.moe_shared_expert_intermediate_size:
        out += mlp(model, lay, model.moe_shared_expert_intermediate_size, "shared_experts")
    return out


def mamba(model: ModelPreset, lay: Layout) -> list[Gemm]:
    h, tp, T = model.hidden_size, lay.tp, tokens(lay)
    heads, p, n = model.mamba_num_heads // tp, model.mamba_head_dim, model.mamba_state_dim
    groups = max(model.mamba_num_groups // tp, 1)
    inner = heads * p
    q = min(model.mamba_chunk_size, lay.seq_len)
    chunks = max(T // q, 1) * heads
    return [Gemm("in_proj", T, h, 2 * inner + 2 * groups * n + heads),
            Gemm("ssd.cb", q, n, q, batch=chunks), Gemm("ssd.intra", q, q, p, batch=chunks),
            Gemm("ssd.states", n, q, p, batch=chunks), Gemm("ssd.read_out", q, n, p, batch=chunks),
            Gemm("out_proj", T, inner, h)]


def of_kind(model: ModelPreset, lay: Layout, kind: str) -> list[Gemm]:
    """The forward GEMMs of a layer of `kind`: dense, moe, or a hybrid's M, *, -, E
    (helpers/memory/static.layer_kind)."""
    if kind == "M":
        return mamba(model, lay)
    if kind == "*":
        return attention(model, lay)
    if kind == "-":
        return mlp(model, lay, model.ffn_hidden_size)
    if kind == "E":
        return moe(model, lay)
    return attention(model, lay) + (moe(model, lay) if kind == "moe" else mlp(model, lay, model.ffn_hidden_size))


def output_layer(model: ModelPreset, lay: Layout) -> Gemm:
    return Gemm("output_layer", tokens(lay), model.hidden_size, model.vocab_size // lay.tp)


ATTENTION_KINDS = ("dense", "moe", "*")
MOE_KINDS = ("moe", "E")
