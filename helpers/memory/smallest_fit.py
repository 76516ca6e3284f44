"""The fewest GPUs a model trains on, and the layout that does it: the memory planner run over
layouts, smallest GPU count first. "Fits" is the planner's reserved peak (allocated + allocator
overhead) within the device's memory, on every pipeline stage.

    smallest_fit(preset("deepseek-v4-flash"), gpu_gib=96, gpus_per_node=8)
    -> Fit(gpus=..., layout=Layout(...), plan=MemoryPlan(...), tried=...)

Searched: whole nodes (`gpus_per_node` each) up to `max_gpus`, over helpers/perf/layouts.py's
enumeration narrowed to `SPACE`: TP a divisor of the GPUs per node (1, 2, 4, 8 on nodes of 8), with
SP when > 1; every PP that divides the ranks left (an uneven split when the layers do not divide,
each of Layout.uneven_splits); every EP that divides the ranks of a stage (ETP = 1, the usual for
fine-grained experts); CP = 1, no virtual stages. Each layout must pass Layout.validate (the same
rules a job meets). Training: the distributed optimizer and full recompute by default (what a large MoE
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
from helpers.perf import layouts as perf_layouts
from helpers.perf.layouts import Space

GiB = 2**30
LARGE_MOE = Training(dist_opt=True, recompute="full")
# TP inside a node with SP, no CP, no virtual stages, ETP 1: what a large MoE is laid out with first
SPACE = Space(tp_beyond_node=False, cp=False, vpp=False, expert_tp=False, sp_off=False)


@dataclass(frozen=True)
class Fit:
    gpus: int
    layout: Layout
    plan: MemoryPlan
    tried: int  # layouts planned (all GPU counts searched; not those below the expert floor)


def layouts(model: ModelPreset, gpus: int, gpus_per_node: int, seq_len: int, micro_batch: int):
    """Every layout of the search space above on `gpus` devices that the layout rules accept."""
    for lay, refused in perf_layouts.layouts(model, gpus, gpus_per_node, seq_len, micro_batch=micro_batch,
                                             space=SPACE):
        if not refused:
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
