"""What a rule reports: a Violation with a stable name, the numbers involved in words and a fix
that works. Every rule of the package returns a list of them, so one check can show a user every
problem at once (torchtitan style), not the first assertion a worker would hit."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    name: str  # stable identifier, e.g. "heads_divisible_by_tp"
    message: str  # the numbers involved, in words
    fix: str  # a change that makes the job run
    category: str = "layout"  # the rule module's area: world, tensor, ..., backend, precision, data, ...

    def __str__(self) -> str:
        return f"[{self.name}] {self.message}. Fix: {self.fix}"


class Found(list):
    """The violations of one category, filled by `add`."""

    def __init__(self, category: str):
        super().__init__()
        self.category = category

    def add(self, name: str, message: str, fix: str) -> None:
        self.append(Violation(name, message, fix, self.category))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
