"""The link a parallel group's traffic takes: NVLink (or PCIe) when the whole group sits in one
node, the network when it spans nodes (placement.py says which). `LINKS` names a few datasheet links
for the roofline model (roofline.py), where each axis is given its link by hand.

A group spanning nodes moves its bytes through the network ports of its ranks on each node at once
(NCCL runs one ring per port): its bandwidth is a GPU's network bandwidth times the group's ranks on
its least-filled node, never more than the link inside the node. Pipeline sends go rank to rank,
through one port."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.perf.gpus import GpuProfile
from helpers.perf.placement import Span, spans


@dataclass(frozen=True)
class Link:
    gb_per_s: float  # per GPU and direction, datasheet (before calibration.COLLECTIVE_EFFICIENCY)
    inter_node: bool = False
    nodes: int = 1  # nodes the group spans: its ring steps between nodes take the network's hop latency
    # one GPU's own network port (a group spanning nodes): what a rank's traffic to ranks on other
    # nodes goes through when every rank talks to every other (all-to-all), unlike a ring, whose
    # node-to-node hops spread over all the node's ports
    port_gb_per_s: float | None = None
    on_own_node: int | None = None  # the group's ranks on this rank's node (an all-to-all's share kept inside it)
    name: str = ""


LINKS = {
    "nvlink4": Link(450.0, name="NVLink 4 (H100/H200, 18 links)"),
    "pcie5": Link(64.0, name="PCIe 5.0 x16"),
    "ib-ndr": Link(50.0, inter_node=True, name="InfiniBand NDR, 400 Gb/s per GPU"),
}


def of_span(span: Span, gpu: GpuProfile) -> Link:
    """The link of a group placed as `span` on nodes of `gpu`."""
    if span.nodes == 1:
        return Link(gpu.intra_node_gb_per_s)
    return Link(min(gpu.intra_node_gb_per_s, span.fewest_per_node * gpu.inter_node_gb_per_s), True, span.nodes,
                gpu.inter_node_gb_per_s, span.on_own_node)


def of(lay: Layout, axis: str, gpus_per_node: int, gpu: GpuProfile) -> Link:
    """The link of rank 0's group on `axis` (placement.AXES)."""
    return of_span(spans(lay, gpus_per_node)[axis], gpu)


def point_to_point(lay: Layout, gpus_per_node: int, gpu: GpuProfile) -> Link:
    """The link of a pipeline send: inside the node when the whole pipeline is, else one GPU's port."""
    if spans(lay, gpus_per_node)["pp"].nodes == 1:
        return Link(gpu.intra_node_gb_per_s)
    return Link(gpu.inter_node_gb_per_s, True)
