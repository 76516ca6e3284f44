"""Which link a parallel group's collectives take: NVLink (or PCIe) when the whole group sits in
one node, the network when it spans nodes. Ranks are placed as Megatron places them (its default
order tp-cp-ep-dp-pp, helpers/job/layout.py's ORDER): the leftmost axis varies fastest, so a group
of `size` ranks lies `stride` ranks apart, and torchrun numbers ranks node by node.

A group spanning nodes with k of its members on each node moves its bytes through those k GPUs'
network ports at once (NCCL runs one ring per port): its bandwidth is k times a GPU's network
bandwidth, never more than the link inside the node."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.advisor.gpus import GpuProfile
from helpers.job.layout import Layout


@dataclass(frozen=True)
class Link:
    gb_per_s: float  # per GPU and direction, datasheet (before COLLECTIVE_EFFICIENCY)
    inter_node: bool
    nodes: int = 1  # nodes the group spans: its ring steps between nodes take the network's hop latency
    # one GPU's own network port (a group spanning nodes): what a rank's traffic to ranks on other
    # nodes goes through when every rank talks to every other (all-to-all), unlike a ring, whose
    # node-to-node hops spread over all the node's ports
    port_gb_per_s: float | None = None

    @property
    def kind(self) -> str:
        return "inter" if self.inter_node else "intra"


def group(size: int, stride: int, gpus_per_node: int, gpu: GpuProfile) -> Link:
    """The link of a group of `size` ranks `stride` apart on nodes of `gpus_per_node` GPUs."""
    if stride * size <= gpus_per_node:
        return Link(gpu.intra_node_gb_per_s, False)
    per_node = max(1, min(size, gpus_per_node // stride))
    return Link(min(gpu.intra_node_gb_per_s, per_node * gpu.inter_node_gb_per_s), True, -(-size // per_node),
                gpu.inter_node_gb_per_s)


def groups(lay: Layout) -> dict[str, tuple[int, int]]:
    """{axis: (size, stride)} in Megatron's default order: tp-cp-ep-dp-pp on the dense grid, the
    expert grid's ETP-EP-EDP with the same pipeline; `dp_cp` is the group dense gradients reduce over."""
    tp, cp, dp, pp = lay.tp, lay.cp, lay.dp, lay.pp
    etp, ep = lay.expert_tp, lay.ep
    return {"tp": (tp, 1), "cp": (cp, tp), "dp": (dp, tp * cp), "dp_cp": (dp * cp, tp), "pp": (pp, tp * cp * dp),
            "etp": (etp, 1), "ep": (ep, etp), "edp": (lay.edp, etp * ep)}


def of(lay: Layout, axis: str, gpus_per_node: int, gpu: GpuProfile) -> Link:
    size, stride = groups(lay)[axis]
    return group(size, stride, gpus_per_node, gpu)
