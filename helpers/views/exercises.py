"""The lessons' exercises: each `check_<name>(answer, ...)` compares a learner's answer with the
truth computed from the live run (or from the formula the lesson verified) and says "correct"
(returns True), or "not yet" with a hint (returns False): the hint comes only after a wrong answer.
`None` (not answered yet) says where to write the answer and returns False. Either way the lesson
goes on, so "Run All" reaches its end. The answers live in no notebook: a learner writes them into
the notebook's parameters cell; the test suite passes the right ones through papermill and fails
on any verdict other than "correct" (`verdicts` reads them back from the executed copy:
tests/notebooks/test_notebooks.py), and tests/unit/test_exercises.py shows every check rejects a
wrong one.

In a notebook each verdict is one output with two forms: the sentence a learner reads
(text/plain) and a record for the test suite (VERDICT_MIME: the check's name and its verdict),
which no front end draws. Outside IPython the sentence is printed.

No answer shows before an attempt: what would give an answer away (a flag, a rank, a formula, a
table) is printed after its check, under `shown(...)` or by `reveal(...)`: once the check passed, or
when the learner asked for it with the lesson's `show_answers` parameter
(tests/unit/test_exercise_order.py looks for each answer in every cell before its check)."""
from __future__ import annotations

from helpers.views.exercise_chain import (  # noqa: F401
    check_bubble_target, check_recompute_budget, check_run_on_more_gpus)
from helpers.views.exercise_decisions import (  # noqa: F401  the lessons call them as exercises.check_...
    LAYOUT_CHOICES, check_layout_choice, check_megatron_command, check_megatron_flags, command_flags, place_layout)
from helpers.views.exercise_real_run import (  # noqa: F401
    check_cpt_choice, check_data_path, check_log_diagnosis, check_two_node_launch)
from helpers.views.exercise_verdicts import VERDICT_MIME, judge, reveal, shown, tell, verdicts  # noqa: F401


def check_time_ratio(answer: float | None, truth: float, what: str) -> bool:
    """Predict the time (a roofline model, helpers/perf/roofline.py): how many times longer `what` takes in
    one setting than in another; within 10% of the model's ratio."""
    hint = ("Count what changes between the two settings: the bytes each rank sends per collective, how "
            "many collectives (microbatches per rank), and the link's bandwidth. Multiply the factors.")
    return judge(answer, truth, hint, rel=0.1)


def check_dp_wire_bytes(formula: str | float | None, n: int, grad: int, elem: int, measured: float) -> bool:
    """03: bytes rank 0 sends on the DP group in one iteration with the distributed optimizer
    (reduce-scatter of the fp32 grad buffer + all-gather of the parameters, ring algorithms).
    `formula`: a number, or an expression in n, grad, elem."""
    names = {"n": n, "grad": grad, "elem": elem}
    value = eval(formula, {"__builtins__": {}}, names) if isinstance(formula, str) else formula
    hint = ("Which buffer does each of the two collectives move, and how many elements does the parameter "
            "buffer have if `grad` holds fp32 gradients? On a ring, what share of its buffer does one rank send?")
    return judge(value, measured, hint, rel=1e-6, shown=formula)


def check_tp_all_reduces(answer: int | None, per_microbatch: int, microbatches: int = 3) -> bool:
    """04: activation all-reduces one TP rank runs per iteration for `microbatches` microbatches
    (`per_microbatch`: the count the lesson verified on the measured jobs, for the layer count asked)."""
    hint = ("Which linears of a layer leave a partial sum in forward, and which in backward? The measured "
            "table counts a 4-layer model: split its number into what repeats per layer and what does not.")
    return judge(answer, microbatches * per_microbatch, hint)


def check_sp_all_gathers(answer: int | None, measured_per_microbatch: int) -> bool:
    """05: all-gathers one TP+SP rank runs per microbatch (the count the lesson verified on the
    measured jobs, for the layer count asked)."""
    hint = ("Each all-reduce of plain TP became a reduce-scatter and an all-gather, in forward and in "
            "backward; a column-parallel linear also needs its whole input again for its weight gradient. "
            "The embedding and the output layer take part too: how?")
    return judge(answer, measured_per_microbatch, hint)


def check_vpp_isends(answer: int | None, p: int, v: int, m: int) -> bool:
    """06: isend calls of rank 0 (stage 0) per iteration with p stages, v chunks per rank and m
    microbatches (the count the lesson verified on the measured PP=2 x VPP=2 job)."""
    truth = m * (v - (p == 1)) + m * (v - 1)
    hint = ("Chunk c of rank r is virtual stage c*p + r. Each microbatch leaves every virtual stage forward "
            "and backward, except where there is no next (or previous) one: which virtual stages does rank 0 hold?")
    return judge(answer, truth, hint)


def check_pp_bubble(answer: float | None, p: int, m: int, ideal: float) -> bool:
    """06: the idle fraction of the ideal 1F1B schedule with p stages and m microbatches, `ideal`
    counted from the drawn schedule (forward and backward one slot each)."""
    hint = ("Count in slots of the drawn schedule: how long does the last stage wait before its first forward, "
            "and the first stage after its last backward? What share of one stage's whole window is that?")
    return judge(answer, ideal, hint, rel=1e-3)


def check_cp_kv_gather_bytes(answer: int | None, measured: int) -> bool:
    """07: bytes of one K (or V) all-gather on a TP2 x CP2 rank: the gathered buffer, as measured."""
    hint = ("Which dimension of K does the CP all-gather make whole again, and which does TP leave split? "
            "Count the elements of the gathered buffer, then the bytes per element of this run's precision.")
    return judge(answer, measured, hint)


def check_fewer_bytes_dispatcher(answer: str | None, bytes_by_dispatcher: dict[str, int]) -> bool:
    """08: which dispatcher ("alltoall" or "allgather") moved fewer bytes, as measured."""
    truth = min(bytes_by_dispatcher, key=bytes_by_dispatcher.get)
    hint = ("all-to-all sends one copy of a token per chosen expert that lives elsewhere; all-gather sends "
            "every token of the EP group to every rank once. Compare k with EP.")
    return judge(answer.strip().lower() if isinstance(answer, str) else answer, truth, hint)


def check_ep_group(answer: list[int] | None, truth: list[int]) -> bool:
    """09: the ranks of rank 0's EP group for a given layout (Megatron's RankGenerator)."""
    hint = ("The expert grid is a second generator with its own sizes: which of TP, CP, ETP appear in it? "
            "Read its order string and find the coordinate that varies fastest.")
    return judge(sorted(answer) if answer is not None else None, sorted(truth), hint)


def check_checkpoint_bytes(answer: float | None, measured: int, params: int) -> bool:
    """11: bytes of tensor data in a runtime checkpoint (its index, `checkpoint_dir.tensor_bytes`),
    from the parameter count: exact."""
    hint = (f"{params:,} parameters, fp32 on CPU. What does Adam keep for each parameter besides the weight, "
            "and in which dtype? Does TP add copies, or only cut them?")
    return judge(answer, measured, hint)


def check_fits(answer: tuple[bool, bool] | None, truth: tuple[bool, bool], device_gib: float) -> bool:
    """02: (fits without the distributed optimizer, fits with it) for a model on one GPU size."""
    hint = ("Section 1's bytes per parameter: which of the four kinds does the distributed optimizer shard "
            f"over DP, and which stay whole on every GPU? Add the activations; compare with {device_gib:g} GiB.")
    return judge(tuple(bool(x) for x in answer) if answer is not None else None, tuple(truth), hint)


def check_qkv_rows(answer: int | None, measured: int) -> bool:
    """01: rows of layer 0's linear_qkv weight on one rank of the TP=2 run, as the rank reported."""
    hint = ("linear_qkv is column-parallel: it stacks the query, key and value projections of every head "
            "(heads x head dim rows each) and TP splits the rows, whole heads per rank.")
    return judge(answer, measured, hint)


def check_pp_starts_equal(answer: bool | None, truth: bool) -> bool:
    """01: does the script at PP=2 compute the same first loss as at TP=1 (as measured)?"""
    hint = ("Where do the weights come from? use_cpu_initialization draws each full weight from the "
            "default random generator, in the order this process creates layers. What does a rank of "
            "stage 2 create first?")
    return judge(bool(answer) if answer is not None else None, truth, hint)


def check_microbatches(answer: int | None, measured: int) -> bool:
    """00: microbatches one rank of the TP=2 job ran per iteration, counted in its recorded schedule."""
    hint = ("Which ranks share the global batch out between them: the TP ranks, or the data-parallel "
            "replicas? How many data-parallel replicas does a TP=2 job on 2 processes have?")
    return judge(answer, measured, hint)


def _rules(layouts: dict) -> dict[str, frozenset]:
    """{layout: rule names}; a layout's value may be None (it runs), one name, or a list of names."""
    return {str(k).strip().upper(): frozenset([v] if isinstance(v, str) else (v or [])) for k, v in layouts.items()}


def check_refused_layouts(answer: dict | None, truth: dict[str, list[str]]) -> bool:
    """10: for each candidate layout, the rule that refuses it before start (None: it runs), as the
    runner's check (`launch.check`) named its violations."""
    wrong = "" if answer is None else ", ".join(sorted(k for k, v in _rules(truth).items()
                                                       if _rules(answer).get(k) != v))
    hint = (f"Not right: {wrong or 'the set of layouts'}. On 4 processes work out both rank grids (dense: TP, CP, PP, "
            "DP; expert: ETP, EP, PP, EDP), the microbatches per iteration, and what each size must divide.")
    return judge(_rules(answer) if answer is not None else None, _rules(truth), hint, shown=answer)


def check_ends_by_timeout(answer: list[str] | None, truth: list[str]) -> bool:
    """12: which injected faults (their letters) ended only when a timeout fired, as the failures
    reported them (a JobTimeout, or peers that gave up waiting in a collective)."""
    hint = ("What do the other ranks and torchrun notice when a process dies (its sockets close, its exit "
            "code arrives), and what when it is alive but never sends again?")
    given = None if answer is None else sorted({str(a).strip().lower() for a in answer})
    return judge(given, sorted(t.lower() for t in truth), hint)


def check_replica_groups(answer: list[list[int]] | None, truth: list[list[int]]) -> bool:
    """13: the groups of ranks that must hold bit-identical parameters after each step, as the report
    card of the job recorded them."""
    hint = ("Replicas hold the same layers, so they sit in one pipeline stage. Megatron's rank order is "
            "tp-cp-ep-dp-pp: which coordinate varies fastest in this layout?")
    given = None if answer is None else sorted(sorted(int(r) for r in g) for g in answer)
    return judge(given, sorted(sorted(g) for g in truth), hint)


def check_fc1_rows(answer: int | None, measured: int) -> bool:
    """14: rows of layer 0's linear_fc1 weight on one rank of the TP=2 x PP=2 import, as the rank reported."""
    hint = ("SwiGLU has two input projections (gate and up) and Megatron fuses them into one column-parallel "
            "linear: how many rows does the fused weight have, and what does TP=2 do to them?")
    return judge(answer, measured, hint)


def check_recompute_fits(answer: bool | None, truth: bool, device_gib: float) -> bool:
    """15: does EP=8 with full activation recompute fit the device, as the memory planner says."""
    hint = ("Which term is the largest in EP=8's bar, and which term does full recompute shrink (it keeps only "
            f"each layer's input)? Compare what is left with {device_gib:g} GiB.")
    return judge(bool(answer) if answer is not None else None, bool(truth), hint)


def check_spike_steps(answer: int | None, measured: int) -> bool:
    """16: steps after a one-step amax spike at which delayed scaling still used the spike's scale,
    counted on the recipe run over a captured tensor."""
    hint = ("A step's scale comes from the largest amax among the previous `history` steps. For how many "
            "steps does the spike stay among them?")
    return judge(answer, measured, hint)


def check_vocab_matrices(answer: int | None, measured: int) -> bool:
    """17: ranks of the PP=2 job that hold a vocabulary x hidden weight, as the ranks reported."""
    hint = ("With tied embeddings one matrix turns token ids into vectors and vectors into logits. Which "
            "stage does each of those two jobs, and can a stage multiply by a weight another process holds?")
    return judge(answer, measured, hint)
