"""Expert-parallel all-to-all of one MoE layer on one rank for one microbatch: the rank's tokens
(T/TP with sequence parallel), each sent to its top-k experts, h bf16 values per copy; forward a
dispatch and a combine, backward the same two. (EP-1)/EP of it leaves the rank, over the EP
group's link (the expert grid's ETP-EP order: EP x ETP ranks wider than a node cross nodes)."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import collectives
from helpers.perf.layer_gemms import tokens
from helpers.perf.links import Link
from helpers.perf.roofline import BF16


def dispatch_bytes(model: ModelPreset, lay: Layout) -> float:
    return tokens(lay) / lay.tp * model.moe_router_topk * model.hidden_size * BF16


def layer(model: ModelPreset, lay: Layout, link: Link) -> tuple[float, float]:
    """(forward, backward) seconds."""
    one = collectives.seconds("all_to_all", dispatch_bytes(model, lay), lay.ep, link)
    return 2 * one, 2 * one
