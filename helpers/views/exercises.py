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

import sys

VERDICT_MIME = "application/vnd.kit.exercise-verdict+json"


def _tell(exercise: str, verdict: str, sentence: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None:
            display({"text/plain": sentence, VERDICT_MIME: {"exercise": exercise, "verdict": verdict}}, raw=True)
            return
    except ImportError:
        pass
    print(sentence)


def verdicts(notebook) -> list[tuple[int, str, str]]:
    """(cell index, exercise, verdict) of every check an executed notebook (an nbformat node) ran, in
    order; a verdict is "correct", "not yet" or "not answered"."""
    return [(i, o["data"][VERDICT_MIME]["exercise"], o["data"][VERDICT_MIME]["verdict"])
            for i, cell in enumerate(notebook.cells) for o in cell.get("outputs", [])
            if VERDICT_MIME in o.get("data", {})]


def shown(exercise: str, passed: bool, show_answers=False) -> bool:
    """Whether the answer of `exercise` (the parameter a learner writes it into) may be shown now: its
    check passed, or the learner asked for it (`show_answers`, a parameter of the lesson: True for
    every exercise of the lesson, or the names of some). Otherwise says how to see it and returns
    False, so that a cell prints an answer, or anything that gives it away, under `if shown(...)`."""
    if isinstance(show_answers, str):
        show_answers = [show_answers]
    if passed or show_answers is True or (show_answers and exercise in show_answers):
        return True
    print(f"{exercise}: the answer and what follows from it show here once your answer is right, or when you "
          f'ask for it: show_answers = ["{exercise}"] (or True) in the parameters cell, then run again')
    return False


def reveal(exercise: str, passed: bool, show_answers, markdown: str) -> bool:
    """`markdown`, the answer of `exercise` and why, shown when `shown` says it may be (as Markdown in
    a notebook, printed elsewhere); returns whether it was."""
    if not shown(exercise, passed, show_answers):
        return False
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is not None:
            display(Markdown(markdown))
            return True
    except ImportError:
        pass
    print(markdown)
    return True


def _judge(answer, truth, hint: str, rel: float = 0.0, shown=None) -> bool:
    """`shown`: the learner's answer as written, when `answer` is a normalised form of it. The
    verdict is recorded under the name of the check that called this."""
    exercise = sys._getframe(1).f_code.co_name
    if answer is None:
        _tell(exercise, "not answered", "not answered yet: write your answer in the parameters cell at the top "
              "and run the notebook again (a hint comes with a wrong answer)")
        return False
    ok = abs(float(answer) - truth) <= rel * abs(truth) if rel else answer == truth
    shown = answer if shown is None else shown
    if not ok:
        _tell(exercise, "not yet", f"not yet: {shown!r} is not it. {hint}")
        return False
    _tell(exercise, "correct", f"correct: {shown!r}")
    return True


def check_time_ratio(answer: float | None, truth: float, what: str) -> bool:
    """Predict the time (a roofline model, helpers/perf/roofline.py): how many times longer `what` takes in
    one setting than in another; within 10% of the model's ratio."""
    hint = ("Count what changes between the two settings: the bytes each rank sends per collective, how "
            "many collectives (microbatches per rank), and the link's bandwidth. Multiply the factors.")
    return _judge(answer, truth, hint, rel=0.1)


def check_dp_wire_bytes(formula: str | float | None, n: int, grad: int, elem: int, measured: float) -> bool:
    """03: bytes rank 0 sends on the DP group in one iteration with the distributed optimizer
    (reduce-scatter of the fp32 grad buffer + all-gather of the parameters, ring algorithms).
    `formula`: a number, or an expression in n, grad, elem."""
    names = {"n": n, "grad": grad, "elem": elem}
    value = eval(formula, {"__builtins__": {}}, names) if isinstance(formula, str) else formula
    hint = ("Which buffer does each of the two collectives move, and how many elements does the parameter "
            "buffer have if `grad` holds fp32 gradients? On a ring, what share of its buffer does one rank send?")
    return _judge(value, measured, hint, rel=1e-6, shown=formula)


def check_tp_all_reduces(answer: int | None, per_microbatch: int, microbatches: int = 3) -> bool:
    """04: activation all-reduces one TP rank runs per iteration for `microbatches` microbatches
    (`per_microbatch`: the count the lesson verified on the measured jobs, for the layer count asked)."""
    hint = ("Which linears of a layer leave a partial sum in forward, and which in backward? The measured "
            "table counts a 4-layer model: split its number into what repeats per layer and what does not.")
    return _judge(answer, microbatches * per_microbatch, hint)


def check_sp_all_gathers(answer: int | None, measured_per_microbatch: int) -> bool:
    """05: all-gathers one TP+SP rank runs per microbatch (the count the lesson verified on the
    measured jobs, for the layer count asked)."""
    hint = ("Each all-reduce of plain TP became a reduce-scatter and an all-gather, in forward and in "
            "backward; a column-parallel linear also needs its whole input again for its weight gradient. "
            "The embedding and the output layer take part too: how?")
    return _judge(answer, measured_per_microbatch, hint)


def check_vpp_isends(answer: int | None, p: int, v: int, m: int) -> bool:
    """06: isend calls of rank 0 (stage 0) per iteration with p stages, v chunks per rank and m
    microbatches (the count the lesson verified on the measured PP=2 x VPP=2 job)."""
    truth = m * (v - (p == 1)) + m * (v - 1)
    hint = ("Chunk c of rank r is virtual stage c*p + r. Each microbatch leaves every virtual stage forward "
            "and backward, except where there is no next (or previous) one: which virtual stages does rank 0 hold?")
    return _judge(answer, truth, hint)


def check_pp_bubble(answer: float | None, p: int, m: int, ideal: float) -> bool:
    """06: the idle fraction of the ideal 1F1B schedule with p stages and m microbatches, `ideal`
    counted from the drawn schedule (forward and backward one slot each)."""
    hint = ("Count in slots of the drawn schedule: how long does the last stage wait before its first forward, "
            "and the first stage after its last backward? What share of one stage's whole window is that?")
    return _judge(answer, ideal, hint, rel=1e-3)


def check_cp_kv_gather_bytes(answer: int | None, measured: int) -> bool:
    """07: bytes of one K (or V) all-gather on a TP2 x CP2 rank: the gathered buffer, as measured."""
    hint = ("Which dimension of K does the CP all-gather make whole again, and which does TP leave split? "
            "Count the elements of the gathered buffer, then the bytes per element of this run's precision.")
    return _judge(answer, measured, hint)


def check_fewer_bytes_dispatcher(answer: str | None, bytes_by_dispatcher: dict[str, int]) -> bool:
    """08: which dispatcher ("alltoall" or "allgather") moved fewer bytes, as measured."""
    truth = min(bytes_by_dispatcher, key=bytes_by_dispatcher.get)
    hint = ("all-to-all sends one copy of a token per chosen expert that lives elsewhere; all-gather sends "
            "every token of the EP group to every rank once. Compare k with EP.")
    return _judge(answer.strip().lower() if isinstance(answer, str) else answer, truth, hint)


def check_ep_group(answer: list[int] | None, truth: list[int]) -> bool:
    """09: the ranks of rank 0's EP group for a given layout (Megatron's RankGenerator)."""
    hint = ("The expert grid is a second generator with its own sizes: which of TP, CP, ETP appear in it? "
            "Read its order string and find the coordinate that varies fastest.")
    return _judge(sorted(answer) if answer is not None else None, sorted(truth), hint)


def check_checkpoint_bytes(answer: float | None, measured: int, params: int) -> bool:
    """11: bytes of tensor data in a runtime checkpoint (its index, `checkpoint_dir.tensor_bytes`),
    from the parameter count: exact."""
    hint = (f"{params:,} parameters, fp32 on CPU. What does Adam keep for each parameter besides the weight, "
            "and in which dtype? Does TP add copies, or only cut them?")
    return _judge(answer, measured, hint)


def check_fits(answer: tuple[bool, bool] | None, truth: tuple[bool, bool], device_gib: float) -> bool:
    """02: (fits without the distributed optimizer, fits with it) for a model on one GPU size."""
    hint = ("Section 1's bytes per parameter: which of the four kinds does the distributed optimizer shard "
            f"over DP, and which stay whole on every GPU? Add the activations; compare with {device_gib:g} GiB.")
    return _judge(tuple(bool(x) for x in answer) if answer is not None else None, tuple(truth), hint)


def check_qkv_rows(answer: int | None, measured: int) -> bool:
    """01: rows of layer 0's linear_qkv weight on one rank of the TP=2 run, as the rank reported."""
    hint = ("linear_qkv is column-parallel: it stacks the query, key and value projections of every head "
            "(heads x head dim rows each) and TP splits the rows, whole heads per rank.")
    return _judge(answer, measured, hint)


def check_pp_starts_equal(answer: bool | None, truth: bool) -> bool:
    """01: does the script at PP=2 compute the same first loss as at TP=1 (as measured)?"""
    hint = ("Where do the weights come from? use_cpu_initialization draws each full weight from the "
            "default random generator, in the order this process creates layers. What does a rank of "
            "stage 2 create first?")
    return _judge(bool(answer) if answer is not None else None, truth, hint)


def check_microbatches(answer: int | None, measured: int) -> bool:
    """00: microbatches one rank of the TP=2 job ran per iteration, counted in its recorded schedule."""
    hint = ("Which ranks share the global batch out between them: the TP ranks, or the data-parallel "
            "replicas? How many data-parallel replicas does a TP=2 job on 2 processes have?")
    return _judge(answer, measured, hint)


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
    return _judge(_rules(answer) if answer is not None else None, _rules(truth), hint, shown=answer)


def check_ends_by_timeout(answer: list[str] | None, truth: list[str]) -> bool:
    """12: which injected faults (their letters) ended only when a timeout fired, as the failures
    reported them (a JobTimeout, or peers that gave up waiting in a collective)."""
    hint = ("What do the other ranks and torchrun notice when a process dies (its sockets close, its exit "
            "code arrives), and what when it is alive but never sends again?")
    given = None if answer is None else sorted({str(a).strip().lower() for a in answer})
    return _judge(given, sorted(t.lower() for t in truth), hint)


def check_replica_groups(answer: list[list[int]] | None, truth: list[list[int]]) -> bool:
    """13: the groups of ranks that must hold bit-identical parameters after each step, as the report
    card of the job recorded them."""
    hint = ("Replicas hold the same layers, so they sit in one pipeline stage. Megatron's rank order is "
            "tp-cp-ep-dp-pp: which coordinate varies fastest in this layout?")
    given = None if answer is None else sorted(sorted(int(r) for r in g) for g in answer)
    return _judge(given, sorted(sorted(g) for g in truth), hint)


def check_fc1_rows(answer: int | None, measured: int) -> bool:
    """14: rows of layer 0's linear_fc1 weight on one rank of the TP=2 x PP=2 import, as the rank reported."""
    hint = ("SwiGLU has two input projections (gate and up) and Megatron fuses them into one column-parallel "
            "linear: how many rows does the fused weight have, and what does TP=2 do to them?")
    return _judge(answer, measured, hint)


def check_recompute_fits(answer: bool | None, truth: bool, device_gib: float) -> bool:
    """15: does EP=8 with full activation recompute fit the device, as the memory planner says."""
    hint = ("Which term is the largest in EP=8's bar, and which term does full recompute shrink (it keeps only "
            f"each layer's input)? Compare what is left with {device_gib:g} GiB.")
    return _judge(bool(answer) if answer is not None else None, bool(truth), hint)


def check_spike_steps(answer: int | None, measured: int) -> bool:
    """16: steps after a one-step amax spike at which delayed scaling still used the spike's scale,
    counted on the recipe run over a captured tensor."""
    hint = ("A step's scale comes from the largest amax among the previous `history` steps. For how many "
            "steps does the spike stay among them?")
    return _judge(answer, measured, hint)


def check_vocab_matrices(answer: int | None, measured: int) -> bool:
    """17: ranks of the PP=2 job that hold a vocabulary x hidden weight, as the ranks reported."""
    hint = ("With tied embeddings one matrix turns token ids into vectors and vectors into logits. Which "
            "stage does each of those two jobs, and can a stage multiply by a weight another process holds?")
    return _judge(answer, measured, hint)


LAYOUT_CHOICES = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": None, "vpp": None, "sp": False, "dp": None,
                  "first_stage_layers": None, "last_stage_layers": None, "micro_batch": 1, "dist_opt": False,
                  "recompute": "none"}  # a written layout's keys and their defaults


def place_layout(answer: dict, advice) -> dict:
    """A layout a learner wrote (a dict of LAYOUT_CHOICES' keys; the rest take their defaults, dp follows
    from the GPUs) weighed as the advisor weighs each of its own (helpers/advisor/advise.py) for `advice`'s
    model, GPUs, sequence and batch: the kit's rules, the memory plan, the step time's terms; then its rank
    among the advisor's layouts that fit. Returns layout, training, refused (the rules' messages, or what
    is wrong with the dict), memory_gib, fits, step (a StepTime), terms (the largest memory terms), rank,
    of (the layouts that fit) and best (the advisor's fastest that fits)."""
    from helpers.advisor.candidates import RECOMPUTE
    from helpers.advisor.time.step import predict
    from helpers.job.layout import Layout
    from helpers.memory.plan import plan_memory
    from helpers.memory.training import GiB, Training

    out = dict(layout=None, training=None, refused=[], memory_gib=None, fits=False, step=None, terms="",
               rank=None, of=len(advice.fitting()), best=advice.best())
    if not isinstance(answer, dict):
        out["refused"] = [f"a layout is a dict of sizes, e.g. {{'tp': 1, 'pp': 1, 'ep': 1, 'micro_batch': 1}}, "
                          f"not {type(answer).__name__}"]
        return out
    unknown = sorted(set(map(str, answer)) - set(LAYOUT_CHOICES))
    given = {**LAYOUT_CHOICES, **answer}
    counts = ("tp", "pp", "cp", "ep", "micro_batch")
    wrong = [f"{k} {given[k]!r} (a whole number, at least 1)" for k in counts
             if not isinstance(given[k], int) or isinstance(given[k], bool) or given[k] < 1]
    optional = ("etp", "vpp", "dp", "first_stage_layers", "last_stage_layers")
    wrong += [f"{k} {given[k]!r} (a whole number, at least 1, or None)" for k in optional
              if given[k] is not None and (not isinstance(given[k], int) or isinstance(given[k], bool) or given[k] < 1)]
    wrong += [f"{k} {given[k]!r} (True or False)" for k in ("sp", "dist_opt") if not isinstance(given[k], bool)]
    if given["recompute"] not in RECOMPUTE:
        wrong.append(f"recompute {given['recompute']!r} (one of {', '.join(map(repr, RECOMPUTE))})")
    if unknown or wrong:
        out["refused"] = ([f"no such choice: {', '.join(unknown)} (the choices: {', '.join(LAYOUT_CHOICES)})"]
                          if unknown else []) + ([f"not a value here: {'; '.join(wrong)}"] if wrong else [])
        return out
    model_parallel = given["tp"] * given["pp"] * given["cp"]
    if given["dp"] is not None and given["dp"] * model_parallel != advice.gpus:
        out["refused"] = [f"dp {given['dp']} x tp {given['tp']} x pp {given['pp']} x cp {given['cp']} = "
                          f"{given['dp'] * model_parallel} GPUs, not the {advice.gpus} here: DP is what TP x PP x CP "
                          "leaves of the GPUs (leave dp out, or make the product the GPU count)"]
        return out
    layout = Layout(nproc=advice.gpus, tp=given["tp"], pp=given["pp"], cp=given["cp"], ep=given["ep"],
                    etp=given["etp"], vpp=given["vpp"], sp=given["sp"], first_stage_layers=given["first_stage_layers"],
                    last_stage_layers=given["last_stage_layers"], micro_batch=given["micro_batch"],
                    global_batch=advice.global_batch, seq_len=advice.seq_len, gpus_per_node=advice.gpus_per_node,
                    backend="te")  # as the advisor builds its layouts (helpers/perf/layouts.py)
    training = Training(precision=advice.execution.precision, dist_opt=given["dist_opt"],
                        recompute=given["recompute"])
    out.update(layout=layout, training=training)
    violations = layout.validate(advice.model)
    if violations:
        out["refused"] = [str(v) for v in violations]
        return out
    plan = plan_memory(advice.model, layout, training)
    worst = max(plan.stages, key=lambda s: s.allocated_bytes)
    step = predict(advice.model, layout, training, advice.gpu, advice.gpus_per_node, advice.execution)
    fits = plan.reserved_bytes <= advice.gpu.memory_gib * GiB
    largest = sorted(worst.terms.items(), key=lambda t: -t[1])[:3]
    out.update(memory_gib=plan.reserved_bytes / GiB, fits=fits, step=step,
               terms=", ".join(f"{k} {v / GiB:.1f} GiB" for k, v in largest))
    if fits:  # 1 + the fitting layouts strictly faster (the same step within a part in a billion: a tie)
        out["rank"] = 1 + sum(r.step.step_s < step.step_s * (1 - 1e-9) for r in advice.fitting())
    return out


def check_layout_choice(answer: dict | None, advice, top: int = 3, within: float = 0.10) -> bool:
    """11: a layout the learner chose for `advice`'s model on its GPUs (a dict: `place_layout`), judged by
    the advisor: the rules must accept it and its plan fit the GPU; then it passes within the advisor's
    first `top` ranks or within `within` of the fastest predicted step. The hint of a refused layout is the
    rules' message; of a slow one, the term of its step that costs it most against the fastest layout
    (which it does not name)."""
    if answer is None:
        return _judge(None, None, "")
    placed = place_layout(answer, advice)
    best, step, gpu_gib = placed["best"], placed["step"], advice.gpu.memory_gib
    fast = step is not None and best is not None and (
        (placed["rank"] or top + 1) <= top or step.step_s <= (1 + within) * best.step.step_s)
    passed = not placed["refused"] and placed["fits"] and fast
    if placed["refused"]:
        hint = "Refused before any GPU starts: " + " | ".join(placed["refused"])
    elif not placed["fits"]:
        hint = (f"The rules accept it, but its plan is {placed['memory_gib']:.1f} GiB per GPU, over the "
                f"{gpu_gib:g} GiB (largest: {placed['terms']}). Which axis divides those terms, and what do the "
                "distributed optimizer, a smaller micro batch or recompute shrink?")
    elif not fast:
        extra = {k: v - best.step.terms.get(k, 0.0) for k, v in step.terms.items()}
        costly = max(extra, key=extra.get)
        hint = (f"It fits ({placed['memory_gib']:.1f} GiB of {gpu_gib:g}) and the advisor predicts {step.step_s:.3f} s "
                f"per step: rank {placed['rank']} of the {placed['of']} layouts that fit, "
                f"{100 * (step.step_s / best.step.step_s - 1):.0f}% slower than the fastest. What costs it most is "
                f"its `{costly}` term: {step.terms[costly]:.3f} s per step, {extra[costly]:.3f} s more than the "
                "fastest layout spends on it. Which of your choices adds that term, and what could do its job instead?")
    else:
        hint = ""
        print(f"your layout: {placed['layout'].describe()}, micro batch {placed['layout'].micro_batch}: "
              f"{placed['memory_gib']:.1f} GiB of {gpu_gib:g}, {step.step_s:.3f} s per step")
    return _judge(passed, True, hint, shown=answer)


def command_flags(command: str) -> dict[str, str | None]:
    """The flags of a Megatron-LM command line after its script (`torchrun ... pretrain_gpt.py` and `\\`
    line breaks may stay): `--flag` -> the word after it when that is a value, else None."""
    import shlex

    text = command.replace("\\\n", " ")
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: Megatron-LM's reading refuses it; the flags are still words
        words = text.split()
    words = words[1 + max((i for i, w in enumerate(words) if w.endswith(".py")), default=-1):]
    flags = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            following = words[i + 1] if i + 1 < len(words) else None
            flags[name] = value if eq else (following if following is not None and not following.startswith("--")
                                            else None)
    return flags


def check_megatron_command(answer: str | None, refusal: str | None, plan_gib: float | None, gpu_gib: float,
                           rank: int | None, ranked: int, top: int = 5, largest_terms: str = "",
                           bare_plan_gib: float | None = None, dp: int = 1) -> bool:
    """Capstone: a whole Megatron-LM command line for the lesson's model and cluster, judged in named
    parts, the first three on what the lesson computed for it live: (a) Megatron-LM's parse_args and
    validate_args accept it and it describes the lesson's job (`refusal`: None, else why not); (b) the
    memory planner's peak per GPU (`plan_gib`, with the command's recompute) is within the GPU's
    `gpu_gib`; (c) among the `ranked` layouts the advisor accepts, its layout ranks within the first
    `top` (`rank`, 1 = fastest that fits; ties share a rank); (d) recompute: a command whose plan
    without activation recompute (`bare_plan_gib`) does not fit asks for it; (e) overlap: with `dp`
    data-parallel ranks (DP x CP) above 1, the distributed optimizer with its gradient reduce and
    parameter gather overlapped; (f) a learning-rate schedule: a decay style and a warm-up shorter
    than the run; (g) checkpoints saved at an interval; (h) data: a corpus or, for a check like this
    one, mock data (a note says a real run reads --data-path). One line per part, then the verdict,
    with a hint for each part that fails."""
    if answer is None:
        return _judge(None, None, "")
    flags = command_flags(answer)
    accepted = refusal is None
    fits = plan_gib is not None and plan_gib <= gpu_gib
    high = rank is not None and rank <= top
    recompute_given = "--recompute-granularity" in flags or "--recompute-activations" in flags
    recompute_needed = bare_plan_gib is not None and bare_plan_gib > gpu_gib
    recompute = accepted and (recompute_given or not recompute_needed)
    overlap_flags = ("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather")
    overlap_missing = [f for f in overlap_flags if f not in flags] if dp > 1 else []

    def whole(name):  # a flag's value as a whole number, or None
        try:
            return int(float(flags.get(name) or ""))
        except ValueError:
            return None

    warmup, train = whole("--lr-warmup-iters"), whole("--train-iters")
    schedule_missing = [f for f in ("--lr-decay-style", "--lr-warmup-iters", "--train-iters") if flags.get(f) is None]
    schedule = not schedule_missing and warmup is not None and train is not None and 0 < warmup < train
    interval = flags.get("--save-interval") or flags.get("--persistent-save-interval")  # one flag, two spellings
    saving_missing = [f for f, x in (("--save", flags.get("--save")), ("--save-interval", interval)) if x is None]
    data = "--data-path" in flags or "--mock-data" in flags
    print(f"(a) Megatron-LM's parse_args + validate_args, the lesson's job: "
          f"{'accepted' if accepted else 'refused: ' + refusal}")
    print(f"(b) memory plan: " + (f"{plan_gib:.1f} GiB per GPU of {gpu_gib:g} GiB: {'fits' if fits else 'does not fit'}"
                                   if plan_gib is not None else "not planned (refused above)"))
    print(f"(c) advisor: " + (f"rank {rank} of {ranked} layouts (within the top {top}: {'yes' if high else 'no'})"
                              if rank is not None else "not ranked (refused above)"))
    print(f"(d) recompute: " + ("not planned (refused above)" if bare_plan_gib is None or not accepted else
                                f"{bare_plan_gib:.1f} GiB per GPU without it: "
                                + ("needed, " if recompute_needed else "not needed, ")
                                + ("asked for" if recompute_given else "not asked for")))
    print(f"(e) overlap with {dp} data-parallel ranks: " + (
        "nothing to overlap" if dp <= 1 else
        "the distributed optimizer, gradient reduce and parameter gather overlapped" if not overlap_missing
        else "missing " + ", ".join(overlap_missing)))
    print(f"(f) learning-rate schedule: " + (
        f"{flags['--lr-decay-style']} decay, {warmup} warm-up iterations of {train}" if schedule
        else "missing " + ", ".join(schedule_missing) if schedule_missing
        else f"warm-up {flags['--lr-warmup-iters']} of {flags['--train-iters']} iterations"))
    print(f"(g) checkpoints: " + (f"saved to {flags['--save']} every {interval} iterations"
                                  if not saving_missing else "missing " + ", ".join(saving_missing)))
    print(f"(h) data: " + ("--data-path " + str(flags["--data-path"]) if "--data-path" in flags else
                           "--mock-data: synthetic tokens, fine for this check; a real run reads its tokenized "
                           "corpus with --data-path PREFIX" if data else "none given"))
    hints = []
    if not accepted:
        hints.append("(a) The refusal names the flag or the size: spell each flag as `pretrain_gpt.py --help` "
                     "does; TP x PP x CP must divide the GPUs, micro batch x DP the global batch, and the model, "
                     "sequence and global batch are the lesson's.")
    if accepted and not fits:
        hints.append(f"(b) The largest terms of the plan: {largest_terms or 'see the bars'}. Which of them does the "
                     "distributed optimizer shard over DP, which do TP (with SP) and PP split, and which does a "
                     "smaller micro batch shrink?")
    if accepted and not high:
        hints.append("(c) Read your row's terms in section 3: every axis a layout adds costs time "
                     "(the largest terms name it: a pipeline's bubble, collectives in every layer of a TP group, "
                     "a group that crosses nodes). Which axes does memory need, and which could be data "
                     "parallel instead?")
    if accepted and not recompute:
        hints.append(f"(d) Without activation recompute this layout needs {bare_plan_gib:.1f} GiB per GPU, more than "
                     f"{gpu_gib:g}: the activations kept for the backward are what recompute trades for a second "
                     "forward. Ask for it (--recompute-granularity selective recomputes the attention core; full with "
                     "--recompute-method uniform --recompute-num-layers 1 keeps only each layer's input), or choose "
                     "a layout that fits without it.")
    if overlap_missing:
        hints.append(f"(e) {dp} data-parallel ranks reduce the gradients and, with the distributed optimizer, gather "
                     f"the updated parameters every step; missing: {', '.join(overlap_missing)}. Overlapped, the "
                     "reduce runs under the backward and the gather under the next forward instead of after them.")
    if not schedule:
        hints.append("(f) A run warms the learning rate up, then decays it: --lr-decay-style (cosine, say), "
                     "--lr-warmup-iters, and a warm-up shorter than --train-iters.")
    if saving_missing:
        hints.append("(g) A run of many hours on many GPUs loses everything since its last checkpoint when a node "
                     f"fails: missing {', '.join(saving_missing)} (a folder, and the iterations between saves).")
    if not data:
        hints.append("(h) Megatron-LM trains on --data-path PREFIX (a tokenized, indexed corpus) or --mock-data.")
    parts = {"accepted": accepted, "fits": fits, f"top {top}": high, "recompute": recompute,
             "overlap": not overlap_missing, "lr schedule": schedule, "checkpoints": not saving_missing, "data": data}
    return _judge(all(parts.values()), True, " ".join(hints), shown=parts)


def check_megatron_flags(answer: str | None, base_flags: list[str], lesson_job, rtol: float, hint: str,
                         run=None) -> bool:
    """Megatron-LM flags added to a job: the flags of one of the lesson's jobs (`base_flags`, its
    megatron-lm.sh: `megatron_lm.arguments`) plus the learner's `answer`, read by Megatron-LM's own
    parser and run by the kit (`launch.run(megatron_args=...)`, or `run`) on `lesson_job`'s device,
    precision and processes; correct when the parser accepts them and the job has `lesson_job`'s
    layout and its losses within `rtol`. None: nothing runs."""
    import shlex

    from helpers.errors import KitError

    if answer is None:
        return _judge(None, None, hint)
    if run is None:
        from helpers.launch import run
    want = lesson_job.spec
    text = shlex.join([*base_flags, *shlex.split(answer)])
    print(f"megatron_args = {text!r}")
    try:
        got = run(megatron_args=text, device=want.device, precision=want.precision, nproc=want.nproc,
                  progress=False)
    except KitError as e:
        return _judge(False, True, f"Megatron-LM's parser or the kit's rules refused the job: {e}", shown=answer)
    worst = max((abs(a - b) / abs(a) for a, b in zip(lesson_job.losses, got.losses)), default=float("inf"))
    same = got.spec.layout_name() == want.layout_name() and len(got.losses) == len(lesson_job.losses) and worst <= rtol
    print(f"your job: {got.spec.layout_name()}, losses {[round(x, 4) for x in got.losses]}; the lesson's "
          f"{want.layout_name()}: {[round(x, 4) for x in lesson_job.losses]} "
          f"(max rel. diff {worst:.1e}, within {rtol:g})")
    return _judge(same, True, f"Your job ran as {got.spec.layout_name()}, the lesson's as "
                  f"{want.layout_name()}. {hint}", shown=answer)


def check_data_path(answer: str | None, root, target: dict[str, float], tokenizer, samples: int = 1000,
                    seq_len: int = 256) -> bool:
    """19: a Megatron-LM `--data-path` value blending the lesson's corpora by `target` ({prefix: weight},
    prefixes in `root`), read by Megatron-Core's `get_blend_from_list`, built by its
    BlendedMegatronDatasetBuilder (`samples` samples) and graded on the shares measured in the built
    blend: each within 1/len(blend) of its target, the most BlendedDataset's assignment leaves
    (helpers/runtime/data/blend.py)."""
    from pathlib import Path

    from helpers.errors import InvalidJob
    from helpers.runtime.data import blend

    if answer is None:
        return _judge(None, None, "")
    try:
        prefixes, weights = blend.from_data_path(answer, root)
        built = blend.build(prefixes, weights, samples, seq_len, tokenizer, Path(root) / "index-cache")
    except InvalidJob as e:
        return _judge(False, True, f"Megatron-LM could not use it: {e}", shown=answer)
    measured: dict[str, float] = {}
    for prefix, share in zip(prefixes, blend.shares(built)):
        measured[Path(prefix).name] = measured.get(Path(prefix).name, 0.0) + share
    off = {name: measured.get(name, 0.0) - w for name, w in target.items()}
    passed = set(measured) <= set(target) and all(abs(v) <= 1 / len(built) for v in off.values())
    print("drawn from each corpus in the built blend: " + ", ".join(f"{k} {v:.1%}" for k, v in measured.items()))
    hint = ("The weights are the shares of samples, one before each prefix; Megatron normalises them to sum "
            "to 1. Which corpus should give 70% of the samples?")
    return _judge(passed, True, hint, shown=answer)


def check_two_node_launch(answer: list[str] | None, world_size: int, nnodes: int, script: str = "pretrain_gpt.py"
                          ) -> bool:
    """19: the torchrun command of each node (a list, node 0's first) for Megatron-LM's `script` on
    `nnodes` nodes and `world_size` processes, each read by torch's own torchrun parser
    (helpers/launch/torchrun_args.py) and judged in parts: one line per node, the script, nodes x
    processes = the world size, one rendezvous for all (c10d: the same endpoint and id; static: the same
    master address and port) and, where the rendezvous does not number the nodes itself (static), a
    distinct --node-rank per node. One line per part, then the verdict."""
    from helpers.errors import InvalidJob
    from helpers.launch import torchrun_args

    if answer is None:
        return _judge(None, None, "")
    if isinstance(answer, str) or not isinstance(answer, (list, tuple)) or len(answer) != nnodes:
        return _judge(False, True, f"Write {nnodes} commands, one per node, as a list of strings: "
                      "[node 0's line, node 1's line].", shown=answer)
    try:
        parsed = [torchrun_args.parse(c) for c in answer]
        counts = [torchrun_args.node_counts(a) for a in parsed]
    except InvalidJob as e:
        return _judge(False, True, str(e), shown=answer)
    backends = {a.rdzv_backend for a in parsed}
    c10d = backends == {"c10d"}
    if c10d:
        meeting = {(a.rdzv_endpoint, a.rdzv_id) for a in parsed}
        one_meeting = len(meeting) == 1 and all(e and i != "none" for e, i in meeting)
    else:
        meeting = {(a.master_addr, a.master_port) for a in parsed}
        one_meeting = backends == {"static"} and len(meeting) == 1
    parts = {
        "script": all(a.training_script.endswith(script) for a in parsed),
        "not standalone": not any(a.standalone for a in parsed),
        "nodes x processes": all(n == nnodes and n * p == world_size for n, p in counts),
        "one rendezvous": one_meeting,
        "node ranks": c10d or sorted(a.node_rank for a in parsed) == list(range(nnodes)),
    }
    hints = {
        "script": f"each node runs Megatron-LM's {script}, after torchrun's own options",
        "not standalone": "--standalone starts a rendezvous on this node alone; the other node never joins it",
        "nodes x processes": f"--nnodes counts the machines, --nproc-per-node the processes on one: {world_size} "
                             f"processes on {nnodes} nodes",
        "one rendezvous": "every node must meet at the same place: the same --rdzv-backend, --rdzv-endpoint "
                          "HOST:PORT and --rdzv-id (c10d), or the same --master-addr and --master-port (static)",
        "node ranks": "with --master-addr/--master-port (static rendezvous) each node gives its own --node-rank, "
                      "0 on the master's node",
    }
    for part, ok in parts.items():
        print(f"{'ok ' if ok else 'no '} {part}" + ("" if ok else f": {hints[part]}"))
    passed = all(parts.values())
    failing = [hints[p] for p, ok in parts.items() if not ok]
    return _judge(passed, True, "; ".join(failing), shown=answer)


def check_log_diagnosis(answer: dict | None, truth: dict[str, str]) -> bool:
    """19: the symptom each lettered Megatron-LM log shows ({letter: symptom}, `truth` holding the
    letters whose logs are there: helpers/rundir/log_symptoms.py), graded per letter; the hint names
    the letters that are not right yet, not their symptoms."""
    from helpers.rundir.log_symptoms import SYMPTOMS

    if not truth:
        _tell("check_log_diagnosis", "not answered", "no log to diagnose: data/megatron_lm_logs/ holds none of the "
              "lettered logs yet")
        return False
    if answer is None:
        return _judge(None, None, "")
    names = {s.lower(): s for s in SYMPTOMS}
    given = ({str(k).strip().upper(): names.get(str(v).strip().lower(), v) for k, v in answer.items()}
             if isinstance(answer, dict) else {})
    wrong = sorted(k for k in truth if given.get(k) != truth[k])
    unknown = sorted({str(v) for v in given.values()} - set(SYMPTOMS))
    hint = (f"Not right: {', '.join(wrong) or 'the letters'}" + (f" ({', '.join(map(repr, unknown))} is none of "
            f"{', '.join(map(repr, SYMPTOMS))})" if unknown else "")
            + ". Read each log's columns: loss, grad norm, loss scale, the skipped and nan counts, ms per iteration.")
    return _judge({k: given.get(k) for k in truth}, dict(truth), hint, shown=answer)


def check_cpt_choice(answer: float | None, iters: int, held_out: tuple[float, float], general: tuple[float, float],
                     budget: int, target: float = 0.5, bound: float = 0.02) -> bool:
    """18: a continued-pretraining job's learning rate `answer` and `iters`, judged on what it did:
    the held-out loss of the new text (before, after) must fall to `target` of its start or below (the
    form is learned) and the general text's loss (before, after) rise by at most `bound`, relative
    (what the model knew is kept), within `budget` iterations. The hint names the side that failed
    and which way to move; the range that passes is the lesson's reveal, after the attempt."""
    if answer is None:
        return _judge(None, None, "")
    learned = held_out[1] <= target * held_out[0]
    rose = (general[1] - general[0]) / general[0]
    kept = rose <= bound
    hints = []
    within = 1 <= iters <= budget
    if not within:
        hints.append(f"{iters} iterations is outside the budget of 1 to {budget} (the job ran "
                     f"{max(1, min(iters, budget))}).")
    if not learned:
        hints.append(f"The held-out logs' loss fell {1 - held_out[1] / held_out[0]:.0%} "
                     f"({held_out[0]:.3f} -> {held_out[1]:.3f}); it must fall {1 - target:.0%}: the form is "
                     "not learned yet. Too little training: a higher learning rate or more iterations.")
    if not kept:
        hints.append(f"The WikiText-2 loss rose {rose:.1%} ({general[0]:.3f} -> {general[1]:.3f}), more than "
                     f"{bound:.0%}: the model forgot general text while it learned the logbook. Too much "
                     "training: a lower learning rate or fewer iterations.")
    passed = learned and kept and within
    if passed:
        print(f"lr {answer:g}, {iters} iterations: held-out logs {1 - held_out[1] / held_out[0]:.0%} lower, "
              f"WikiText-2 {rose:+.1%}")
    return _judge(passed, True, " ".join(hints), shown={"cpt_lr": answer, "cpt_iters": iters})
