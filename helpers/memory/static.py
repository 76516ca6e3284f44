"""Static memory, exactly: the parameter list every rank builds (Megatron-Core's GPT/MoE/MLA/Mamba
layers, per pipeline stage and virtual chunk) and the bytes of parameters, gradient buffers, fp32
main parameters and Adam states laid out as Megatron's DDP and distributed optimizer lay them out.
For the kit's models these equal what a live job holds, byte for byte (tests/jobs/test_memory.py)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.spec import FP8_LINEARS
from helpers.memory.training import Training


@dataclass(frozen=True)
class Param:
    name: str
    numel: int  # elements on this rank
    expert: bool = False  # routed-expert weight: sharded over EP x ETP, gradients reduced over EDP


def layer_kind(model: ModelPreset, i: int) -> str:
    """attention+mlp ('dense'), attention+moe ('moe'), or a hybrid layer's one mixer ('M', '*', '-', 'E')."""
    if model.is_hybrid:
        return model.hybrid_pattern[i]
    return "moe" if model.is_moe and i >= model.first_k_dense else "dense"


def _norm(model: ModelPreset, prefix: str, width: int) -> list[Param]:
    out = [Param(prefix + ".weight", width)]
    if model.normalization == "LayerNorm":
        out.append(Param(prefix + ".bias", width))
    return out


def _attention(model: ModelPreset, tp: int, p: str) -> list[Param]:
    h, a = model.hidden_size, model.num_attention_heads
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
        out = [Param(p + "linear_proj.weight", h * a * v // tp)]
        if model.q_lora_rank is None:
            out.append(Param(p + "linear_q_proj.weight", a * (qk + rope) * h // tp))
        else:
            out += [Param(p + "linear_q_down_proj.weight", model.q_lora_rank * h),
                    Param(p + "linear_q_up_proj.weight", a * (qk + rope) * model.q_lora_rank // tp)]
            out += _norm(model, p + "q_layernorm", model.q_lora_rank)
        out += [Param(p + "linear_kv_down_proj.weight", (model.kv_lora_rank + rope) * h),
                Param(p + "linear_kv_up_proj.weight", a * (qk + v) * model.kv_lora_rank // tp)]
        out += _norm(model, p + "kv_layernorm", model.kv_lora_rank)
        return out
    d = model.kv_channels or h // a
    g = max(model.kv_heads // tp, 1)  # KV heads are replicated when tp > groups
    out = [Param(p + "core_attention.softmax_offset", a // tp)] if model.attention_sinks else []
    out.append(Param(p + "linear_proj.weight", h * a * d // tp))
    if model.add_bias_linear:
        out.append(Param(p + "linear_proj.bias", h))
    if model.sandwich_norms:  # inside the output projection (helpers/runtime/layers/post_norm.py)
        out += _norm(model, p + "linear_proj.post_layernorm", h)
    out.append(Param(p + "linear_qkv.weight", (a // tp + 2 * g) * d * h))
    if model.add_bias_linear:
        out.append(Param(p + "linear_qkv.bias", (a // tp + 2 * g) * d))
    elif model.add_qkv_bias:
        out.append(Param(p + "linear_qkv.bias", (a // tp + 2 * g) * d))
    if model.qk_norm_full_width:  # the whole weight on every rank (helpers/runtime/layers/full_width_qk_norm.py)
        out += _norm(model, p + "q_layernorm", a * d) + _norm(model, p + "k_layernorm", model.kv_heads * d)
    elif model.qk_layernorm:
        out += _norm(model, p + "q_layernorm", d) + _norm(model, p + "k_layernorm", d)
    return out


def _mlp(model: ModelPreset, width: int, split: int, p: str, expert: bool = False) -> list[Param]:
    h, glu = model.hidden_size, 2 if model.gated else 1
    out = [Param(p + "linear_fc1.weight", glu * width // split * h, expert)]
    if model.add_bias_linear:
        out.append(Param(p + "linear_fc1.bias", glu * width // split, expert))
    out.append(Param(p + "linear_fc2.weight", h * width // split, expert))
    if model.add_bias_linear:
        out.append(Param(p + "linear_fc2.bias", h, expert))
    if model.sandwich_norms and not expert and p.endswith("mlp."):  # the dense MLP's (post_norm.py)
        out += _norm(model, p + "linear_fc2.post_layernorm", h)
    return out


def _moe(model: ModelPreset, lay: Layout, p: str) -> list[Param]:
    h, E = model.hidden_size, model.num_experts
    out = [Param(p + "router.weight", E * h)]  # replicated on every rank, reduced over DP
    if model.add_bias_linear:
        out.append(Param(p + "router.bias", E))
    for e in range(E // lay.ep):
        out += _mlp(model, model.expert_ffn, lay.expert_tp, f"{p}experts.local_experts.{e}.", expert=True)
    if model.moe_shared_expert_intermediate_size:  # a dense MLP, split by TP
        out += _mlp(model, model.moe_shared_expert_intermediate_size, lay.tp, p + "shared_experts.")
    return out


def _mamba(model: ModelPreset, tp: int, p: str) -> list[Param]:
    """Megatron-Core's MambaMixer (Mamba-2): in_proj -> (z, x, B, C, dt), depthwise conv over x,B,C,
    per-head A, D and dt bias, a gated norm over the inner width, out_proj."""
    h = model.hidden_size
    inner, heads = model.mamba_num_heads * model.mamba_head_dim, model.mamba_num_heads
    bc = 2 * model.mamba_num_groups * model.mamba_state_dim
    conv = (inner + bc) // tp
    return [Param(p + "in_proj.weight", (2 * inner + bc + heads) // tp * h),
            Param(p + "conv1d_weight", conv * 4), Param(p + "conv1d_bias", conv),  # d_conv = 4
            Param(p + "dt_bias", heads // tp), Param(p + "A_log", heads // tp), Param(p + "D", heads // tp),
            Param(p + "norm.weight", inner // tp), Param(p + "out_proj.weight", h * inner // tp)]


def layer_params(model: ModelPreset, lay: Layout, i: int) -> list[Param]:
    """The parameters layer `i` holds on one rank, in Megatron's module (named_parameters) order."""
    return list(_layer_params(model, lay.tp, lay.ep, lay.expert_tp, i))


@functools.lru_cache(maxsize=1024)  # they depend on TP, EP and ETP alone; the layout advisor plans thousands
def _layer_params(model: ModelPreset, tp: int, ep: int, etp: int, i: int) -> tuple[Param, ...]:
    return tuple(_build_layer_params(model, Layout(tp=tp, ep=ep, etp=etp), i))


def _build_layer_params(model: ModelPreset, lay: Layout, i: int) -> list[Param]:
    p, kind, h = f"decoder.layers.{i}.", layer_kind(model, i), model.hidden_size
    if model.is_hybrid:  # one norm + one mixer per layer
        if kind == "M":  # MambaLayer registers its mixer before its norm
            return _mamba(model, lay.tp, p + "mixer.") + _norm(model, p + "norm", h)
        mixer = {"*": lambda: _attention(model, lay.tp, p + "self_attention."),
                 "-": lambda: _mlp(model, model.ffn_hidden_size, lay.tp, p + "mlp."),
                 "E": lambda: _moe(model, lay, p + "mlp.")}[kind]()
        return _norm(model, p + {"*": "input_layernorm", "-": "pre_mlp_layernorm", "E": "pre_mlp_layernorm"}[kind],
                     h) + mixer
    out = _norm(model, p + "input_layernorm", h) + _attention(model, lay.tp, p + "self_attention.")
    out += _norm(model, p + "pre_mlp_layernorm", h)
    if kind == "moe":
        return out + _moe(model, lay, p + "mlp.")
    return out + _mlp(model, model.ffn_hidden_size, lay.tp, p + "mlp.")


def stage_layers(model: ModelPreset, lay: Layout) -> list[list[list[int]]]:
    """[stage][virtual chunk] -> global layer indices, as Megatron assigns them: uneven first/last
    stages take their counts, middle stages share the rest; each stage's layers are split evenly over
    its VPP chunks, and chunks run in order chunk 0 of every stage, then chunk 1, ..."""
    L, pp, vpp = model.num_layers, lay.pp, lay.vpp or 1
    counts = [L // pp] * pp
    if lay.first_stage_layers is not None or lay.last_stage_layers is not None:
        first = lay.first_stage_layers
        last = lay.last_stage_layers
        n_mid = pp - (first is not None) - (last is not None)
        rest = L - (first or 0) - (last or 0)
        mid = rest // n_mid if n_mid else 0
        counts = [mid] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
    out = [[[] for _ in range(vpp)] for _ in range(pp)]
    i = 0
    for v in range(vpp):
        for s in range(pp):
            n = counts[s] // vpp
            out[s][v] = list(range(i, i + n))
            i += n
    return out


def stage_patterns(model: ModelPreset, lay: Layout) -> list[str]:
    """A hybrid's layer pattern cut into pipeline stages, one string per stage ("MEM*|EMEM" ->
    ["MEM*", "EMEM"]), as Megatron's select_pipeline_segment cuts a pattern without '|': by
    layer counts (first/last_stage_layers for uneven splits). What a stage holds decides its
    memory: Mamba, attention and MoE layers differ in parameters and activations."""
    if not model.is_hybrid:
        raise ValueError(f"{model.name} has no hybrid layer pattern")
    return ["".join(model.hybrid_pattern[i] for c in stage for i in c) for stage in stage_layers(model, lay)]


def chunk_params(model: ModelPreset, lay: Layout, stage: int, chunk: int) -> list[Param]:
    """Every parameter of one model chunk (one GPTModel) on a rank of `stage`, in module order."""
    layers = stage_layers(model, lay)
    pp, vpp = lay.pp, lay.vpp or 1
    h = model.hidden_size
    out = []
    if stage == 0 and chunk == 0:
        out.append(Param("embedding.word_embeddings.weight", model.vocab_size // lay.tp * h))
    for i in layers[stage][chunk]:
        out += layer_params(model, lay, i)
    if stage == pp - 1 and chunk == vpp - 1:
        out += _norm(model, "decoder.final_layernorm", h)
        # tied embeddings: the output layer reuses the embedding where both live in this chunk;
        # on a later pipeline stage Megatron keeps its own copy (kept equal by the embedding group)
        if not (model.tied_embeddings and stage == 0 and chunk == 0):
            out.append(Param("output_layer.weight", model.vocab_size // lay.tp * h))
        out += _mtp_params(model, lay)
    return out


def _mtp_params(model: ModelPreset, lay: Layout) -> list[Param]:
    """Megatron's multi-token-prediction block on the last stage (DeepSeek-V3): per depth the norms
    of the embedding and of the hidden state, their concatenation projected back to the hidden size
    (column-parallel), one transformer layer like the model's last, and a final norm; the output
    layer is the model's own."""
    h, last = model.hidden_size, model.num_layers - 1
    out = []
    for k in range(model.mtp_num_layers):
        p = f"mtp.layers.{k}."
        out += _norm(model, p + "enorm", h) + _norm(model, p + "hnorm", h)
        out.append(Param(p + "eh_proj.weight", 2 * h * h // lay.tp))
        out += [Param(x.name.replace(f"decoder.layers.{last}.", p + "transformer_layer."), x.numel, x.expert)
                for x in layer_params(model, lay, last)]
        out += _norm(model, p + "final_layernorm", h)
    return out


_FP8_WEIGHTS = tuple(f"{name}.weight" for name in FP8_LINEARS)


def fp8_linear_numel(model: ModelPreset, lay: Layout, stage: int) -> int:
    """Weights of this stage that the kit's local FP8 linears quantise (helpers/runtime/layers/fp8_linear.py:
    attention and dense-MLP linears; experts, embedding and output layer stay bf16)."""
    return sum(p.numel for chunk in range(lay.vpp or 1) for p in chunk_params(model, lay, stage, chunk)
               if p.name.endswith(_FP8_WEIGHTS) and "experts." not in p.name)


def te_fp8_weight_numel(model: ModelPreset, lay: Layout, stage: int) -> int:
    """Weights of this stage that Transformer Engine's FP8 recipes cast to FP8: every TE linear's
    (attention, MLA's projections, dense MLPs, experts, Mamba's in/out projections); the embedding,
    the output layer and the router stay bf16."""
    return sum(p.numel for chunk in range(lay.vpp or 1) for p in chunk_params(model, lay, stage, chunk)
               if _te_fp8(p))


def _te_fp8(p: Param) -> bool:
    return p.name.endswith(".weight") and p.name.split(".")[-2].startswith(("linear_", "in_proj", "out_proj"))


def _buckets(params: list[Param], shards: int, dist_opt: bool, bucket_size: int | None) -> list[tuple]:
    """One DDP gradient buffer as Megatron lays it out: per bucket (start, end, [(start, end) of each
    parameter]). Parameters in reverse module order; a bucket closes once it holds `bucket_size`
    elements (None: one bucket); with the distributed optimizer each parameter starts on a
    64-element boundary and each bucket's end is padded to a multiple of lcm(shards, 128)."""
    align, div = (64, math.lcm(shards, 128)) if dist_opt else (1, 1)
    out, spans, start, first = [], [], 0, 0
    for p in reversed(params):
        start = -(-start // align) * align
        spans.append((start, start + p.numel))
        start += p.numel
        if bucket_size is not None and start - first >= bucket_size:
            out.append((first, -(-start // div) * div, spans))
            spans, start = [], out[-1][1]
            first = start
    if spans:
        out.append((first, -(-start // div) * div, spans))
    return out


def _buffer_numel(params: list[Param], shards: int, dist_opt: bool, bucket_size: int | None = None) -> int:
    """Elements of one DDP gradient buffer, padding included."""
    buckets = _buckets(params, shards, dist_opt, bucket_size)
    return buckets[-1][1] if buckets else 0


def _shard_numels(params: list[Param], shards: int, bucket_size: int | None = None) -> list[int]:
    """Real (non-padding) elements of each rank's distributed-optimizer shard of one buffer: its
    1/shards slice of every bucket."""
    out = [0] * shards
    for first, end, spans in _buckets(params, shards, True, bucket_size):
        size = (end - first) // shards
        for start, stop in spans:
            for r in range((start - first) // size, min((stop - 1 - first) // size, shards - 1) + 1):
                out[r] += min(stop, first + (r + 1) * size) - max(start, first + r * size)
    return out


@dataclass
class StaticMemory:
    """What one rank holds before activations: the live job's ranks.json has the same keys."""
    params: int
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    main_param_bytes: int

    def as_dict(self) -> dict:
        return dict(params=self.params, param_bytes=self.param_bytes, grad_bytes=self.grad_bytes,
                    optimizer_state_bytes=self.optimizer_state_bytes, main_param_bytes=self.main_param_bytes)


def static_memory(model: ModelPreset, lay: Layout, training: Training, stage: int = 0,
                  dp_rank: int = 0, edp_rank: int = 0) -> StaticMemory:
    """Exact static bytes of a rank at pipeline `stage` with data-parallel rank `dp_rank` (within
    DP x CP) and expert-data-parallel rank `edp_rank`; the shard a rank gets only matters with the
    distributed optimizer."""
    grad_el = 4 if training.grad_reduce_in_fp32 or training.precision == "fp32" else 2
    pb = training.param_bytes
    dense_shards, expert_shards = lay.dp * lay.cp, lay.edp
    if training.fsdp:
        return _fsdp_static(model, lay, training, stage, grad_el)
    n = grad = opt_el = 0
    for chunk in range(lay.vpp or 1):
        params = chunk_params(model, lay, stage, chunk)
        n += sum(p.numel for p in params)
        # Megatron's DDP buckets only the first pipeline stage's first chunk; every other is one bucket.
        bucket_size = training.bucket_size if stage == 0 and chunk == 0 else None
        for expert, shards, r in ((False, dense_shards, dp_rank), (True, expert_shards, edp_rank)):
            group = [p for p in params if p.expert == expert]
            if not group:
                continue
            grad += _buffer_numel(group, shards, training.dist_opt, bucket_size) * grad_el
            opt_el += (_shard_numels(group, shards, bucket_size)[r] if training.dist_opt
                       else sum(p.numel for p in group))
    # fp32 main params: bf16/fp8 training keeps an fp32 copy of what the optimizer updates. fp32 with the
    # distributed optimizer: the optimizer holds *views* of its shard (no new memory, but the live job
    # counts them, so the plan does too; `main_param_bytes_new` below says what is allocated).
    main = opt_el * 4 if (training.precision != "fp32" or training.dist_opt) else 0
    param_bytes = n * pb
    if training.fp8_param_gather:  # Transformer Engine's FP8 weights: 1 byte for every FP8 linear's
        param_bytes -= te_fp8_weight_numel(model, lay, stage) * (pb - 1)
    return StaticMemory(params=n, param_bytes=param_bytes, grad_bytes=grad,
                        optimizer_state_bytes=opt_el * 8, main_param_bytes=main)


def _fsdp_static(model: ModelPreset, lay: Layout, training: Training, stage: int, grad_el: int) -> StaticMemory:
    """Megatron-FSDP: each rank keeps 1/shards of what the strategy shards (dense parameters over DP x CP,
    experts over EDP): optim the main parameters and Adam states, optim_grads the gradients too,
    optim_grads_params the parameters too (gathered layer by layer: fsdp_gathered_bytes). An estimate:
    Megatron-FSDP's own bucket padding is not modelled."""
    strategy, pb = training.fsdp, training.param_bytes
    n = param_bytes = grad = opt_el = 0
    for chunk in range(lay.vpp or 1):
        params = chunk_params(model, lay, stage, chunk)
        n += sum(p.numel for p in params)
        for expert, shards in ((False, lay.dp * lay.cp), (True, lay.edp)):
            group = [p for p in params if p.expert == expert]
            numel = sum(p.numel for p in group)
            # FP8 weights (fp8_param_gather) are stored, sharded and gathered in 1 byte
            stored = sum(p.numel * (1 if training.fp8_param_gather and _te_fp8(p) else pb) for p in group)
            shard = -(-numel // shards)
            opt_el += shard
            grad += (shard if strategy in ("optim_grads", "optim_grads_params") else numel) * grad_el
            param_bytes += -(-stored // shards) if strategy == "optim_grads_params" else stored
    return StaticMemory(params=n, param_bytes=param_bytes, grad_bytes=grad,
                        optimizer_state_bytes=opt_el * 8, main_param_bytes=opt_el * 4)


def fsdp_gathered_bytes(model: ModelPreset, lay: Layout, training: Training, stage: int) -> int:
    """Megatron-FSDP with optim_grads_params: each layer's parameters are all-gathered before its forward
    and its backward, and the next layer's are prefetched while it runs: two layers' whole parameters
    at once (in FP8 for FP8 weights with fp8_param_gather), plus one layer's whole gradients before
    they are reduce-scattered. 0 for other strategies (their parameters are whole already)."""
    if training.fsdp != "optim_grads_params":
        return 0
    grad_el = 4 if training.grad_reduce_in_fp32 or training.precision == "fp32" else 2
    layers = [i for chunk in stage_layers(model, lay)[stage] for i in chunk]
    largest = max((sum(p.numel for p in layer_params(model, lay, i)) for i in layers), default=0)
    weight = 1 if training.fp8_param_gather else training.param_bytes
    return largest * (2 * weight + grad_el)


def rank_coordinates(lay: Layout, rank: int) -> dict:
    """Pipeline stage, DP x CP rank and EDP rank of a global rank (Megatron's group orders)."""
    # Rank order tp-cp-ep-dp-pp, leftmost fastest (helpers/job/layout.py ORDER); the expert grid is
    # etp-ep-edp-pp. tests/unit/test_memory_plan.py checks this against Layout.groups_of (Megatron's RankGenerator).
    tp_cp = lay.tp * lay.cp
    dp_cp_rank = rank % (tp_cp * lay.dp) // lay.tp  # cp index + cp * dp index
    per_stage = lay.world_size // lay.pp
    edp_rank = rank % per_stage // (lay.expert_tp * lay.ep)
    return {"stage": rank // per_stage, "dp_rank": dp_cp_rank, "edp_rank": edp_rank}


def static_for_rank(model: ModelPreset, lay: Layout, training: Training, rank: int) -> dict:
    """The plan's static terms for one global rank, keyed like the worker's ranks.json."""
    return static_memory(model, lay, training, **rank_coordinates(lay, rank)).as_dict()
