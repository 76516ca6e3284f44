"""What the advisor weighs: every layout of the model on the cluster (helpers/perf/layouts.py, the
whole space), and each layout the rules accept once per training choice: the distributed optimizer
off, and on when there is a data-parallel group to shard over; activation recompute none, selective,
full. Those choices are not the rules' business; a layout the rules refuse is kept once, with its
rule names. A narrower `Space` (helpers/perf/layouts.py) leaves some layout choices out."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.training import Training
from helpers.perf.layouts import Space, layouts

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    training: Training | None  # None for a refused layout
    refused: tuple[str, ...] = ()  # the names of the rules that refuse it (helpers/job/rules/)


def candidates(model: ModelPreset, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
               max_micro_batch: int = 16, backend: str = "te", precision: str = "bf16", space: Space = Space(),
               dist_opt: tuple[bool, ...] = (False, True), grad_reduce_in_fp32: bool = True):
    """Every Candidate: refused layouts once (with their rules), accepted ones once per training choice
    (each layout's in RECOMPUTE order: no recompute first). `dist_opt`: the distributed optimizer's
    choices weighed (off alone where there is nothing to shard); `grad_reduce_in_fp32`: the gradient
    buffers' dtype, the one the execution reduces in (Execution.grad_reduce_bytes)."""
    for lay, refused in layouts(model, gpus, min(gpus_per_node, gpus), seq_len, global_batch,
                                max_micro_batch=max_micro_batch, backend=backend, space=space):
        if refused:
            yield Candidate(lay, None, refused)
            continue
        shardable = lay.dp * lay.cp > 1 or (model.is_moe and lay.edp > 1)
        for sharded in [d for d in dist_opt if shardable or not d] or [False]:
            for recompute in RECOMPUTE:
                yield Candidate(lay, Training(precision=precision, dist_opt=sharded, recompute=recompute,
                                              grad_reduce_in_fp32=grad_reduce_in_fp32))
