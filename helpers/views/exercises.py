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


def check_pp_bubble(answer: float | None, p: int, m: int, ideal: float) -> bool:
    """05: the idle fraction of the ideal 1F1B schedule with p stages and m microbatches, `ideal`
    counted from the drawn schedule (forward and backward one slot each)."""
    hint = ("Stage p-1 starts p-1 slots late and stage 0 waits as long at the end; divide that idle time "
            "by the whole window of one stage (its m forward and m backward slots plus the idle ones).")
    return _judge(answer, ideal, hint, rel=1e-3)


def check_cp_kv_gather_bytes(answer: int | None, measured: int) -> bool:
    """06: bytes of one K (or V) all-gather on a TP2 x CP2 rank: the gathered buffer, as measured."""
    hint = ("The gathered K covers the whole sequence: seq_len x micro_batch x (query groups / TP) x head "
            "dim elements, 4 bytes each in fp32. TP splits the heads; CP gathers the sequence back.")
    return _judge(answer, measured, hint)


def check_fewer_bytes_dispatcher(answer: str | None, bytes_by_dispatcher: dict[str, int]) -> bool:
    """07: which dispatcher ("alltoall" or "allgather") moved fewer bytes, as measured."""
    truth = min(bytes_by_dispatcher, key=bytes_by_dispatcher.get)
    hint = ("all-to-all sends one copy of a token per chosen expert that lives elsewhere; all-gather sends "
            "every token of the EP group to every rank once. Compare k with EP.")
    return _judge(answer.strip().lower() if isinstance(answer, str) else answer, truth, hint)


def check_ep_group(answer: list[int] | None, truth: list[int]) -> bool:
    """08: the ranks of rank 0's EP group for a given layout (Megatron's RankGenerator)."""
    hint = ("The expert grid uses the same order string, tp-cp-ep-dp-pp with ETP in TP's place: with ETP=1 "
            "the EP coordinate varies fastest, so EP=4 takes 4 neighbouring ranks. Which dense group are they?")
    return _judge(sorted(answer) if answer is not None else None, sorted(truth), hint)


def check_checkpoint_bytes(answer: float | None, measured: int, params: int) -> bool:
    """10: bytes of tensor data in a runtime checkpoint (its index, `checkpoint_dir.tensor_bytes`),
    from the parameter count: exact."""
    hint = (f"{params:,} parameters, fp32 on CPU. A runtime checkpoint holds the weights and Adam's two "
            "moments, each 4 bytes per parameter (fp32 weights are their own main copy); replicas are "
            "saved once, so TP does not change the total.")
    return _judge(answer, measured, hint)


def check_fits(answer: tuple[bool, bool] | None, truth: tuple[bool, bool], device_gib: float) -> bool:
    """01: (fits without the distributed optimizer, fits with it) for a model on one GPU size."""
    hint = (f"Per parameter: bf16 weights 2 B, fp32 gradients 4 B, fp32 main copy 4 B, Adam 8 B. The "
            f"distributed optimizer divides only the last 12 B by DP. Add activations; compare with {device_gib:g} GiB.")
    return _judge(tuple(bool(x) for x in answer) if answer is not None else None, tuple(truth), hint)
