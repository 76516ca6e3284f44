"""Data parallel: the gradients reduced over the replicas once per iteration, and with the
distributed optimizer the updated parameters gathered back.

Dense parameters reduce over the DP x CP group, routed experts over the expert-data-parallel
group (EDP). Without the distributed optimizer: an all-reduce of the gradients
(Execution.grad_reduce_bytes per element: fp32 or 16-bit); with it: a reduce-scatter of the
gradients and an all-gather of the bf16 parameters. Overlap (Execution): Megatron reduces gradient
buckets while the last microbatch's backward runs, and gathers parameters while the next
iteration's first forward runs; only what exceeds that window shows. (The last bucket, which can
never overlap, is left out.)"""
from __future__ import annotations

from helpers.advisor.execution import Execution
from helpers.advisor.time import collectives
from helpers.advisor.time.links import Link
from helpers.job.layout import Layout
from helpers.roofline.step import BF16


def sync_seconds(dense: float, expert: float, lay: Layout, dist_opt: bool, execution: Execution,
                 dp_link: Link, edp_link: Link) -> tuple[float, float]:
    """(gradient reduction, parameter gather) seconds of one rank holding `dense` and `expert`
    parameters."""
    g = execution.grad_reduce_bytes
    reduce = gather = 0.0
    for params, n, link in ((dense, lay.dp * lay.cp, dp_link), (expert, lay.edp, edp_link)):
        if not params or n <= 1:
            continue
        if dist_opt:
            reduce += collectives.reduce_scatter(params * g, n, link)
            gather += collectives.all_gather(params * BF16, n, link)
        else:
            reduce += collectives.all_reduce(params * g, n, link)
    return reduce, gather


def exposed_seconds(reduce_s: float, gather_s: float, execution: Execution, backward_window_s: float,
                    forward_window_s: float) -> float:
    reduce = max(0.0, reduce_s - backward_window_s) if execution.overlap_grad_reduce else reduce_s
    gather = max(0.0, gather_s - forward_window_s) if execution.overlap_param_gather else gather_s
    return reduce + gather
