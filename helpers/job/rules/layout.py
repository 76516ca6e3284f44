"""The layout's named constraints: how the parallel sizes must fit the model and each other,
as Megatron-Core's TransformerConfig and parallel_state check them. Categories: world (process
counts), tensor (what TP splits), sequence (SP, sequence length), pipeline (layers across stages),
experts (EP/ETP), context (CP), batch. What the kit's worker builds is builder.py's."""
from __future__ import annotations

from helpers.job.models import ModelPreset
from helpers.job.rules import builder
from helpers.job.violation import Found, Violation, divisors
from helpers.job.sizes import PlacedSizes as Layout  # a Layout's fields (helpers/job/layout.py adds the ranks)


# ---- rules -------------------------------------------------------------------------------
def sizes(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("world")
    for k, val in dict(tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, etp=lay.expert_tp, vpp=lay.vpp or 1,
                       micro_batch=lay.micro_batch, seq_len=lay.seq_len, nproc=lay.world_size).items():
        if val < 1:
            v.add("size_positive", f"{k}={val} must be >= 1", f"set {k} to 1 or more")
    return v


def world(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("world")
    dense = lay.tp * lay.pp * lay.cp
    if lay.world_size % dense:
        v.add("world_divisible_dense",
              f"world size {lay.world_size} is not divisible by tp*pp*cp = {lay.tp}*{lay.pp}*{lay.cp} = {dense}",
              f"use a world size that is a multiple of {dense}")
    expert = lay.expert_tp * lay.ep * lay.pp
    if lay.world_size % expert:
        v.add("world_divisible_expert",
              f"world size {lay.world_size} is not divisible by etp*ep*pp = {lay.expert_tp}*{lay.ep}*{lay.pp} = {expert}",
              f"use a world size that is a multiple of {expert}, or change ep/etp")
    if lay.gpus_per_node and lay.world_size % lay.gpus_per_node:
        v.add("world_divisible_nodes",
              f"world size {lay.world_size} is not a multiple of gpus_per_node={lay.gpus_per_node}", "use whole nodes")
    if devices is not None and lay.world_size > devices:
        v.add("not_enough_devices", f"{lay.world_size} processes but only {devices} device(s) available",
              f"use at most {devices} processes, or run on CPU")
    return v


def tensor(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    """What TP splits: attention heads, KV groups, MLP and expert widths, Mamba heads."""
    v = Found("tensor")
    tp = lay.tp
    if model.num_attention_heads % tp:
        v.add("heads_divisible_by_tp", f"{model.num_attention_heads} attention heads are not divisible by tp={tp}",
              f"use tp in {divisors(model.num_attention_heads)}")
    g = model.kv_heads
    if g % tp and tp % g:  # Megatron replicates KV heads when tp is a multiple of the groups
        v.add("query_groups_divisible_by_tp",
              f"{g} query groups (KV heads) are neither a multiple nor a divisor of tp={tp}",
              f"use tp in {divisors(g)} or a multiple of {g}")
    if model.ffn_hidden_size % tp and model.layer_kinds()["mlp"]:
        v.add("ffn_divisible_by_tp", f"ffn_hidden_size {model.ffn_hidden_size} is not divisible by tp={tp}",
              f"use tp in {divisors(model.ffn_hidden_size)[:12]}")
    if model.hidden_size % tp:
        v.add("hidden_divisible_by_tp", f"hidden_size {model.hidden_size} is not divisible by tp={tp}",
              f"use tp in {divisors(model.hidden_size)[:12]}")
    shared = model.moe_shared_expert_intermediate_size
    if shared and shared % tp:  # shared experts are a dense MLP: split by TP, not ETP
        v.add("shared_expert_ffn_divisible_by_tp", f"shared-expert width {shared} is not divisible by tp={tp}",
              f"use tp in {divisors(shared)[:12]}")
    if model.multi_latent_attention:
        # The local spec's MLA down projections are column-parallel: their outputs split over TP.
        kv_down = model.kv_lora_rank + model.qk_pos_emb_head_dim
        if kv_down % tp:
            v.add("mla_kv_down_divisible_by_tp",
                  f"MLA's kv_lora_rank + qk_pos_emb_head_dim = {model.kv_lora_rank} + {model.qk_pos_emb_head_dim} "
                  f"= {kv_down} is not divisible by tp={tp}", f"use tp in {divisors(kv_down)[:12]}")
        if model.q_lora_rank and model.q_lora_rank % tp:
            v.add("mla_q_lora_divisible_by_tp", f"MLA's q_lora_rank {model.q_lora_rank} is not divisible by tp={tp}",
                  f"use tp in {divisors(model.q_lora_rank)[:12]}")
    if model.layer_kinds()["mamba"]:
        if model.mamba_num_heads % tp:
            v.add("mamba_heads_divisible_by_tp", f"{model.mamba_num_heads} Mamba heads are not divisible by tp={tp}",
                  f"use tp in {divisors(model.mamba_num_heads)}")
        if model.mamba_num_groups % tp:
            v.add("mamba_groups_divisible_by_tp",
                  f"{model.mamba_num_groups} Mamba groups are not divisible by tp={tp}",
                  f"use tp in {divisors(model.mamba_num_groups)}")
    return v


def sequence(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("sequence")
    if lay.sp and lay.tp == 1:
        v.add("sp_requires_tp", "sequence parallel splits activations across TP ranks but tp=1",
              "set tp >= 2 or turn sp off")
    if model.is_moe and lay.tp > 1 and not lay.sp:
        # Megatron-Core's MoELayer.forward raises a ValueError in training when TP > 1 and SP is off
        # (moe_layer.py); refused here so that the job fails before any process starts.
        v.add("moe_tp_requires_sp", f"MoE layers with tp={lay.tp} and sequence parallel off: Megatron-Core's MoE "
              "layer raises a ValueError in training when tensor parallelism runs without sequence parallelism",
              "turn sp on")
    if lay.sp and lay.tp > 1 and (lay.seq_len // lay.cp) % lay.tp:
        v.add("seq_divisible_by_tp_for_sp",
              f"sequence length per CP rank {lay.seq_len // lay.cp} is not divisible by tp={lay.tp}",
              f"use a sequence length that is a multiple of tp*cp = {lay.tp * lay.cp}")
    if lay.seq_len > model.max_seq_len:
        v.add("seq_len_too_long", f"seq_len {lay.seq_len} exceeds the model's {model.max_seq_len}",
              f"use seq_len <= {model.max_seq_len}")
    return v


def pipeline(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    """Layers across PP stages and VPP chunks, as TransformerConfig checks them (uneven first/last
    stages: each a multiple of vpp; the middle stages share the rest equally)."""
    v = Found("pipeline")
    L, pp, vpp = model.num_layers, lay.pp, lay.vpp or 1
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if lay.vpp and pp == 1:
        v.add("vpp_requires_pp", f"vpp={lay.vpp} needs pp > 1", "set pp >= 2 or vpp off")
    uneven = first is not None or last is not None
    if uneven and pp == 1:
        v.add("uneven_requires_pp", "uneven first/last stage layers need pp > 1", "set pp >= 2")
        return v
    if not uneven:
        if L % (pp * vpp):
            fix = f"use pp*vpp dividing {L} (pp in {divisors(L)})"
            if pp > 1 and vpp == 1 and suggest_uneven(L, pp):
                f_, l_ = suggest_uneven(L, pp)
                fix += f", or an uneven split: first_stage_layers={f_}, last_stage_layers={l_}"
            v.add("layers_divisible_by_pp", f"{L} layers are not divisible by pp*vpp = {pp}*{vpp} = {pp * vpp}", fix)
        return v
    for which, n in (("first", first), ("last", last)):
        if n is not None and n < 1:
            v.add("uneven_split_invalid", f"{which}_stage_layers={n} must be >= 1",
                  "give every stage at least one layer")
        elif n is not None and n % vpp:
            v.add("uneven_stage_divisible_by_vpp", f"{which}_stage_layers={n} is not divisible by vpp={vpp}",
                  f"use a multiple of {vpp}")
    rest = L - (first or 0) - (last or 0)
    middle = pp - (first is not None) - (last is not None)
    if rest < 0 or bool(rest) != bool(middle) or (middle and rest % middle):
        split = suggest_uneven(L, pp)
        v.add("uneven_split_invalid", f"first={first}, last={last} leaves {rest} layers for {middle} middle stage(s)",
              f"e.g. first_stage_layers={split[0]}, last_stage_layers={split[1]}" if split
              else f"use pp <= {L}: {L} layers cannot fill {pp} stages")
    elif middle and (rest // middle) % vpp:
        v.add("uneven_stage_divisible_by_vpp", f"{rest // middle} layers per middle stage are not divisible by vpp={vpp}",
              "change first/last so the middle stages hold a multiple of vpp layers")
    return v


def experts(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("experts")
    if not model.is_moe:
        if lay.ep > 1:
            v.add("ep_requires_moe", f"ep={lay.ep} but model {model.name} has no experts",
                  "set ep=1 or choose a MoE model")
        return v
    if model.num_experts % lay.ep:
        v.add("experts_divisible_by_ep", f"{model.num_experts} experts are not divisible by ep={lay.ep}",
              f"use ep in {divisors(model.num_experts)}")
    if model.expert_ffn % lay.expert_tp:
        v.add("expert_ffn_divisible_by_etp", f"expert ffn size {model.expert_ffn} is not divisible by etp={lay.expert_tp}",
              f"use etp in {divisors(model.expert_ffn)[:12]}")
    if model.moe_router_topk > model.num_experts:
        v.add("topk_exceeds_experts", f"top-{model.moe_router_topk} routing but only {model.num_experts} experts",
              f"use moe_router_topk <= {model.num_experts}")
    return v


def context(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("context")
    if lay.cp > 1 and lay.seq_len % (2 * lay.cp):
        v.add("seq_divisible_by_2cp",
              f"sequence length {lay.seq_len} is not divisible by 2*cp = {2 * lay.cp} "
              "(causal load balancing gives each CP rank two chunks)",
              f"use a sequence length that is a multiple of {2 * lay.cp}")
    if lay.cp > 1 and model.layer_kinds()["mamba"]:
        # Megatron's MambaContextParallel: an all-to-all turns each CP rank's sequence chunks into
        # the whole sequence for a share of the (TP-local) Mamba heads and groups.
        heads_tp, groups_tp = model.mamba_num_heads // lay.tp, max(model.mamba_num_groups // lay.tp, 1)
        if heads_tp % lay.cp:
            v.add("mamba_heads_divisible_by_tp_cp",
                  f"{model.mamba_num_heads} Mamba heads / tp={lay.tp} = {heads_tp} are not divisible by cp={lay.cp} "
                  "(context parallel gives each CP rank whole Mamba heads)",
                  f"use cp in {divisors(heads_tp)}")
        if groups_tp % lay.cp and lay.cp % groups_tp:
            v.add("mamba_groups_vs_cp",
                  f"{model.mamba_num_groups} Mamba groups / tp={lay.tp} = {groups_tp} is neither a multiple nor a "
                  f"divisor of cp={lay.cp}", f"use cp in {divisors(groups_tp)} or a multiple of {groups_tp}")
    return v


def batch(lay: Layout, model: ModelPreset, devices) -> list[Violation]:
    v = Found("batch")
    if lay.world_size % (lay.tp * lay.pp * lay.cp):
        return v  # dp is undefined; world_divisible_dense already says why
    per_step = lay.micro_batch * lay.dp
    gb = lay.global_batch_size
    if gb % per_step or gb < per_step:
        v.add("global_batch_divisible",
              f"global batch {gb} is not a positive multiple of micro_batch*dp = {lay.micro_batch}*{lay.dp} = {per_step}",
              f"use a global batch that is a multiple of {per_step}")
    elif lay.vpp and lay.pp > 1 and (gb // per_step) % lay.pp:
        v.add("microbatches_divisible_by_pp_for_vpp",
              f"the interleaved schedule needs the number of microbatches ({gb // per_step}) "
              f"to be a multiple of pp={lay.pp}",
              f"use a global batch that is a multiple of {per_step * lay.pp}")
    return v


RULES = [world, tensor, sequence, pipeline, experts, context, batch]


def validate(lay: Layout, model: ModelPreset, devices: int | None = None) -> list[Violation]:
    """Every constraint `lay` breaks for `model` (empty = valid): these rules and what the backend
    builds (builder.py). `devices`: accelerators available (None = CPU processes, no limit)."""
    found = sizes(lay, model, devices)
    if found:
        return found  # the other rules divide by these sizes
    return check(lay, model, devices) + builder.layout(lay, model, devices)


def check(lay: Layout, model: ModelPreset, devices: int | None) -> list[Violation]:
    """Every layout rule but `sizes`, which the caller runs first (the others divide by the sizes)."""
    return [found for rule in RULES for found in rule(lay, model, devices)]


def uneven_splits(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Every (first, last) stage layer count the pipeline rule accepts for `num_layers` on `pp`
    stages (the middle stages equal) whose busiest stage holds as few layers as any split allows:
    the splits equally short on layers. Which of them to run is a question of memory (the first
    stage holds the most micro batches in flight under 1F1B) and of the last stage's output layer:
    the memory planner and the time model answer it. 28 layers, pp=8 -> middle stages of 4:
    [(1, 3), (2, 2), (3, 1)]."""
    if pp < 2:
        return []
    options = []
    for middle in [0] if pp == 2 else range(1, num_layers + 1):
        rest = num_layers - middle * (pp - 2)
        if rest < 2:
            break
        options += [(first, rest - first, max(first, rest - first, middle)) for first in range(1, rest)]
    if not options:  # fewer layers than stages
        return []
    fewest = min(busiest for *_, busiest in options)
    return [(first, last) for first, last, busiest in options if busiest == fewest]


def suggest_uneven(num_layers: int, pp: int) -> tuple[int, int] | None:
    """One split of uneven_splits for a fix message: the busiest stage as short as possible, and of
    those the one with the first stage no lighter than the last (the last also computes the output
    layer and the loss), closest to even. 27 layers, pp=2 -> (14, 13); 28, pp=8 -> (2, 2)."""
    splits = uneven_splits(num_layers, pp)
    return min(splits, key=lambda s: (s[0] < s[1], abs(s[0] - s[1]))) if splits else None
