"""The fewest GPUs a model trains on, and the layout that does it: the memory planner run over
layouts, smallest GPU count first. "Fits" is the planner's reserved peak (allocated + allocator
overhead) within the device's memory, on every pipeline stage.

    smallest_fit(preset("deepseek-v4-flash"), gpu_gib=96, gpus_per_node=8)
    -> Fit(gpus=..., layout=Layout(...), plan=MemoryPlan(...), tried=...)

Searched: whole nodes (`gpus_per_node` each) up to `max_gpus`; TP within a node (1, 2, 4, 8: with
SP when > 1); every PP that divides the ranks left (an uneven split when the layers do not divide,
each of Layout.uneven_splits); every EP that divides the experts and the ranks of a stage (ETP = 1, the
usual for fine-grained experts); CP = 1. Each layout must pass Layout.validate (the same rules a
job meets). Training: the distributed optimizer and full recompute by default (what a large MoE
needs first); the caller may pass another Training. Among the fitting layouts of the smallest GPU
count, the one with the lowest peak is returned. A layout whose first stage's routed-expert weights
and gradients alone exceed the device (a floor of the plan's static terms) is not planned."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.plan import MemoryPlan, plan_memory
from helpers.memory.static import layer_kind, stage_layers
from helpers.memory.training import Training

GiB = 2**30
LARGE_MOE = Training(dist_opt=True, recompute="full")


@dataclass(frozen=True)
class Fit:
    gpus: int
    layout: Layout
    plan: MemoryPlan
    tried: int  # layouts planned (all GPU counts searched; not those below the expert floor)


def layouts(model: ModelPreset, gpus: int, gpus_per_node: int, seq_len: int, micro_batch: int):
    """Every layout of the search space above on `gpus` devices that the layout rules accept."""
    for tp in (t for t in (1, 2, 4, 8) if t <= gpus_per_node and gpus % t == 0):
        for pp in (p for p in range(1, min(model.num_layers, gpus // tp) + 1) if (gpus // tp) % p == 0):
            splits = [(None, None)]
            if pp > 1 and model.num_layers % pp:
                splits = Layout.uneven_splits(model.num_layers, pp)
            per_stage = gpus // pp
            for ep in [e for e in range(1, per_stage + 1) if per_stage % e == 0
                       and (model.num_experts or 1) % e == 0] if model.is_moe else [1]:
                for first, last in splits:
                    lay = Layout(nproc=gpus, tp=tp, pp=pp, ep=ep, etp=1 if model.is_moe else None, sp=tp > 1,
                                 first_stage_layers=first, last_stage_layers=last, seq_len=seq_len,
                                 micro_batch=micro_batch, gpus_per_node=gpus_per_node)
                    if not lay.validate(model):
                        yield lay


def expert_floor_bytes(model: ModelPreset, layout: Layout, training: Training) -> int:
    """Bytes of the routed-expert weights and gradients on a first-stage rank: a part of its static
    memory (helpers/memory/static.py counts the same weights and gradient buffers, and more)."""
    if not model.is_moe:
        return 0
    glu = 2 if model.gated else 1
    per_layer = model.num_experts // layout.ep * (glu + 1) * model.expert_ffn * model.hidden_size // layout.expert_tp
    layers = sum(layer_kind(model, i) in ("moe", "E") for chunk in stage_layers(model, layout)[0] for i in chunk)
    grad = 4 if training.grad_reduce_in_fp32 or training.precision == "fp32" else 2
    return layers * per_layer * (training.param_bytes + grad)


def fits(model: ModelPreset, layout: Layout, gpu_gib: float, training: Training = LARGE_MOE) -> tuple[bool, MemoryPlan]:
    plan = plan_memory(model, layout, training)
    return plan.fits(gpu_gib * GiB), plan


def smallest_fit(model: ModelPreset, gpu_gib: float, gpus_per_node: int = 8, max_gpus: int = 1024,
                 seq_len: int = 4096, micro_batch: int = 1, training: Training = LARGE_MOE) -> Fit | None:
    """The smallest whole-node GPU count with a layout that fits, and its lowest-peak layout; None
    when nothing up to `max_gpus` fits."""
    tried = 0
    for gpus in range(gpus_per_node, max_gpus + 1, gpus_per_node):
        best = None
        for lay in layouts(model, gpus, gpus_per_node, seq_len, micro_batch):
            if expert_floor_bytes(model, lay, training) > gpu_gib * GiB:
                continue
            tried += 1
            ok, plan = fits(model, lay, gpu_gib, training)
            if ok and (best is None or plan.reserved_bytes < best[1].reserved_bytes):
                best = (lay, plan)
        if best:
            return Fit(gpus, best[0], best[1], tried)
    return None


def lowest_peak(model: ModelPreset, gpus: int, gpus_per_node: int = 8, seq_len: int = 4096, micro_batch: int = 1,
                training: Training = LARGE_MOE) -> tuple[Layout, MemoryPlan]:
    """The layout of `gpus` devices with the lowest planned peak (it may still not fit)."""
    plans = [(lay, plan_memory(model, lay, training)) for lay in layouts(model, gpus, gpus_per_node, seq_len,
                                                                             micro_batch)]
    return min(plans, key=lambda lp: lp[1].reserved_bytes)
