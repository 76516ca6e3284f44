"""Memory planner: bytes per GPU for a model, a layout and a training setup, before any GPU hour.

    plan = plan_memory(preset("llama3-8b"), Layout(tp=2, pp=4, world_size=8, seq_len=4096), Training())
    plan.table(); plan.peak_bytes; plan.fits(80 * 2**30)

Two kinds of terms:

* **Static** (parameters, gradients, fp32 main parameters, Adam states): computed from the exact
  parameter list every rank builds (Megatron-Core's GPT/MoE layers, per pipeline stage and virtual
  chunk), laid out the way Megatron's DDP lays out its gradient buffers (fp32 when
  ``grad_reduce_in_fp32``; with the distributed optimizer each parameter starts on a 64-element
  boundary and each buffer is padded to a multiple of lcm(DP, 128), then split evenly over the
  data-parallel group (DP x CP for dense parameters, EDP for expert parameters)). For the kit's own
  models these equal what a live job holds, byte for byte (tests/test_memory.py).
* **Dynamic** (activations, logits/loss, workspace): a tensor-by-tensor account of what autograd
  saves per layer for one microbatch on the given backend, times the microbatches in flight of the
  pipeline schedule, plus the largest transient of the backward pass. Checked against torch's peak
  allocated memory on H200s (docs/memory.md).

Allocator overhead: torch's caching allocator reserves more than it allocates (block rounding,
fragmentation). The plan's ``peak_bytes`` is the *allocated* peak (what the 10% check is against);
``reserved_bytes`` adds ``Training.allocator_overhead`` (default 10%: the largest reserved/allocated
excess measured in docs/memory.md was 7.2%) and is what ``fits`` compares with the device size.
NCCL's own buffers live outside torch's allocator; ``comm_buffers`` allows for them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from helpers.layout import Layout
from helpers.models import ModelPreset

GiB = 2**30
# torch's cuBLAS workspace on Hopper (4096 KiB x 8, allocated through the caching allocator once per
# handle/stream pair); the kit computes on one stream.
CUBLAS_WORKSPACE = 32 * 2**20
# NCCL allocates its communicator buffers (NCCL_BUFFSIZE = 4 MiB per channel and peer, a few channels)
# outside torch's allocator; allowance per communicator the rank belongs to.
NCCL_PER_GROUP = 2 * 4 * 2**20 * 2


@dataclass(frozen=True)
class Training:
    precision: str = "bf16"  # bf16 | fp8 | fp32 (fp8: Transformer Engine's fp8 GEMMs, bf16 weights)
    dist_opt: bool = False  # distributed optimizer: main params and Adam states sharded over DP
    recompute: str = "none"  # none | selective (attention core) | full (each layer's input only)
    grad_reduce_in_fp32: bool = True  # the kit's DDP setting (helpers/runtime/build.py)
    # Megatron-Core's TransformerConfig default (the kit does not change it): each pipeline stage keeps
    # its output tensor until the backward of that microbatch. Megatron-LM's training script sets True.
    deallocate_pipeline_outputs: bool = False
    allocator_overhead: float = 0.10  # reserved / allocated - 1 (see module docstring)

    @property
    def param_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2

    @property
    def act_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2


# ---- parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    name: str
    numel: int  # elements on this rank
    expert: bool = False  # routed-expert weight: sharded over EP x ETP, gradients reduced over EDP


def _layer_kind(model: ModelPreset, i: int) -> str:
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
    out = [Param(p + "linear_proj.weight", h * a * d // tp),
           Param(p + "linear_qkv.weight", (a // tp + 2 * g) * d * h)]
    if model.add_bias_linear:
        out += [Param(p + "linear_proj.bias", h), Param(p + "linear_qkv.bias", (a // tp + 2 * g) * d)]
    if model.qk_layernorm:
        out += _norm(model, p + "q_layernorm", d) + _norm(model, p + "k_layernorm", d)
    return out


def _mlp(model: ModelPreset, width: int, split: int, p: str, expert: bool = False) -> list[Param]:
    h, glu = model.hidden_size, 2 if model.activation == "swiglu" else 1
    out = [Param(p + "linear_fc1.weight", glu * width // split * h, expert),
           Param(p + "linear_fc2.weight", h * width // split, expert)]
    if model.add_bias_linear:
        out += [Param(p + "linear_fc1.bias", glu * width // split, expert), Param(p + "linear_fc2.bias", h, expert)]
    return out


def _moe(model: ModelPreset, lay: Layout, p: str) -> list[Param]:
    h, E = model.hidden_size, model.num_experts
    out = [Param(p + "router.weight", E * h)]  # replicated on every rank, reduced over DP
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
            Param(p + "conv1d.weight", conv * 4), Param(p + "conv1d.bias", conv),
            Param(p + "dt_bias", heads // tp), Param(p + "A_log", heads // tp), Param(p + "D", heads // tp),
            Param(p + "norm.weight", inner // tp), Param(p + "out_proj.weight", h * inner // tp)]


def layer_params(model: ModelPreset, lay: Layout, i: int) -> list[Param]:
    """The parameters layer `i` holds on one rank, in Megatron's module (named_parameters) order."""
    p, kind, h = f"decoder.layers.{i}.", _layer_kind(model, i), model.hidden_size
    if model.is_hybrid:  # one norm + one mixer per layer
        mixer = {"M": lambda: _mamba(model, lay.tp, p + "mixer."),
                 "*": lambda: _attention(model, lay.tp, p + "self_attention."),
                 "-": lambda: _mlp(model, model.ffn_hidden_size, lay.tp, p + "mlp."),
                 "E": lambda: _moe(model, lay, p + "mlp.")}[kind]()
        return _norm(model, p + "norm", h) + mixer
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
        out.append(Param("output_layer.weight", model.vocab_size // lay.tp * h))
    return out


def _buffer_numel(params: list[Param], shards: int, dist_opt: bool) -> int:
    """Elements of one DDP gradient buffer (one bucket: the kit does not overlap grad reduction)."""
    if not dist_opt:
        return sum(p.numel for p in params)
    # Parameters in reverse module order, each start rounded up to 64 elements; the end padded to
    # lcm(shards, 128). Only the last parameter's own padding is absent, which the end padding covers.
    total = sum(-(-p.numel // 64) * 64 for p in params)
    div = math.lcm(shards, 128)
    return -(-total // div) * div


def _shard_numels(params: list[Param], shards: int) -> list[int]:
    """Real (non-padding) elements of each distributed-optimizer shard of one buffer."""
    total = _buffer_numel(params, shards, True)
    size = total // shards
    out = [0] * shards
    start = 0
    for p in reversed(params):
        start = -(-start // 64) * 64
        end = start + p.numel
        for r in range(start // size, min((end - 1) // size, shards - 1) + 1):
            out[r] += min(end, (r + 1) * size) - max(start, r * size)
        start = end
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
    n = grad = opt_el = 0
    for chunk in range(lay.vpp or 1):
        params = chunk_params(model, lay, stage, chunk)
        n += sum(p.numel for p in params)
        for expert, shards, r in ((False, dense_shards, dp_rank), (True, expert_shards, edp_rank)):
            group = [p for p in params if p.expert == expert]
            if not group:
                continue
            grad += _buffer_numel(group, shards, training.dist_opt) * grad_el
            opt_el += _shard_numels(group, shards)[r] if training.dist_opt else sum(p.numel for p in group)
    # fp32 main params: bf16/fp8 training keeps an fp32 copy of what the optimizer updates. fp32 with the
    # distributed optimizer: the optimizer holds *views* of its shard (no new memory, but the live job
    # counts them, so the plan does too; `main_param_bytes_new` below says what is allocated).
    main = opt_el * 4 if (training.precision != "fp32" or training.dist_opt) else 0
    return StaticMemory(params=n, param_bytes=n * pb, grad_bytes=grad,
                        optimizer_state_bytes=opt_el * 8, main_param_bytes=main)


# ---- activations --------------------------------------------------------------------------------
def _attn_act(model: ModelPreset, lay: Layout, tr: Training, T: int, Th: int) -> tuple[float, float]:
    """(saved bytes, largest backward transient) of one attention block for one microbatch.
    T = tokens per rank (seq/CP x micro batch); Th = tokens of the tensors that SP splits."""
    B, h, a, tp = tr.act_bytes, model.hidden_size, model.num_attention_heads, lay.tp
    s = lay.seq_len // lay.cp
    b = lay.micro_batch
    stats = 8 if model.normalization == "LayerNorm" else 4
    if model.multi_latent_attention:
        qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        q_w, v_w = a * qk // tp, a * model.v_head_dim // tp
        proj_in = v_w
        # q, k (a heads each), v, the kv latent and its norm input
        qkv_saved = T * (2 * q_w + v_w + 2 * model.kv_lora_rank) * B
    else:
        d = model.kv_channels or h // a
        q_w = a * d // tp
        proj_in = q_w
        if model.kv_heads < a:  # GQA: rope'd q, and k/v repeated to every head (repeat_interleave)
            qkv_saved = 3 * T * q_w * B
        else:  # MHA: rope'd q and k are new tensors; v stays a view that keeps the fused qkv output
            qkv_saved = (2 * q_w + 3 * q_w) * T * B
    ln = Th * h * B + Th * stats  # norm input (+ mean/rstd in fp32)
    qkv_in = Th * h * B  # the column-parallel linear saves its un-gathered input
    heads = a // tp
    if getattr(lay, "backend", "local") == "te":  # flash/cuDNN attention: no s x s matrix, softmax stats only
        core = T * heads * 4
        transient = 0.0
    elif lay.cp > 1:  # the kit's ContextParallelAttention (helpers/runtime/modules.py): K/V all-gathered
        s_full = lay.seq_len
        kv_full = b * s_full * q_w  # gathered K/V, repeated to every head
        # fp32 copies of q and the gathered k (saved by the matmul), the gathered v, fp32 softmax
        # output and its bf16 copy over (local queries x all keys)
        core = T * q_w * 4 + kv_full * 4 + kv_full * B + b * heads * s * s_full * (4 + B)
        qkv_saved = 0  # the matmuls save the fp32/gathered copies counted in `core`
        transient = b * heads * s * s_full * (B + 4 + 4)
    else:  # local DotProductAttention: fp32 softmax output (+ its bf16 copy used by bmm unless fp32)
        core = b * heads * s * s * (4 + (B if tr.precision != "fp32" else 0))
        # backward of softmax: grad of probs (B), its fp32 copy, softmax-backward output (fp32)
        transient = b * heads * s * s * (B + 4 + 4)
    saved = ln + qkv_in + qkv_saved + core + T * proj_in * B
    if tr.recompute == "selective":  # the core attention is recomputed: only q, k, v stay
        saved -= core
    return saved, transient


def _mlp_act(model: ModelPreset, width: int, tokens: int, split: int, B: int) -> float:
    """fc1 output and what the activation saves, fc2 input."""
    f = width // split
    per = {"swiglu": 4 * f, "gelu": 2 * f, "squared_relu": 2 * f}[model.activation]
    return tokens * per * B


def layer_activation(model: ModelPreset, lay: Layout, tr: Training, i: int) -> tuple[float, float]:
    """(bytes autograd keeps for layer i for one microbatch, largest backward transient)."""
    B, h, tp = tr.act_bytes, model.hidden_size, lay.tp
    T = lay.seq_len // lay.cp * lay.micro_batch
    Th = T // tp if lay.sp else T
    stats = 8 if model.normalization == "LayerNorm" else 4
    if tr.recompute == "full":  # only the layer's input survives the forward
        return Th * h * B, 0.0
    kind = _layer_kind(model, i)
    saved, transient = 0.0, 0.0
    if kind in ("dense", "moe", "*"):
        saved, transient = _attn_act(model, lay, tr, T, Th)
    if kind == "M":
        inner = model.mamba_num_heads * model.mamba_head_dim // tp
        bc = 2 * model.mamba_num_groups * model.mamba_state_dim // tp
        heads = model.mamba_num_heads // tp
        # norm input + in_proj input, in_proj output (z, xBC, dt), conv output, SSM output + gated
        # norm input/output, out_proj input; the chunked scan keeps fp32 states per chunk (256 tokens)
        saved = (2 * Th * h * B + T * (2 * inner + bc + heads) * B + T * (inner + bc) * B
                 + 3 * T * inner * B + T // 256 * heads * model.mamba_head_dim * model.mamba_state_dim * 4)
    mlp_ln = Th * h * B + Th * stats + Th * h * B  # pre-MLP norm input, fc1/router input
    if kind in ("dense", "-"):
        saved += mlp_ln + _mlp_act(model, model.ffn_hidden_size, T, tp, B)
    elif kind in ("moe", "E"):
        k, E = model.moe_router_topk, model.num_experts
        routed = Th * k * lay.expert_tp  # tokens after dispatch, per rank (balanced routing)
        saved += mlp_ln + Th * E * 4 * 3  # router logits, probabilities, routing map (fp32)
        saved += routed * h * B * 2  # permuted tokens (dispatch output) and expert fc1 input
        saved += _mlp_act(model, model.expert_ffn, routed, lay.expert_tp, B) + routed * h * B  # + unpermute input
        if model.moe_shared_expert_intermediate_size:
            saved += _mlp_act(model, model.moe_shared_expert_intermediate_size, T, tp, B)
    return saved, transient


def _in_flight(lay: Layout, stage: int) -> int:
    """Model-chunk microbatches whose activations one rank of `stage` holds at once (Megatron's 1F1B
    warm-up + 1; interleaved: warm-up counted in chunk-microbatches)."""
    M, pp, vpp = lay.global_batch_size // (lay.micro_batch * lay.dp), lay.pp, lay.vpp or 1
    if pp == 1:
        return 1
    if vpp == 1:
        return min(pp - stage, M)
    total = M * vpp
    if M == pp:
        return total
    warmup = (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(warmup + 1, total)


# ---- the plan ---------------------------------------------------------------------------------------
TERMS = ["parameters", "gradients", "main_params", "optimizer_states", "activations", "logits_loss",
         "comm_buffers", "workspace"]


@dataclass
class StagePlan:
    stage: int
    label: str  # first | middle | last (one label per distinct stage)
    layers: list[list[int]]  # per virtual chunk
    params: int
    expert_params: int
    in_flight: int  # chunk-microbatches held at once
    terms: dict = field(default_factory=dict)  # term -> bytes (allocated by torch, except comm_buffers)
    static: StaticMemory | None = None

    @property
    def allocated_bytes(self) -> int:
        return int(sum(v for k, v in self.terms.items() if k != "comm_buffers"))

    @property
    def total_bytes(self) -> int:
        return int(sum(self.terms.values()))


@dataclass
class MemoryPlan:
    model: ModelPreset
    layout: Layout
    training: Training
    stages: list[StagePlan]

    @property
    def peak_bytes(self) -> int:
        """torch's peak allocated memory on the busiest rank."""
        return max(s.allocated_bytes for s in self.stages)

    @property
    def reserved_bytes(self) -> int:
        """Peak reserved by torch plus NCCL buffers: what must fit on the device."""
        return max(int(s.allocated_bytes * (1 + self.training.allocator_overhead)) + s.terms["comm_buffers"]
                   for s in self.stages)

    def stage(self, label: str) -> StagePlan:
        return next(s for s in self.stages if s.label == label)

    def fits(self, device_bytes: float) -> bool:
        return self.reserved_bytes <= device_bytes

    def table(self, unit: float = GiB) -> str:
        head = "| term | " + " | ".join(f"{s.label} (stage {s.stage})" for s in self.stages) + " |"
        rows = [head, "|---" * (len(self.stages) + 1) + "|"]
        for t in TERMS:
            rows.append(f"| {t} | " + " | ".join(f"{s.terms[t] / unit:.2f}" for s in self.stages) + " |")
        rows.append("| **peak allocated** | " + " | ".join(f"**{s.allocated_bytes / unit:.2f}**"
                                                          for s in self.stages) + " |")
        rows.append("| reserved + NCCL | " + " | ".join(
            f"{(s.allocated_bytes * (1 + self.training.allocator_overhead) + s.terms['comm_buffers']) / unit:.2f}"
            for s in self.stages) + " |")
        return "\n".join(rows)


def _stage_labels(pp: int) -> list[tuple[int, str]]:
    out = [(0, "first")]
    if pp >= 3:
        out.append((pp // 2, "middle"))
    if pp >= 2:
        out.append((pp - 1, "last"))
    return out


def plan_memory(model: ModelPreset, layout: Layout, training: Training = Training()) -> MemoryPlan:
    """Per-rank bytes for the first, middle and last pipeline stage (see the module docstring)."""
    if training.precision not in ("bf16", "fp8", "fp32"):
        raise ValueError(f"precision must be bf16, fp8 or fp32, not {training.precision!r}")
    if training.recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none, selective or full, not {training.recompute!r}")
    lay, tr = layout, training
    B, h, tp = tr.act_bytes, model.hidden_size, lay.tp
    T = lay.seq_len // lay.cp * lay.micro_batch
    Th = T // tp if lay.sp else T
    layers = stage_layers(model, lay)
    stages = []
    for stage, label in _stage_labels(lay.pp):
        static = static_memory(model, lay, tr, stage)
        params = [p for c in range(lay.vpp or 1) for p in chunk_params(model, lay, stage, c)]
        n_expert = sum(p.numel for p in params if p.expert)
        # activations: every chunk-microbatch in flight holds one chunk's layers (chunks of a stage
        # have equal layer counts; the largest is used for hybrids/MoE with uneven kinds)
        per_chunk = []
        transient = 0.0
        for chunk_layers in layers[stage]:
            acts = [layer_activation(model, lay, tr, i) for i in chunk_layers]
            per_chunk.append(sum(a for a, _ in acts))
            transient = max([transient] + [t for _, t in acts])
        n_flight = _in_flight(lay, stage)
        act = max(per_chunk) * n_flight
        if stage == 0:
            act += n_flight * T * 8  # token ids kept by the embedding's backward
        if stage < lay.pp - 1 and not tr.deallocate_pipeline_outputs:
            act += n_flight * Th * h * B  # the stage's output tensor, kept until its backward
        logits = 0.0
        if stage == lay.pp - 1:
            V = model.vocab_size // tp
            stats = 8 if model.normalization == "LayerNorm" else 4
            # final norm input + stats, output-layer input (SP: gathered), logits kept by the
            # in-place cross entropy (its exp), target mask/indices
            logits = Th * h * B + Th * stats + T * h * B + T * V * B + T * 17
            # backward: gradient of the logits (same size) and the output layer's weight gradient
            transient = max(transient, T * V * B + V * h * B)
        workspace = CUBLAS_WORKSPACE
        if getattr(lay, "backend", "local") == "local" and lay.cp == 1 and any(
                _layer_kind(model, i) in ("dense", "moe", "*")
                                          for c in layers[stage] for i in c):
            s = lay.seq_len // lay.cp
            # Megatron's global memory buffer handed to baddbmm (kept for the whole run)
            workspace += lay.micro_batch * model.num_attention_heads // tp * s * s * B
        workspace += transient
        groups = 2 + (lay.tp > 1) + (lay.pp > 1) + (lay.cp > 1) + (lay.ep > 1) + (lay.dp > 1)
        terms = {
            "parameters": static.param_bytes,
            "gradients": static.grad_bytes,
            # fp32 + distributed optimizer: the optimizer's shard is a view of the parameters
            "main_params": 0 if tr.precision == "fp32" else static.main_param_bytes,
            "optimizer_states": static.optimizer_state_bytes,
            "activations": act,
            "logits_loss": logits,
            "comm_buffers": groups * NCCL_PER_GROUP if lay.world > 1 else 0,
            "workspace": workspace,
        }
        if tr.precision == "fp8":  # TE keeps an fp8 copy and its transpose of every GEMM weight
            terms["workspace"] += 2 * static.params
        stages.append(StagePlan(stage, label, layers[stage], static.params, n_expert, n_flight,
                                {k: int(v) for k, v in terms.items()}, static))
    return MemoryPlan(model, lay, tr, stages)


def training_of(spec) -> Training:
    """The Training a JobSpec runs with (precision resolved: auto means bf16 on GPU, fp32 on CPU)."""
    precision = spec.precision if spec.precision != "auto" else ("fp32" if spec.device == "cpu" else "bf16")
    return Training(precision=precision, dist_opt=spec.dist_opt)


def rank_coordinates(lay: Layout, rank: int) -> dict:
    """Pipeline stage, DP x CP rank and EDP rank of a global rank (Megatron's group orders)."""
    # Rank order tp-cp-ep-dp-pp, leftmost fastest (helpers/layout.py ORDER); the expert grid is
    # etp-ep-edp-pp. tests/test_memory.py checks this against Layout.groups_of (Megatron's RankGenerator).
    tp_cp = lay.tp * lay.cp
    dp_cp_rank = rank % (tp_cp * lay.dp) // lay.tp  # cp index + cp * dp index
    per_stage = lay.world // lay.pp
    edp_rank = rank % per_stage // (lay.expert_tp * lay.ep)
    return {"stage": rank // per_stage, "dp_rank": dp_cp_rank, "edp_rank": edp_rank}


def static_for_rank(model: ModelPreset, lay: Layout, training: Training, rank: int) -> dict:
    """The plan's static terms for one global rank, keyed like the worker's ranks.json."""
    return static_memory(model, lay, training, **rank_coordinates(lay, rank)).as_dict()
