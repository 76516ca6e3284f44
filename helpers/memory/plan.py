"""Memory planner: bytes per GPU for a model, a layout and a training setup, before any GPU hour.

    plan = plan_memory(preset("llama3-8b"), Layout(tp=2, pp=4, nproc=8, seq_len=4096), Training())
    plan.table(); plan.peak_bytes; plan.fits(80 * 2**30)

Two kinds of terms:

* **Static** (parameters, gradients, fp32 main parameters, Adam states): computed from the exact
  parameter list every rank builds (Megatron-Core's GPT/MoE layers, per pipeline stage and virtual
  chunk), laid out the way Megatron's DDP lays out its gradient buffers (fp32 when
  ``grad_reduce_in_fp32``; with the distributed optimizer each parameter starts on a 64-element
  boundary and each buffer is padded to a multiple of lcm(DP, 128), then split evenly over the
  data-parallel group (DP x CP for dense parameters, EDP for expert parameters)). For the kit's own
  models these equal what a live job holds, byte for byte (tests/jobs/test_memory.py).
* **Dynamic** (activations, logits/loss, workspace): a tensor-by-tensor account of what autograd
  saves per layer for one microbatch on the given backend, times the microbatches in flight of the
  pipeline schedule, plus the largest transient of the backward pass. Checked against torch's peak
  allocated memory on H200s (docs/results/memory.md).

Allocator overhead: torch's caching allocator reserves more than it allocates (block rounding,
fragmentation). The plan's ``peak_bytes`` is the *allocated* peak (what the 10% check is against);
``reserved_bytes`` adds ``Training.allocator_overhead`` (default 10%: the largest reserved/allocated
excess measured in docs/results/memory.md was 7.2%) and is what ``fits`` compares with the device size.
NCCL's own buffers live outside torch's allocator; ``comm_buffers`` allows for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.spec import PER_TENSOR_FP8_RECIPES
from helpers.memory.activations import chunk_activation, in_flight, layer_activation
from helpers.memory.static import (
    StaticMemory,
    chunk_params,
    fp8_linear_numel,
    fsdp_gathered_bytes,
    layer_kind,
    stage_layers,
    static_memory,
    te_fp8_weight_numel,
)
from helpers.memory.training import GiB, Training

# torch's cuBLAS workspace on Hopper (4096 KiB x 8, allocated through the caching allocator once per
# handle/stream pair); the kit computes on one stream.
CUBLAS_WORKSPACE = 32 * 2**20
# NCCL allocates its communicator buffers (NCCL_BUFFSIZE = 4 MiB per channel and peer, a few channels)
# outside torch's allocator; allowance per communicator the rank belongs to.
NCCL_PER_GROUP = 2 * 4 * 2**20 * 2


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
    if training.recompute_method not in (None, "uniform", "block"):
        raise ValueError(f"recompute_method must be uniform or block, not {training.recompute_method!r}")
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
            saved, chunk_transient = chunk_activation(model, lay, tr, chunk_layers)
            if tr.offload_layers and chunk_layers:  # offloaded layers' activations live on the host
                saved *= max(0, len(chunk_layers) - tr.offload_layers) / len(chunk_layers)
            per_chunk.append(saved)
            transient = max(transient, chunk_transient)
        n_flight = in_flight(lay, stage)
        act = max(per_chunk) * n_flight
        if stage == 0:
            act += n_flight * T * 8  # token ids kept by the embedding's backward
        if stage < lay.pp - 1 and not tr.deallocate_pipeline_outputs:
            act += n_flight * Th * h * B  # the stage's output tensor, kept until its backward
        logits = 0.0
        if stage == lay.pp - 1 and model.mtp_num_layers:
            # multi-token prediction: per depth one more layer like the last (its input: the hidden state
            # and the next token's embedding, each normed, concatenated, projected) and one more logits pass
            mtp_saved, mtp_transient = layer_activation(model, lay, tr, model.num_layers - 1)
            act += n_flight * model.mtp_num_layers * (mtp_saved + 4 * T * h * B)
            transient = max(transient, mtp_transient)
        if stage == lay.pp - 1:
            V = model.vocab_size // tp
            stats = 8 if model.normalization == "LayerNorm" else 4
            # final norm input + stats, output-layer input (SP: gathered), logits kept by the
            # cross entropy (Megatron's unfused one: its in-place exp; the kit's GPU kernels: the
            # logits themselves, and a logsumexp per token), target mask/indices
            logits = Th * h * B + Th * stats + T * h * B + T * V * B + T * 17
            # backward: gradient of the logits (same size) and the output layer's weight gradient
            logits_transient = T * V * B + V * h * B
            if tr.fused_cross_entropy:  # Megatron's compiled cross-entropy keeps fp32 exp-logits
                logits += T * V * (4 - B)
                # backward: the fp32 gradient, its bf16 copy, the output layer's weight gradient
                logits_transient = T * V * (4 + B) + V * h * B
            if tr.precision == "fp8" and tr.fp8_output_layer and lay.backend == "local":
                logits, logits_transient = _fp8_output_layer(tr, T, h, V, B, logits, logits_transient)
            logits *= 1 + model.mtp_num_layers  # every prediction depth keeps its own logits for the loss
            transient = max(transient, logits_transient)
        workspace = CUBLAS_WORKSPACE
        if lay.backend == "local" and tr.attention == "megatron_local" and lay.cp == 1 and any(
                layer_kind(model, i) in ("dense", "moe", "*")
                                          for c in layers[stage] for i in c):
            s = lay.seq_len // lay.cp
            # Megatron's global memory buffer handed to baddbmm (kept for the whole run)
            workspace += lay.micro_batch * model.num_attention_heads // tp * s * s * B
        workspace += transient
        workspace += fsdp_gathered_bytes(model, lay, tr, stage)
        groups = 2 + (lay.tp > 1) + (lay.pp > 1) + (lay.cp > 1) + (lay.ep > 1) + (lay.dp > 1)
        terms = {
            "parameters": static.param_bytes,
            "gradients": static.grad_bytes,
            # fp32 + distributed optimizer: the optimizer's shard is a view of the parameters
            "main_params": 0 if tr.precision == "fp32" else static.main_param_bytes,
            "optimizer_states": static.optimizer_state_bytes,
            "activations": act,
            "logits_loss": logits,
            "comm_buffers": groups * NCCL_PER_GROUP if lay.world_size > 1 else 0,
            "workspace": workspace,
        }
        if tr.precision == "fp8" and lay.backend == "te" and tr.fsdp != "optim_grads_params":
            # TE keeps an FP8 copy of every FP8 linear's weight and its transpose; with FP8 weights
            # (fp8_param_gather) the weight is the copy, and only the transpose is extra. Megatron-FSDP's
            # gathered layers are counted above.
            terms["workspace"] += (1 if tr.fp8_param_gather else 2) * te_fp8_weight_numel(model, lay, stage)
        elif tr.precision == "fp8" and lay.backend != "te":
            # the kit's: two FP8 layouts of each FP8 linear's weight per step (training_step)
            terms["workspace"] += 2 * fp8_linear_numel(model, lay, stage)
            if tr.fp8_output_layer and stage == lay.pp - 1:
                terms["workspace"] += 2 * model.vocab_size // tp * h
        stages.append(StagePlan(stage, label, layers[stage], static.params, n_expert, n_flight,
                                {k: int(v) for k, v in terms.items()}, static))
    return MemoryPlan(model, lay, tr, stages)


def _fp8_output_layer(tr: Training, T: int, h: int, V: int, B: int, logits: float,
                      transient: float) -> tuple[float, float]:
    """The output layer on the kit's FP8 GEMMs (Training.fp8_output_layer; helpers/precision/fp8_matmul.py):
    tensorwise and delayed save its input as FP8 (the transposed copy the weight gradient reads,
    1 byte) instead of bf16, rowwise the bf16 input as before. Its backward holds the bf16 logits
    gradient with its two FP8 layouts (1 byte each) and the weight gradient; Megatron's fused
    cross-entropy's fp32 gradient is gone by then (freed once cast to bf16), so that transient only
    matters with the unfused one."""
    if tr.fp8_recipe in PER_TENSOR_FP8_RECIPES:
        logits += T * h * (1 - B)
    return logits, max(transient, T * V * (B + 2) + V * h * B)
