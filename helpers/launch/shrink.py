"""A cluster-size job shrunk to run on CPU: the same layout (TP, PP, VPP, CP, EP, ETP, SP, the
distributed optimizer, overlap, recompute) with the model narrow and shallow, on the fewest ranks the
layout needs. For a job read from Megatron-LM or a Bridge recipe (launch/from_megatron.py) or any
JobSpec, e.g. the advisor's pick.

    small, how = shrink(spec, iters=3)   # how: what changed, as "hidden_size 4096 -> 64"
"""
from __future__ import annotations

import dataclasses
import math

from helpers.job.spec import JobSpec


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` at or above `value`."""
    return -(-value // multiple) * multiple


def shrink(spec: JobSpec, hidden: int = 64, layers: int = 4, seq_len: int = 64, iters: int = 5,
           vocab: int = 512, schedule_of: JobSpec | None = None) -> tuple[JobSpec, list[str]]:
    """The same layout (tp, pp, vpp, cp, ep, etp, sp, dist_opt, overlap, recompute) on CPU with the model
    narrow and shallow enough to run there, every size still divisible as the layout needs, on the fewest
    ranks both its dense and its expert grid fit (data parallel 1 unless EP x ETP needs more).
    The warm-up keeps its share of the schedule of `schedule_of` (default: `spec`'s). Returns the
    spec and what changed, as "hidden_size 4096 -> 64"."""
    m, tp, etp = spec.model_preset(), spec.tp, spec.expert_tp
    stages = spec.pp * (spec.vpp or 1)
    ratio = m.num_attention_heads // m.kv_heads
    groups = round_up(min(m.kv_heads, max(tp, 1)), tp)  # the fewest KV heads TP still divides
    heads = (groups * min(ratio, max(1, 4 // groups)) if m.num_query_groups
             else round_up(min(m.num_attention_heads, 4), tp))
    width = max(hidden, heads * 8)  # at least 8 per head
    scale = width / m.hidden_size
    new = dict(num_layers=round_up(min(m.num_layers, layers), stages), hidden_size=width, num_attention_heads=heads,
               num_query_groups=groups if m.num_query_groups else None,
               kv_channels=16 if m.kv_channels else None,
               ffn_hidden_size=round_up(max(1, round(m.ffn_hidden_size * scale)), tp),
               vocab_size=min(m.vocab_size, vocab), max_seq_len=min(spec.seq_len, seq_len))
    if m.is_moe:
        experts = round_up(min(m.num_experts, 8), spec.ep)
        new.update(num_experts=experts, moe_router_topk=min(m.moe_router_topk, experts),
                   moe_ffn_hidden_size=round_up(max(1, round(m.expert_ffn * scale)), etp),
                   first_k_dense=min(m.first_k_dense, new["num_layers"] - 1))
        if m.moe_shared_expert_intermediate_size:
            shared = round(m.moe_shared_expert_intermediate_size * scale)
            new["moe_shared_expert_intermediate_size"] = round_up(shared, tp)
    if m.multi_latent_attention:
        new.update(kv_lora_rank=round_up(32, tp), q_lora_rank=round_up(32, tp) if m.q_lora_rank else None,
                   qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16)
    if m.mtp_num_layers:  # planned, not built (helpers/job/rules/builder.py)
        new["mtp_num_layers"] = 0
    new = {k: x for k, x in new.items() if getattr(m, k) != x}
    world = math.lcm(spec.tp * spec.pp * spec.cp, etp * spec.ep * spec.pp)
    schedule = schedule_of or spec
    decay_end, warmup = max(schedule.lr_decay_end, 1), schedule.lr_warmup_iters
    short = min(spec.iters, iters)
    small = dataclasses.replace(
        spec, device="cpu", precision="auto", backend="auto", attention="auto", nproc=world,
        first_stage_layers=None, last_stage_layers=None, seq_len=min(spec.seq_len, seq_len),
        global_batch=spec.micro_batch * (world // (spec.tp * spec.pp * spec.cp)) * max(1, spec.pp), iters=short,
        lr_warmup_iters=min(warmup, decay_end - 1) * short // decay_end, lr_decay_iters=None,
        model_overrides={**spec.model_overrides, **new},
        # planned, not built: Megatron-FSDP runs as the distributed optimizer, FP8 weights as the precision's
        megatron_fsdp=None, dist_opt=spec.dist_opt or spec.megatron_fsdp is not None, fp8_param_gather=False)
    per_chunk = small.model_preset().num_layers // stages  # recompute counts layers within a model chunk
    if spec.recompute_num_layers is not None and spec.recompute_num_layers > per_chunk:
        small = dataclasses.replace(small, recompute_num_layers=per_chunk)
    how = [f"{k} {getattr(m, k)} -> {x}" for k, x in new.items()]
    said_otherwise = {"model_overrides", "nproc", "global_batch", "device", "precision"}  # the lines above and below
    for name in ["world_size", "global_batch_size"] + [f.name for f in dataclasses.fields(JobSpec)
                                                       if f.name not in said_otherwise]:
        if getattr(spec, name) != getattr(small, name):
            how.append(f"{name} {getattr(spec, name)} -> {getattr(small, name)}")
    how.append(f"precision {spec.precision} -> fp32 on cpu" if spec.precision != "fp32" else "device cpu")
    return small, how
