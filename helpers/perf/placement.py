"""Where a layout's parallel groups sit on nodes: for each axis, rank 0's group as Megatron-Core
builds it (Layout.groups_of, which asks its RankGenerator: the code initialize_model_parallel runs),
on nodes of `gpus_per_node` GPUs that torchrun numbers node by node. A group on one node talks over
NVLink (or PCIe); a group spanning nodes crosses the network (links.py says at what bandwidth).

Rank 0's groups stand for all: with whole nodes and Megatron's default order every group of an axis
sits alike, except where a node's size is not a multiple of the ranks between a group's members;
there the groups of one axis differ, and rank 0's is taken. Megatron-Core is imported (about five
seconds of CPU, once) only for a layout wider than one node."""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from helpers.job.layout import Layout

AXES = ("tp", "cp", "dp", "dp_cp", "pp", "etp", "ep", "edp")


@dataclass(frozen=True)
class Span:
    size: int  # ranks in the group
    nodes: int  # nodes they sit on
    fewest_per_node: int  # the group's ranks on its least-filled node
    on_own_node: int  # the group's ranks on rank 0's node, rank 0 included


def spans(lay: Layout, gpus_per_node: int) -> dict[str, Span]:
    """{axis: Span} of rank 0's group on each axis (AXES; dp_cp: the group dense gradients reduce over)."""
    return _spans(lay.tp, lay.cp, lay.pp, lay.world_size, lay.expert_tp, lay.ep, gpus_per_node)


@functools.cache  # the advisor times thousands of layouts; they share far fewer group shapes
def _spans(tp: int, cp: int, pp: int, world: int, etp: int, ep: int, gpus_per_node: int) -> dict[str, Span]:
    if world <= gpus_per_node:  # one node holds every group, wherever Megatron puts their ranks
        dp, edp = world // (tp * cp * pp), world // (etp * ep * pp)
        sizes = {"tp": tp, "cp": cp, "dp": dp, "dp_cp": dp * cp, "pp": pp, "etp": etp, "ep": ep, "edp": edp}
        return {axis: Span(n, 1, n, n) for axis, n in sizes.items()}
    groups = Layout(nproc=world, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp).groups_of(0)
    out = {}
    for axis in AXES:
        per_node = Counter(rank // gpus_per_node for rank in groups[axis])
        out[axis] = Span(len(groups[axis]), len(per_node), min(per_node.values()), per_node[0])
    return out
