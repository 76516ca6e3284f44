"""Pipeline parallel: the point-to-point sends between stages and the bubble.

Each microbatch sends its activations (T x h bf16 values) to the next stage and their gradient
back, each TP rank 1/TP of them: with sequence parallel that is its shard, without it Megatron
splits the tensor over the TP group before the send and all-gathers it after (its
scatter_gather_tensors_in_pipeline, on by default; the all-gather stays inside the node and is
left out). With 1F1B those sends sit between a stage's forward and backward
(two per microbatch on each stage's path); the interleaved schedule overlaps them with compute
(Megatron turns overlap_p2p_comm on with virtual stages). When the pipeline does not fit in one
node, some sends cross the network, one GPU's port each (helpers/perf/links.py `point_to_point`).

The bubble: every stage idles while the pipeline fills and drains, (pp - 1) microbatch-times on
1F1B and (pp - 1)/vpp with vpp virtual stages per rank, a fraction (pp - 1)/m, resp.
(pp - 1)/(m * vpp), of the m microbatches' time."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import collectives, links
from helpers.perf.gpus import GpuProfile
from helpers.perf.layer_gemms import tokens
from helpers.perf.roofline import BF16


def send_bytes(model: ModelPreset, lay: Layout) -> float:
    return tokens(lay) * model.hidden_size * BF16 / lay.tp


def sends_per_microbatch_s(model: ModelPreset, lay: Layout, gpus_per_node: int, gpu: GpuProfile) -> float:
    """The sends on one stage's path per microbatch (0 without a pipeline or when interleaving hides them)."""
    if lay.pp <= 1 or lay.vpp:
        return 0.0
    return 2 * collectives.seconds("send", send_bytes(model, lay), 2, links.point_to_point(lay, gpus_per_node, gpu))


def bubble_fraction(pp: int, vpp: int | None, microbatches: int) -> float:
    return (pp - 1) / (microbatches * (vpp or 1))


def bubble_seconds(pp: int, vpp: int | None, per_microbatch_s: float) -> float:
    """Idle time of a stage whose forward + backward of one microbatch takes `per_microbatch_s`."""
    return (pp - 1) / (vpp or 1) * per_microbatch_s
