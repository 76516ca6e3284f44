"""The advisor: every layout of a model on N GPUs (candidates.py), each one's peak memory per GPU
from the kit's memory planner (helpers/memory/plan.py) and its step time from the time model
(time/step.py), ranked: layouts that fit first, fastest first; then those that do not fit; the
layouts the rules refuse are kept apart, each with its rule names.

    from helpers.advisor import advise
    advice = advise(preset("llama3-8b"), gpus=64, gpu="h100-80gb", seq_len=4096, global_batch=512)
    advice.best().layout, advice.rows[:5], advice.refused[:5]
    fastest(preset("llama3-8b"), gpus=64, ...)  # advice.best() alone, without planning every layout

Precision: `precision="fp8"` (or an Execution whose precision is fp8) times the transformer layers'
linears as FP8 GEMMs (helpers/perf/gemm.py) and plans memory with Training(precision="fp8") on the chosen
backend (Transformer Engine's FP8 by default). GPUs per node: the GPU profile's NVLink domain (8 on
a DGX/HGX board, 72 on an NVL72 rack) unless given.

"Fits": the plan's reserved peak (allocated + allocator overhead + NCCL buffers, on its busiest
pipeline stage) within the GPU's memory. Both numbers are predictions (docs/results/memory.md and
docs/results/advisor.md say how close each has come to measurements)."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from helpers.advisor.candidates import RECOMPUTE, Candidate, candidates
from helpers.advisor.execution import MEGATRON_CORE, Execution
from helpers.advisor.gpus import resolve
from helpers.advisor.time.step import StepTime, predict
from helpers.job.flops import flops_per_token
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.plan import plan_memory
from helpers.memory.training import GiB, Training
from helpers.perf.gpus import GpuProfile
from helpers.perf.layouts import Space


@dataclass
class Row:
    layout: Layout
    training: Training | None
    refused: tuple[str, ...] = ()
    memory_gib: float | None = None  # planned reserved peak per GPU (busiest stage)
    fits: bool = False
    step: StepTime | None = None
    # model FLOPs (helpers/job/flops.py, no recompute) per second over the datasheet's dense BF16 peak in
    # either precision (so FP8's gain shows as a higher MFU); None for the architectures that count does
    # not cover (Mamba hybrids, multi-latent attention)
    mfu: float | None = None
    precision: str = "bf16"  # the GEMMs' (Execution.precision), refused layouts included

    def to_dict(self) -> dict:
        lay, tr = self.layout, self.training
        out = {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep, "etp": lay.expert_tp,
               "vpp": lay.vpp, "sp": lay.sp, "micro_batch": lay.micro_batch, "microbatches": lay.num_microbatches,
               "first_stage_layers": lay.first_stage_layers, "last_stage_layers": lay.last_stage_layers,
               "dist_opt": tr.dist_opt if tr else None, "recompute": tr.recompute if tr else None,
               "fits": self.fits, "memory_gib": None if self.memory_gib is None else round(self.memory_gib, 2),
               "step_s": None if self.step is None else round(self.step.step_s, 4),
               "tokens_per_s_per_gpu": None if self.step is None else round(self.step.tokens_per_s_per_gpu, 1),
               "mfu": None if self.mfu is None else round(self.mfu, 3), "precision": self.precision,
               "refused": list(self.refused)}
        if self.step is not None:
            out["terms_s"] = {k: round(v, 4) for k, v in self.step.terms.items() if v}
            out["bubble_fraction"] = round(self.step.bubble_fraction, 4)
        return out


@dataclass
class Advice:
    model: ModelPreset
    gpu: GpuProfile
    gpus: int
    gpus_per_node: int
    seq_len: int
    global_batch: int
    execution: Execution  # its precision is the advice's
    rows: list[Row] = field(default_factory=list)  # accepted layouts, ranked
    refused: list[Row] = field(default_factory=list)

    def best(self) -> Row | None:
        """The fastest layout that fits (None when none fits)."""
        return next((r for r in self.rows if r.fits), None)

    def fitting(self) -> list[Row]:
        return [r for r in self.rows if r.fits]


def advise(model: ModelPreset, gpus: int, gpu: GpuProfile | str = "h100-80gb", gpus_per_node: int | None = None,
           seq_len: int = 4096, global_batch: int | None = None, execution: Execution = MEGATRON_CORE,
           backend: str = "te", max_micro_batch: int = 16, precision: str | None = None,
           space: Space = Space()) -> Advice:
    """Every layout of `model` on `gpus` GPUs, planned, timed and ranked (see the module docstring).
    `gpus_per_node`: default the GPU's NVLink domain; `global_batch`: sequences per iteration (default:
    2 per GPU); `precision`: "bf16" or "fp8" (default the execution's); `space`: the layout choices
    searched (helpers/perf/layouts.py; default all)."""
    advice = _setting(model, gpus, gpu, gpus_per_node, seq_len, global_batch, execution, precision)
    plans = {}
    for c in candidates(model, gpus, advice.gpus_per_node, seq_len, advice.global_batch, max_micro_batch, backend,
                        advice.execution.precision, space, grad_reduce_in_fp32=advice.execution.grad_reduce_bytes == 4):
        if c.refused:
            advice.refused.append(Row(c.layout, None, c.refused, precision=advice.execution.precision))
            continue
        key = (c.layout, c.training)
        if key not in plans:
            plans[key] = plan_memory(model, c.layout, c.training)
        step = predict(model, c.layout, c.training, advice.gpu, advice.gpus_per_node, advice.execution)
        advice.rows.append(_row(advice, c, plans[key].reserved_bytes, step))
    advice.rows.sort(key=lambda r: (not r.fits, r.step.step_s))
    return advice


def fastest(model: ModelPreset, gpus: int, gpu: GpuProfile | str = "h100-80gb", gpus_per_node: int | None = None,
            seq_len: int = 4096, global_batch: int | None = None, execution: Execution = MEGATRON_CORE,
            backend: str = "te", max_micro_batch: int = 16, precision: str | None = None,
            space: Space = Space(), dist_opt: tuple[bool, ...] = (False, True)) -> Row | None:
    """advise(...).best() (the same arguments), without planning the memory of every layout: every
    layout is timed without recompute, and planned in order of its time, fastest first, until one
    fits. Recompute only adds work to the backward, so a layout's recompute choice is timed (and
    queued) only once the choice before it (none, then selective, then full) is found not to fit.
    Equal times rank in advise()'s order. `dist_opt`: the distributed optimizer's choices weighed
    (candidates.py)."""
    setting = _setting(model, gpus, gpu, gpus_per_node, seq_len, global_batch, execution, precision)
    queue, later = [], {}  # later: (layout, dist_opt) -> its recompute choices still to time, with their rank
    for rank, c in enumerate(candidates(model, gpus, setting.gpus_per_node, seq_len, setting.global_batch,
                                        max_micro_batch, backend, setting.execution.precision, space, dist_opt,
                                        setting.execution.grad_reduce_bytes == 4)):
        if c.refused:
            continue
        if c.training.recompute == RECOMPUTE[0]:
            later[c.layout, c.training.dist_opt] = []
            step = predict(model, c.layout, c.training, setting.gpu, setting.gpus_per_node, setting.execution)
            queue.append((step.step_s, rank, c, step))
        else:
            later[c.layout, c.training.dist_opt].append((rank, c))
    heapq.heapify(queue)
    while queue:
        _, rank, c, step = heapq.heappop(queue)
        row = _row(setting, c, plan_memory(model, c.layout, c.training).reserved_bytes, step)
        if row.fits:
            return row
        rest = later[c.layout, c.training.dist_opt]
        if rest:
            rank, c = rest.pop(0)
            step = predict(model, c.layout, c.training, setting.gpu, setting.gpus_per_node, setting.execution)
            heapq.heappush(queue, (step.step_s, rank, c, step))
    return None


def _setting(model: ModelPreset, gpus: int, gpu: GpuProfile | str, gpus_per_node: int | None, seq_len: int,
             global_batch: int | None, execution: Execution, precision: str | None) -> Advice:
    """An empty Advice for the arguments, each checked (one clear error for the first that is wrong)."""
    profile = resolve(gpu) if isinstance(gpu, str) else gpu
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, not {gpus}")
    domain = gpus_per_node is None
    gpus_per_node = profile.nvlink_domain if domain else gpus_per_node
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be at least 1, not {gpus_per_node}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        hint = (f" ({gpus_per_node} GPUs share NVLink on {profile.name}; a job that uses part of each domain "
                "gives its GPUs per node: --gpus-per-node)") if domain else ""
        raise ValueError(f"{gpus} GPUs are not whole nodes of {gpus_per_node}: use a multiple of {gpus_per_node}"
                         + hint)
    if seq_len < 1 or seq_len > model.max_seq_len:
        raise ValueError(f"seq_len {seq_len} must be between 1 and the model's {model.max_seq_len}")
    execution = execution.with_(precision=precision or execution.precision)
    if execution.precision == "fp4":
        raise ValueError("the advisor plans memory for every layout, and the memory planner has no fp4 (NVFP4): "
                         "advise with precision fp8, or time an NVFP4 layout alone with helpers.advisor.time.step")
    profile.peak_tflops(execution.precision)  # a GPU without FP8 tensor cores refuses fp8 here, with its name
    return Advice(model, profile, gpus, min(gpus_per_node, gpus), seq_len, global_batch or 2 * gpus, execution)


def _row(advice: Advice, c: Candidate, reserved: float, step: StepTime) -> Row:
    """An accepted candidate's Row: its plan's reserved bytes against the GPU's memory, its step time and MFU."""
    model, profile = advice.model, advice.gpu
    counted = not (model.is_hybrid or model.multi_latent_attention)
    mfu = None
    if counted:
        model_flops = flops_per_token(model, advice.seq_len) * advice.global_batch * advice.seq_len
        mfu = model_flops / step.step_s / advice.gpus / (profile.peak_bf16_tflops * 1e12)
    return Row(c.layout, c.training, (), reserved / GiB, reserved <= profile.memory_gib * GiB, step, mfu,
               advice.execution.precision)
