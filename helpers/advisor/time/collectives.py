"""The time of one collective over a link: its bytes at the link's bandwidth times the fraction
NCCL reaches (calibration.COLLECTIVE_EFFICIENCY), plus a fixed latency per call. Ring algorithms:
an all-reduce sends 2(n-1)/n of the buffer per rank, a reduce-scatter or an all-gather (n-1)/n of
the whole buffer, an all-to-all (n-1)/n of what a rank holds, a point-to-point send all of it."""
from __future__ import annotations

from helpers.advisor import calibration
from helpers.advisor.time.links import Link


def _seconds(nbytes: float, link: Link) -> float:
    bandwidth = link.gb_per_s * 1e9 * calibration.COLLECTIVE_EFFICIENCY
    return nbytes / bandwidth + calibration.COLLECTIVE_LATENCY_S[link.kind]


def all_reduce(nbytes: float, n: int, link: Link) -> float:
    return 0.0 if n <= 1 else _seconds(2 * (n - 1) / n * nbytes, link)


def reduce_scatter(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: the whole (unscattered) buffer."""
    return 0.0 if n <= 1 else _seconds((n - 1) / n * nbytes, link)


def all_gather(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: the whole (gathered) buffer."""
    return reduce_scatter(nbytes, n, link)


def all_to_all(nbytes: float, n: int, link: Link) -> float:
    """`nbytes`: what one rank holds before the exchange; (n-1)/n of it leaves the rank."""
    return 0.0 if n <= 1 else _seconds((n - 1) / n * nbytes, link)


def send(nbytes: float, link: Link) -> float:
    return _seconds(nbytes, link)
