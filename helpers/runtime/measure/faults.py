"""Failures injected on purpose for the tests and the failure-modes lesson: JobSpec.faults, whose
kinds and grammar are helpers/job/faults.py's and which the rules check before start. Each fault
enters through a hook, and a job without faults installs none:

  raise, exit, killjob, hang     `Injected.begin(iteration)`, the Observer's first call of an iteration
  nan                            a forward hook on the first model chunk: its output times NaN during
                                 that iteration (NaN hidden states reach the loss through every later stage)
  *_during_save, *_during_load   a callback in helpers/runtime/checkpoint/io.py's MIDWAY list

    injected = install(spec, global_rank, model)   # train.run: after DDP and the optimizer, before
                                                   # resuming; the Observer is handed `injected`"""
from __future__ import annotations

import os
import signal
import time

from helpers.job import faults
from helpers.runtime.checkpoint import io as checkpoint_io


class Injected:
    """This rank's faults and the hooks that fire them."""

    def __init__(self, mine: list[faults.Fault], rank: int):
        self.faults, self.rank = mine, rank
        self.nan_now = False

    def begin(self, iteration: int) -> None:
        """At the start of an iteration: fail now, or arm the NaN hook for this iteration."""
        self.nan_now = False
        for fault in self.faults:
            if fault.event is None and fault.fires(iteration, self.rank):
                if fault.kind == "nan":
                    self.nan_now = True
                else:
                    fail(fault, fault.kind, self.rank)

    def nan_output(self, module, args, output):
        """Forward hook: the chunk's output (per-token losses, or the hidden states a later stage
        takes) turned NaN in training forwards of an armed iteration."""
        if self.nan_now and module.training:
            return output * float("nan")
        return None

    def midway(self, event: str, iteration: int, rank: int) -> None:
        """checkpoint/io.py's callback, midway through a save or load."""
        for fault in self.faults:
            if fault.event == event and fault.fires(iteration, rank):
                fail(fault, fault.kind.partition("_during_")[0], rank)


def install(spec, global_rank: int, model: list) -> Injected | None:
    """The hooks for this rank's faults, on its DDP-wrapped `model` chunks (None: no fault names this rank)."""
    mine = [f for f in map(faults.parse, spec.faults) if f.rank in (None, global_rank)]
    if not mine:
        return None
    injected = Injected(mine, global_rank)
    checkpoint_io.MIDWAY.append(injected.midway)
    if any(f.kind == "nan" for f in mine):
        model[0].register_forward_hook(injected.nan_output)
    return injected


def fail(fault: faults.Fault, how: str, rank: int) -> None:
    if how == "raise":
        raise RuntimeError(f"injected failure on rank {rank} at iteration {fault.iteration} (fault {fault})")
    if how == "killjob":
        kill_job()
    if how == "exit":
        os._exit(3)  # a crash without a Python traceback (an OOM kill, a segfault); a save's shard is never written
    while True:  # hang: a stuck rank; a watchdog must end the job
        time.sleep(1)


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
