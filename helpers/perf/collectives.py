"""One collective over n ranks: the bytes each rank sends (`ring_bytes`) and how long it takes over
a link (`seconds`).

Bytes, with the ring algorithms NCCL and gloo run for large buffers: an all-reduce (a reduce-scatter
then an all-gather) sends 2(n-1)/n of the buffer per rank, a reduce-scatter or an all-gather (n-1)/n
of the whole buffer, an all-to-all (n-1)/n of what a rank holds, a point-to-point send all of it.

Time: the bytes at the link's bandwidth times the fraction NCCL reaches
(calibration.COLLECTIVE_EFFICIENCY), plus its latency as NCCL's own cost model counts it for a ring:
a base latency per call and one hop latency per ring step, n-1 steps for a reduce-scatter or an
all-gather and 2(n-1) for an all-reduce, the steps between nodes at the network's hop latency
(calibration.RING_BASE_LATENCY_S, HOP_LATENCY_S). So a collective over hundreds of ranks costs
milliseconds before its first byte counts. An all-to-all sends to all peers at once (one step);
across nodes, what goes to other nodes' ranks leaves through the rank's own network port. A send
is one step."""
from __future__ import annotations

from helpers.perf import calibration
from helpers.perf.links import Link

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send")


def ring_bytes(kind: str, nbytes: float, n: int) -> float:
    """Bytes one rank sends. `nbytes`: the whole buffer (reduced, scattered or gathered); for an
    all-to-all what one rank holds before the exchange; for a send what is sent."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n * nbytes
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n * nbytes
    if kind == "send":
        return nbytes
    raise ValueError(f"unknown collective {kind!r}: one of {', '.join(KINDS)}")


def seconds(kind: str, nbytes: float, n: int, link: Link) -> float:
    """The time of one collective of `kind` over `n` ranks (`nbytes` as in ring_bytes); 0 for a
    group of one rank (a send: n is 2)."""
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return _seconds(ring_bytes(kind, nbytes, n), link, 2 * (n - 1), 2 * (link.nodes - 1))
    if kind in ("reduce_scatter", "all_gather"):
        return _seconds(ring_bytes(kind, nbytes, n), link, n - 1, link.nodes - 1)
    if kind == "all_to_all" and link.inter_node and link.port_gb_per_s:
        # the share bound for other nodes' ranks leaves through the rank's own network port (the part
        # for its own node's ranks goes over NVLink at the same time)
        off_node = nbytes * (n - link.on_own_node) / n
        return _seconds(off_node, Link(link.port_gb_per_s, True, link.nodes))
    return _seconds(ring_bytes(kind, nbytes, n), link)


def ring_latency(steps: int, inter_steps: int = 0) -> float:
    """Base latency plus `steps` hops, `inter_steps` of them between nodes."""
    hop = calibration.HOP_LATENCY_S
    return calibration.RING_BASE_LATENCY_S + (steps - inter_steps) * hop["intra"] + inter_steps * hop["inter"]


def _seconds(nbytes: float, link: Link, steps: int = 1, inter_steps: int | None = None) -> float:
    bandwidth = link.gb_per_s * 1e9 * calibration.COLLECTIVE_EFFICIENCY
    if inter_steps is None:  # one step: between nodes when the link is the network
        inter_steps = steps if link.inter_node else 0
    return nbytes / bandwidth + ring_latency(steps, inter_steps)
