"""The failures a job can be asked to inject on purpose (JobSpec.faults: tests and the failure-modes
lesson), as plain data both sides read: the rules check them before start (rules/debug.py), the
worker fires them through hooks (runtime/measure/faults.py).

    KIND@ITERATION[:rankN]     e.g. "raise@2:rank1": rank 1 raises at iteration 2; no rank: every rank

  raise    a Python exception at the start of the iteration
  exit     the process ends at once, without a Python error (as a kill by the kernel or a native crash)
  killjob  `kill -9` of the whole job: the torchrun agent and every rank
  hang     the rank sleeps forever at the start of the iteration
  nan      the first model chunk's output turns NaN in that iteration's forward passes
  exit_during_save, hang_during_save, killjob_during_save   in the middle of the checkpoint save of
           that iteration (the folder made, no shard written yet)
  exit_during_load, hang_during_load                       when a checkpoint of that iteration is loaded"""
from __future__ import annotations

from dataclasses import dataclass

AT_ITERATION = ("raise", "exit", "killjob", "hang", "nan")
DURING_SAVE = ("exit_during_save", "hang_during_save", "killjob_during_save")
DURING_LOAD = ("exit_during_load", "hang_during_load")
KINDS = AT_ITERATION + DURING_SAVE + DURING_LOAD
FORMAT = "KIND@ITERATION[:rankN]"


@dataclass(frozen=True)
class Fault:
    kind: str
    iteration: int
    rank: int | None = None  # None: every rank

    @property
    def event(self) -> str | None:
        """"save" or "load" for the checkpoint kinds; None for the ones at the start of an iteration."""
        return self.kind.rpartition("_during_")[2] if "_during_" in self.kind else None

    def fires(self, iteration: int, rank: int) -> bool:
        return iteration == self.iteration and self.rank in (None, rank)

    def __str__(self) -> str:
        return f"{self.kind}@{self.iteration}" + (f":rank{self.rank}" if self.rank is not None else "")


def parse(text) -> Fault:
    """"hang@2:rank1" -> Fault("hang", 2, 1). ValueError naming what is wrong (the kind is checked
    by the rules, so an unknown kind still parses)."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string of the form {FORMAT}")
    what, colon, rank = text.strip().partition(":")
    kind, at, iteration = what.partition("@")
    if not kind or not at or not iteration.strip().lstrip("-").isdigit():
        raise ValueError(f"{text!r} is not of the form {FORMAT}")
    if colon and not (rank.startswith("rank") and rank[4:].isdigit()):
        raise ValueError(f"{text!r}: the part after ':' must be rankN, e.g. rank1")
    return Fault(kind.strip(), int(iteration), int(rank[4:]) if colon else None)
