"""The exercises where the learner decides a whole run: a layout for N GPUs graded by the advisor's
rank and predicted time (lesson 11), the Megatron-LM command of the capstone (lesson 20: layout,
recompute, overlap, schedule, checkpoints, data) and the flags each axis lesson asks for, run shrunk
and compared with the lesson's own job. The mechanism (verdicts, answers after an attempt):
helpers/views/exercise_verdicts.py."""
from __future__ import annotations

from helpers.views.exercise_verdicts import judge


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
        return judge(None, None, "")
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
    return judge(passed, True, hint, shown=answer)


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
        return judge(None, None, "")
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
    return judge(all(parts.values()), True, " ".join(hints), shown=parts)


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
        return judge(None, None, hint)
    if run is None:
        from helpers.launch import run
    want = lesson_job.spec
    text = shlex.join([*base_flags, *shlex.split(answer)])
    print(f"megatron_args = {text!r}")
    try:
        got = run(megatron_args=text, device=want.device, precision=want.precision, nproc=want.nproc,
                  progress=False)
    except KitError as e:
        return judge(False, True, f"Megatron-LM's parser or the kit's rules refused the job: {e}", shown=answer)
    worst = max((abs(a - b) / abs(a) for a, b in zip(lesson_job.losses, got.losses)), default=float("inf"))
    same = got.spec.layout_name() == want.layout_name() and len(got.losses) == len(lesson_job.losses) and worst <= rtol
    print(f"your job: {got.spec.layout_name()}, losses {[round(x, 4) for x in got.losses]}; the lesson's "
          f"{want.layout_name()}: {[round(x, 4) for x in lesson_job.losses]} "
          f"(max rel. diff {worst:.1e}, within {rtol:g})")
    return judge(same, True, f"Your job ran as {got.spec.layout_name()}, the lesson's as "
                  f"{want.layout_name()}. {hint}", shown=answer)
