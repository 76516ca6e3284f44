"""Megatron's own estimate for the same configuration, next to the kit's plan.

Megatron-LM ships `megatron.training.theoretical_memory_usage` (in the megatron-core wheel); its
`report_theoretical_memory(args)` is what `pretrain` prints with its first logged iteration. It takes Megatron-LM's
argument namespace, so `megatron_args` builds one from a ModelPreset, a Layout and a Training.
What it does and does not count (see docs/memory.md for numbers):

* weights + optimizer: bf16 params + fp32 grads + fp32 main params + Adam = 18 bytes per parameter
  (6 + 12/DP with the distributed optimizer, experts over EDP), for the *most loaded* shard: it puts
  the input embedding *and* 1/PP of the layers on stage 0 and ignores uneven PP, VPP and DDP padding;
  precision is fixed to bf16.
* activations: Korthikanti et al. 2022, Table 2, with selective recomputation (the attention's s x s
  scores recomputed, not stored): (18 + 4F/h)/TP per token and hidden unit with SP (F the MLP width),
  printed only with --sequence-parallel and --recompute-granularity selective, else 10 + 24/TP; for the first
  stage, dense MLP width for every layer (MoE top-k expansion, MLA and Mamba are not modelled; hybrid
  models are refused); 5% added for temporaries in the non-SP formula; no logits term when PP > 1.
"""
from __future__ import annotations

import contextlib
import io
import warnings
from types import SimpleNamespace

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.plan import plan_memory
from helpers.memory.training import Training


def megatron_args(model: ModelPreset, lay: Layout, tr: Training) -> SimpleNamespace:
    moe = model.is_moe and not model.is_hybrid
    return SimpleNamespace(
        num_layers=model.num_layers, hidden_size=model.hidden_size, ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        kv_channels=model.kv_channels or model.hidden_size // model.num_attention_heads,
        group_query_attention=model.kv_heads != model.num_attention_heads, num_query_groups=model.kv_heads,
        num_experts=model.num_experts if moe else None, moe_router_topk=model.moe_router_topk,
        moe_ffn_hidden_size=model.expert_ffn if moe else None,
        moe_layer_freq=[0] * model.first_k_dense + [1] * (model.num_layers - model.first_k_dense) if moe else 1,
        moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        moe_latent_size=None, moe_shared_expert_gate=False, mtp_num_layers=None,
        swiglu=model.gated, normalization=model.normalization, add_bias_linear=model.add_bias_linear,
        multi_latent_attention=model.multi_latent_attention, q_lora_rank=model.q_lora_rank,
        kv_lora_rank=model.kv_lora_rank, qk_head_dim=model.qk_head_dim,
        qk_pos_emb_head_dim=model.qk_pos_emb_head_dim, v_head_dim=model.v_head_dim,
        padded_vocab_size=model.vocab_size, untie_embeddings_and_output_weights=True,
        tensor_model_parallel_size=lay.tp, pipeline_model_parallel_size=lay.pp,
        virtual_pipeline_model_parallel_size=lay.vpp, expert_model_parallel_size=lay.ep,
        expert_tensor_parallel_size=lay.expert_tp, context_parallel_size=lay.cp, world_size=lay.world_size,
        data_parallel_size=lay.dp, use_distributed_optimizer=tr.dist_opt, sequence_parallel=lay.sp,
        recompute_granularity=None if tr.recompute == "none" else tr.recompute,
        seq_length=lay.seq_len, micro_batch_size=lay.micro_batch,
        hybrid_override_pattern=model.hybrid_pattern, is_hybrid_model=model.is_hybrid,
    )


def megatron_estimate(model: ModelPreset, lay: Layout, tr: Training) -> dict | None:
    """{"weights_optimizer", "activations", "total"} in bytes from Megatron's functions, plus "params"
    (derived from its 18 bytes per parameter when the layout is a single non-distributed rank);
    None for hybrid (Mamba) models, which Megatron's estimator refuses."""
    if model.is_hybrid:
        return None
    from helpers.job.import_phase import without_modelopt

    with warnings.catch_warnings(), without_modelopt():
        warnings.simplefilter("ignore")
        from megatron.training import theoretical_memory_usage as tmu
    args = megatron_args(model, lay, tr)
    mb = tmu.NUM_BYTES_IN_MEGABYTE
    M = lay.global_batch_size // (lay.micro_batch * lay.dp)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints on rank 0
        weights = tmu.compute_weight_and_optimizer_memory(args)
        if lay.sp and tr.recompute == "selective":
            act = tmu.compute_activation_memory(args, num_microbatches=M)
        else:
            act = tmu.compute_activation_memory_without_sp(args, num_microbatches=M)
    out = {"weights_optimizer": weights, "activations": act, "total": weights + act, "unit_mb": mb}
    if lay.world_size == 1 and not tr.dist_opt:
        out["params"] = round(weights / 18)
    return out


def compare(model: ModelPreset, lay: Layout, tr: Training = Training()) -> dict:
    """The kit's first-stage plan and Megatron's estimate, in bytes, term by term."""
    plan = plan_memory(model, lay, tr)
    first = plan.stages[0]
    worst = max(plan.stages, key=lambda s: s.allocated_bytes)
    static = sum(first.terms[k] for k in ("parameters", "gradients", "main_params", "optimizer_states"))
    est = megatron_estimate(model, lay, tr)
    return {
        "model": model.name, "layout": lay.describe(),
        "kit_static_first": static, "kit_activations_first": first.terms["activations"] + first.terms["logits_loss"],
        "kit_peak_first": first.allocated_bytes, "kit_peak": worst.allocated_bytes, "kit_peak_stage": worst.label,
        "kit_reserved": plan.reserved_bytes,
        "megatron_weights_optimizer": est and est["weights_optimizer"],
        "megatron_activations": est and est["activations"], "megatron_total": est and est["total"],
    }
