"""Fault injection for tests and the failure-modes lesson, driven by one environment variable:
    KIT_FAULT="<kind>@<iteration>[:rank<N>]"   kind: raise | hang | nan | exit
e.g. KIT_FAULT="raise@2:rank1" makes rank 1 raise at iteration 2. Unset = no effect."""
from __future__ import annotations

import os
import time


def _parse():
    value = os.environ.get("KIT_FAULT")
    if not value:
        return None
    what, _, rank = value.partition(":")
    kind, _, iteration = what.partition("@")
    return kind, int(iteration or 1), (int(rank.removeprefix("rank")) if rank else None)


def maybe_inject(iteration: int, rank: int) -> float:
    """Called at the start of each iteration. Returns a loss multiplier (NaN for `nan`)."""
    fault = _parse()
    if fault is None:
        return 1.0
    kind, at, only_rank = fault
    if iteration != at or (only_rank is not None and rank != only_rank):
        return 1.0
    if kind == "raise":
        raise RuntimeError(f"injected failure on rank {rank} at iteration {iteration} (KIT_FAULT)")
    if kind == "exit":
        os._exit(3)  # a crash without a Python traceback (like a segfault or OOM kill)
    if kind == "hang":
        while True:  # a stuck rank: the runner's timeout must end the job
            time.sleep(1)
    if kind == "nan":
        return float("nan")
    raise ValueError(f"unknown KIT_FAULT kind {kind!r} (use raise, exit, hang or nan)")
