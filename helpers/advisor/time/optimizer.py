"""The optimizer's memory-bound work: Adam's update once per iteration (ADAM_BYTES_PER_PARAM per
parameter, each rank updating only its shard with the distributed optimizer: dense parameters over
DP x CP, experts over EDP), and, when the weight-gradient GEMMs do not accumulate into the fp32
buffer themselves, each microbatch's gradients added into it (GRAD_ACCUMULATE_BYTES_PER_PARAM),
at the GPU's elementwise rate. Byte counts: helpers/perf/roofline.py."""
from __future__ import annotations

from helpers.advisor.execution import Execution
from helpers.job.layout import Layout
from helpers.perf.gpus import GpuProfile
from helpers.perf.rates import rates
from helpers.perf.roofline import ADAM_BYTES_PER_PARAM, GRAD_ACCUMULATE_BYTES_PER_PARAM


def step_seconds(dense: float, expert: float, lay: Layout, dist_opt: bool, gpu: GpuProfile) -> float:
    shard = dense / (lay.dp * lay.cp) + expert / lay.edp if dist_opt else dense + expert
    return ADAM_BYTES_PER_PARAM * shard / (rates(gpu).elementwise_gb_per_s * 1e9)


def accumulate_seconds(params: float, gpu: GpuProfile, execution: Execution) -> float:
    """Per microbatch."""
    if execution.grad_accumulation_fused:
        return 0.0
    return GRAD_ACCUMULATE_BYTES_PER_PARAM * params / (rates(gpu).elementwise_gb_per_s * 1e9)
