"""The time of one collective over a link: its bytes at the link's bandwidth times the fraction
NCCL reaches (calibration.COLLECTIVE_EFFICIENCY), plus its latency as NCCL's own cost model counts
it for a ring: a base latency per call and one hop latency per ring step, n-1 steps for a
reduce-scatter or an all-gather and 2(n-1) for an all-reduce over n ranks, the steps between nodes
at the network's hop latency (calibration.RING_BASE_LATENCY_S, HOP_LATENCY_S). So a collective over
hundreds of ranks costs milliseconds before its first byte counts. Ring algorithms: an all-reduce
sends 2(n-1)/n of the buffer per rank, a reduce-scatter or an all-gather (n-1)/n of the whole buffer,
an all-to-all (n-1)/n of what a rank holds (all peers at once: one step; across nodes, what goes to
other nodes through the rank's own network port), a point-to-point send all of it (one step)."""
from __future__ import annotations

from helpers.advisor import calibration
from helpers.advisor.time.links import Link


def ring_latency(steps: int, link: Link, inter_steps: int = 0) -> float:
    """Base latency plus `steps` hops, `inter_steps` of them between nodes."""
    hop = calibration.HOP_LATENCY_S
    return calibration.RING_BASE_LATENCY_S + (steps - inter_steps) * hop["intra"] + inter_steps * hop["inter"]


def _seconds(nbytes: float, link: Link, steps: int = 1, inter_steps: int | None = None) -> float:
    bandwidth = link.gb_per_s * 1e9 * calibration.COLLECTIVE_EFFICIENCY
    if inter_steps is None:  # one step: between nodes when the link is the network
        inter_steps = steps if link.inter_node else 0
    return nbytes / bandwidth + ring_latency(steps, link, inter_steps)


def all_reduce(nbytes: float, n: int, link: Link) -> float:
    return 0.0 if n <= 1 else _seconds(2 * (n - 1) / n * nbytes, link, 2 * (n - 1), 2 * (link.nodes - 1))


def reduce_scatter(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: the whole (unscattered) buffer."""
    return 0.0 if n <= 1 else _seconds((n - 1) / n * nbytes, link, n - 1, link.nodes - 1)


def all_gather(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: the whole (gathered) buffer."""
    return reduce_scatter(nbytes, n, link)


def all_to_all(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: what one rank holds before the exchange; (n-1)/n of it leaves the rank. Over a group
    spanning nodes, the share bound for the other nodes' ranks leaves through the rank's own network
    port (the part for its own node's ranks goes over NVLink at the same time)."""
    if n <= 1:
        return 0.0
    if link.inter_node and link.port_gb_per_s:
        off_node = nbytes * (n - n // link.nodes) / n
        port = Link(link.port_gb_per_s, True, link.nodes)
        return _seconds(off_node, port)
    return _seconds((n - 1) / n * nbytes, link)


def send(nbytes: float, link: Link) -> float:
    return _seconds(nbytes, link)
