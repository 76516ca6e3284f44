"""The lessons' exercises: each `check_<name>(answer, ...)` compares a learner's answer with the
truth computed from the live run (or from the formula the lesson verified), says "correct", or
raises `WrongAnswer` with a hint. `None` (not answered yet) prints the question's hint and returns
False, so "Run All" goes on. The answers live in no notebook: a learner writes them into the
notebook's parameters cell; the test suite passes the right ones through papermill
(tests/notebooks/test_notebooks.py), and tests/unit/test_exercises.py shows every check rejects a
wrong one."""
from __future__ import annotations


class WrongAnswer(AssertionError):
    """The answer differs from the truth; the message says by how much and gives a hint."""


def _judge(answer, truth, hint: str, rel: float = 0.0) -> bool:
    if answer is None:
        print(f"not answered yet. {hint}")
        return False
    ok = abs(float(answer) - truth) <= rel * abs(truth) if rel else answer == truth
    if not ok:
        raise WrongAnswer(f"{answer!r} is not it. {hint}")
    print(f"correct: {answer!r}")
    return True


def check_dp_wire_bytes(formula: str | float | None, n: int, grad: int, elem: int, measured: float) -> bool:
    """02: bytes rank 0 sends on the DP group in one iteration with the distributed optimizer
    (reduce-scatter of the fp32 grad buffer + all-gather of the parameters, ring algorithms).
    `formula`: a number, or an expression in n, grad, elem."""
    value = eval(formula, {"__builtins__": {}}, {"n": n, "grad": grad, "elem": elem}) if isinstance(formula, str) else formula
    hint = ("A ring reduce-scatter or all-gather sends (n-1)/n of its buffer; the parameter buffer has "
            "grad/4 elements (fp32 gradients) of `elem` bytes each.")
    return _judge(value, measured, hint, rel=1e-6)


def check_tp_all_reduces(answer: int | None, per_microbatch: int, microbatches: int = 3) -> bool:
    """03: activation all-reduces one TP rank runs per iteration for `microbatches` microbatches."""
    hint = ("Per layer: one after attention and one after the MLP, in forward and again in backward; "
            "plus the embedding and the output layer; every microbatch repeats them.")
    return _judge(answer, microbatches * per_microbatch, hint)


def check_sp_all_gathers(answer: int | None, measured_per_microbatch: int) -> bool:
    """04: all-gathers one TP+SP rank runs per microbatch (4 layers)."""
    hint = "Per layer 2 in forward and 4 in backward; the embedding adds 1, the output layer 2."
    return _judge(answer, measured_per_microbatch, hint)


def check_vpp_isends(answer: int | None, p: int, v: int, m: int) -> bool:
    """05: isend calls of rank 0 (stage 0) per iteration with p stages, v chunks per rank and m
    microbatches (the count the lesson verified on the measured PP=2 x VPP=2 job)."""
    truth = m * (v - (p == 1)) + m * (v - 1)
    hint = ("Forward: every chunk sends its output to the next virtual stage, except the very last one "
            "(which rank 0 holds only when p = 1); backward: every chunk except the very first sends back.")
    return _judge(answer, truth, hint)
