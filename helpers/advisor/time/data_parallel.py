"""Data parallel: the gradients reduced over the replicas once per iteration, and with the
distributed optimizer the updated parameters gathered back.

Dense parameters reduce over the DP x CP group, routed experts over the expert-data-parallel
group (EDP). Without the distributed optimizer: an all-reduce of the gradients
(Execution.grad_reduce_bytes per element: fp32 or 16-bit); with it: a reduce-scatter of the
gradients and an all-gather of the bf16 parameters. Megatron splits each buffer into buckets
(Megatron-LM's default: max(40M, 1M x the data-parallel size) elements) and runs one collective
per bucket, so each pays its own latency (helpers/perf/collectives.py).

Overlap (Execution): a bucket's reduction starts once the last microbatch's backward has produced
its gradients, so the reductions run under the rest of that backward, and the last bucket's can
hide under nothing; the parameter all-gather runs bucket by bucket under the next iteration's first
forward, the first bucket's before it. What exceeds its window shows, and never less than that one
bucket's collective."""
from __future__ import annotations

import math
from dataclasses import dataclass

from helpers.advisor.execution import Execution
from helpers.job.layout import Layout
from helpers.perf import collectives
from helpers.perf.links import Link
from helpers.perf.roofline import BF16


def bucket_elements(replicas: int) -> int:
    """Megatron-LM's default DDP bucket (training.py: max(40000000, 1000000 x data-parallel size))."""
    return max(40_000_000, 1_000_000 * replicas)


@dataclass(frozen=True)
class Sync:
    reduce_s: float  # every bucket's gradient reduction
    gather_s: float  # every bucket's parameter all-gather (distributed optimizer)
    last_reduce_s: float  # the last bucket's reduction: after the backward, under nothing
    first_gather_s: float  # the first bucket's all-gather: before the first forward can start


def sync(dense: float, expert: float, lay: Layout, dist_opt: bool, execution: Execution,
         dp_link: Link, edp_link: Link) -> Sync:
    """The data-parallel collectives of one rank holding `dense` and `expert` parameters."""
    g = execution.grad_reduce_bytes
    reduce = gather = last = first = 0.0
    for params, n, link in ((dense, lay.dp * lay.cp, dp_link), (expert, lay.edp, edp_link)):
        if not params or n <= 1:
            continue
        buckets = max(1, math.ceil(params / bucket_elements(n)))
        one = params / buckets
        if dist_opt:
            r = collectives.seconds("reduce_scatter", one * g, n, link)
            a = collectives.seconds("all_gather", one * BF16, n, link)
        else:
            r, a = collectives.seconds("all_reduce", one * g, n, link), 0.0
        reduce, gather = reduce + buckets * r, gather + buckets * a
        last, first = max(last, r), max(first, a)
    return Sync(reduce, gather, last, first)


def exposed_seconds(s: Sync, execution: Execution, backward_window_s: float, forward_window_s: float) -> float:
    """What of the collectives the step waits for: beyond their windows, at least one bucket each."""
    reduce = (max(s.last_reduce_s, s.reduce_s - backward_window_s) if execution.overlap_grad_reduce
              else s.reduce_s)
    gather = (max(s.first_gather_s, s.gather_s - forward_window_s) if execution.overlap_param_gather
              else s.gather_s)
    return reduce + gather
