"""Tensor (and sequence) parallel collectives of one layer on one rank for one microbatch.

Each TP-split block (attention, MLP, shared experts, Mamba mixer) moves its input activations
S = T x h bf16 values once each way: forward, an all-reduce after its row-parallel linear (with
sequence parallel: an all-gather before the column-parallel linear and a reduce-scatter after the
row-parallel one, the same bytes); backward, the column-parallel linear's input gradient
all-reduced (sequence parallel: the row-parallel's output gradient all-gathered, the input
gathered again for the weight gradient and the input gradient reduce-scattered). Megatron runs the
column-parallel backward's collectives under its own GEMMs (Execution.tp_overlap_backward): only
what exceeds those GEMMs' time shows. Routed experts with ETP > 1 gather the tokens they received
over the ETP group and reduce-scatter them back, the same way, over the ETP group's link."""
from __future__ import annotations

from helpers.advisor.execution import Execution
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import collectives
from helpers.perf.layer_gemms import routed_pairs, tokens
from helpers.perf.links import Link
from helpers.perf.roofline import BF16

COLUMN_PARALLEL = ("qkv", "q", "q_down", "q_up", "kv_down", "kv_up", "mlp.fc1", "shared_experts.fc1", "in_proj")


def blocks(model: ModelPreset, kind: str) -> int:
    """TP-split blocks of a layer kind (routed experts are etp_blocks')."""
    shared = 1 if model.moe_shared_expert_intermediate_size else 0
    return {"dense": 2, "moe": 1 + shared, "*": 1, "-": 1, "M": 1, "E": shared}[kind]


def _one_block(nbytes: float, n: int, link: Link, sp: bool) -> tuple[float, float, float]:
    """(forward, backward exposed, backward overlappable) seconds of one block's collectives."""
    if n <= 1:
        return 0.0, 0.0, 0.0
    if not sp:
        all_reduce = collectives.seconds("all_reduce", nbytes, n, link)
        return all_reduce, 0.0, all_reduce
    ag, rs = collectives.seconds("all_gather", nbytes, n, link), collectives.seconds("reduce_scatter", nbytes, n, link)
    return ag + rs, ag, ag + rs


def layer(model: ModelPreset, lay: Layout, kind: str, tp_link: Link, etp_link: Link, execution: Execution,
          column_backward_s: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one layer's TP and ETP collectives.
    `column_backward_s`: the backward time of its column-parallel GEMMs (the overlap window)."""
    fwd, exposed, hidden = (b * blocks(model, kind) for b in _one_block(tokens(lay) * model.hidden_size * BF16,
                                                                          lay.tp, tp_link, lay.sp))
    if kind in ("moe", "E") and lay.expert_tp > 1:
        e = _one_block(routed_pairs(model, lay) * model.hidden_size * BF16, lay.expert_tp, etp_link, True)
        fwd, exposed, hidden = fwd + e[0], exposed + e[1], hidden + e[2]
    window = column_backward_s if execution.tp_overlap_backward else 0.0
    return fwd, exposed + max(0.0, hidden - window)
