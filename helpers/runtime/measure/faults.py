"""Fault injection for tests and the failure-modes lesson, driven by one environment variable:
    KIT_FAULT="<kind>@<iteration>[:rank<N>]"   kind: raise | hang | nan | exit | killjob
                                               | exit_during_save | hang_during_save | killjob_during_save
                                               | exit_during_load | hang_during_load
e.g. KIT_FAULT="raise@2:rank1" makes rank 1 raise at iteration 2. `killjob` is `kill -9` of the
whole job (every rank and torchrun). The *_during_save/load kinds fire inside the checkpoint
save of that iteration / the load of a checkpoint of that iteration. Unset = no effect."""
from __future__ import annotations

import os
import signal
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
    if kind.endswith(("_during_save", "_during_load")):
        return 1.0  # fires in at_checkpoint()
    if kind == "killjob":
        kill_job()
    if kind == "exit":
        os._exit(3)  # a crash without a Python traceback (like a segfault or OOM kill)
    if kind == "hang":
        while True:  # a stuck rank: the runner's timeout must end the job
            time.sleep(1)
    if kind == "nan":
        return float("nan")
    raise ValueError(f"unknown KIT_FAULT kind {kind!r} (use raise, exit, killjob, hang, nan, or "
                     "exit|hang|killjob _during_save|_during_load)")


def kill_job() -> None:
    """`kill -9` of the whole job: the torchrun agent (this rank's parent), then every rank."""
    import psutil

    agent = psutil.Process(os.getppid())
    ranks = agent.children(recursive=True)
    os.kill(agent.pid, signal.SIGKILL)  # first, so it cannot tidy up or restart anything
    for p in ranks:
        if p.pid != os.getpid():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
    os.kill(os.getpid(), signal.SIGKILL)


def at_checkpoint(event: str, iteration: int, rank: int) -> None:
    """Called by helpers/runtime/checkpoint/io.py in the middle of a save or load (`event`)."""
    fault = _parse()
    if fault is None:
        return
    kind, at, only_rank = fault
    if kind not in (f"exit_during_{event}", f"hang_during_{event}", f"killjob_during_{event}") or iteration != at \
            or (only_rank is not None and rank != only_rank):
        return
    if kind.startswith("killjob"):
        kill_job()
    if kind.startswith("exit"):
        os._exit(3)  # this rank dies; its shard of the checkpoint is never written
    while True:
        time.sleep(1)
