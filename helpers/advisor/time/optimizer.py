"""The optimizer's memory-bound work: Adam's update once per iteration (ADAM_BYTES_PER_PARAM per
parameter, each rank updating only its shard with the distributed optimizer: dense parameters over
DP x CP, experts over EDP), and, when the weight-gradient GEMMs do not accumulate into the gradient
buffer themselves, each microbatch's gradients added into it by a kernel of their own
(Execution.grad_accumulation_buffer): into Megatron's fp32 main_grad every microbatch
(GRAD_ACCUMULATE_BYTES_PER_PARAM: the 16-bit gradient read, the fp32 buffer read and written), into
the parameters' 16-bit .grad every microbatch but the first, whose gradient autograd stores
(PARAM_GRAD_ACCUMULATE_BYTES: the fresh gradient and .grad read, .grad written); at the GPU's
elementwise rate. Byte counts: helpers/perf/roofline.py and here."""
from __future__ import annotations

from helpers.advisor.execution import Execution
from helpers.job.layout import Layout
from helpers.perf.gpus import GpuProfile
from helpers.perf.rates import rates
from helpers.perf.roofline import ADAM_BYTES_PER_PARAM, BF16, GRAD_ACCUMULATE_BYTES_PER_PARAM

PARAM_GRAD_ACCUMULATE_BYTES = 3 * BF16  # per parameter and addition into a 16-bit .grad


def step_seconds(dense: float, expert: float, lay: Layout, dist_opt: bool, gpu: GpuProfile) -> float:
    shard = dense / (lay.dp * lay.cp) + expert / lay.edp if dist_opt else dense + expert
    return ADAM_BYTES_PER_PARAM * shard / (rates(gpu).elementwise_gb_per_s * 1e9)


def accumulate_seconds(params: float, gpu: GpuProfile, execution: Execution, microbatches: int | None = None) -> float:
    """Per microbatch, averaged over the iteration's `microbatches` (None: every microbatch adds)."""
    if execution.grad_accumulation_fused:
        return 0.0
    if execution.grad_accumulation_buffer == "main_grad":
        per_param = GRAD_ACCUMULATE_BYTES_PER_PARAM
    else:
        per_param = PARAM_GRAD_ACCUMULATE_BYTES * ((microbatches - 1) / microbatches if microbatches else 1.0)
    return per_param * params / (rates(gpu).elementwise_gb_per_s * 1e9)
