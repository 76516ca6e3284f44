"""Expert-parallel all-to-all of one MoE layer on one rank for one microbatch: the rank's tokens
(T/TP with sequence parallel), each sent to its top-k experts, h bf16 values per copy; forward a
dispatch and a combine, backward the same two. (EP-1)/EP of it leaves the rank, over the EP
group's link (the expert grid's ETP-EP order: EP x ETP ranks wider than a node cross nodes).

With Megatron-Core's overlap_moe_expert_parallel_comm (Execution.ep_overlap) the schedule runs one
microbatch's forward and another's backward together, layer by layer (its combined 1F1B,
pipeline_parallel/combined_1f1b.py), the all-to-alls of one on a communication stream while the
other computes: a forward all-to-all hides under the backward compute (GEMMs, attention,
memory-bound kernels) of the same layer, a backward one under the forward compute, each at most the
compute it runs under (`exposed`). Megatron-Core allows it only with EP > 1, with virtual stages when
the pipeline has more than one stage, and without full recompute (`overlaps`); the pipeline's
warm-up and cool-down microbatches, which run alone, are left out of the count."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import collectives
from helpers.perf.layer_gemms import tokens
from helpers.perf.links import Link
from helpers.perf.roofline import BF16


def dispatch_bytes(model: ModelPreset, lay: Layout) -> float:
    return tokens(lay) / lay.tp * model.moe_router_topk * model.hidden_size * BF16


def overlaps(lay: Layout, recompute: str) -> bool:
    """Whether Megatron-Core can overlap the all-to-all for this layout (its TransformerConfig checks)."""
    return lay.ep > 1 and (lay.pp == 1 or bool(lay.vpp)) and recompute != "full"


def exposed(ep: tuple[float, float], compute: tuple[float, float]) -> tuple[float, float]:
    """(forward, backward) all-to-all seconds left on the critical path when each direction's all-to-all
    runs under the other direction's compute of the same layer: `ep` and `compute` as (forward, backward)."""
    return max(0.0, ep[0] - compute[1]), max(0.0, ep[1] - compute[0])


def layer(model: ModelPreset, lay: Layout, link: Link) -> tuple[float, float]:
    """(forward, backward) seconds."""
    one = collectives.seconds("all_to_all", dispatch_bytes(model, lay), lay.ep, link)
    return 2 * one, 2 * one
