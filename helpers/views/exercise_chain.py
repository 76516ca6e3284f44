"""The decisions that build on each other, lesson 03 on: one run (helpers/views/your_run.py) placed
on 4 processes with its global batch kept, the optimizer sharded and its communication overlapped
(03); its activations fitted to a memory budget with no more recompute than needed (05); its
pipeline bubble brought under a target (06). Each check runs the learner's Megatron-LM flags as a
real job (Megatron-LM's parser, the kit's rules, then the job) and grades what the job did; a
passed check saves the run's training flags for the next lesson."""
from __future__ import annotations

import shlex

from helpers.views import your_run
from helpers.views.exercise_verdicts import judge

BATCH = ("--micro-batch-size", "--global-batch-size")


def _job(words: list[str], nproc: int, reference, run=None, **fields):
    """The job of `words` on `nproc` processes with `reference`'s device and precision: (job, None),
    or (None, why the parser or the kit's rules refused it)."""
    from helpers.errors import KitError

    if run is None:
        from helpers.launch import run
    try:
        return run(megatron_args=shlex.join(words), device=reference.spec.device, nproc=nproc,
                   precision=reference.spec.precision, progress=False, **fields), None
    except KitError as e:
        return None, f"Megatron-LM's parser or the kit's rules refused the job: {e}"


def _on_your_run(answer: str, base_flags: list[str], run_file, nproc: int, reference, run, **fields):
    """The learner's saved run (`run_file`) on `base_flags`' layout plus `answer`, run: (the run's
    flags, the job's words, job or None, why it was refused or None)."""
    flags, _ = your_run.load(run_file)
    words = [*your_run.without(base_flags, your_run.TRAINING_OPTIONS), *flags, *shlex.split(answer)]
    return (flags, words, *_job(words, nproc, reference, run, **fields))


def _verdict(hints: list[str], answer: str, run_file, words: list[str], job, lesson: str) -> bool:
    """Correct when nothing is wrong; then the run's flags are kept for the next lesson."""
    if not hints:
        _save(run_file, words, job, lesson)
    return judge(not hints, True, " ".join(hints), shown=answer)


def _global_batch(spec) -> int:
    return spec.micro_batch * spec.dp * spec.num_microbatches


def _save(run_file, words: list[str], job, lesson: str) -> None:
    """The run's flags with its global batch spelled out (Megatron-LM's default, micro batch x DP, would
    change with the next lesson's DP)."""
    your_run.save(run_file, [*words, "--global-batch-size", str(_global_batch(job.spec))], lesson)


def _worst(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float("inf")) if len(a) == len(b) else float("inf")


def check_run_on_more_gpus(answer: str | None, base_flags: list[str], reference, nproc: int, rtol: float,
                           run_file=None, run=None) -> bool:
    """Lesson 03: `reference` (one process) placed on `nproc` processes by the learner's flags, added to
    `base_flags` (its command line without the batch flags). Correct when the job trains the same run
    (its losses within `rtol` of the reference's: the same global batch), shards Adam's state over
    DP and overlaps both of its DP collectives with compute."""
    if answer is None:
        return judge(None, None, "")
    words = [*your_run.without(base_flags, BATCH), *shlex.split(answer)]
    job, refused = _job(words, nproc, reference, run)
    if job is None:
        return judge(False, True, refused, shown=answer)
    spec, worst = job.spec, _worst(reference.losses, job.losses)
    print(f"your job: {spec.layout_name()}, global batch {_global_batch(spec)} = micro batch {spec.micro_batch} x DP "
          f"{spec.dp} x {spec.num_microbatches} accumulation steps; losses {[round(x, 5) for x in job.losses]} "
          f"(max rel. diff from one process {worst:.1e})")
    hints = []
    if worst > rtol:
        hints.append(f"Your job trained a global batch of {_global_batch(spec)} samples per iteration, the run's is "
                     f"{_global_batch(reference.spec)}: a different gradient, so different losses from iteration 2. "
                     "Megatron-LM keeps --global-batch-size as given and fills it with micro batch x DP x "
                     "accumulation steps; without it, it takes micro batch x DP (no accumulation).")
    if not spec.dist_opt:
        hints.append("Adam's two moments are still whole on every one of the 4 ranks.")
    if spec.overlap_grad_reduce != "on" or spec.overlap_param_gather != "on":
        hints.append("Both DP collectives still wait for compute to end: the gradient reduce-scatter could start "
                     "under the backward of the layers before it, the parameter all-gather under the next forward "
                     "(Megatron asks for each with its own switch).")
    return _verdict(hints, answer, run_file, words, job, "03")


def check_recompute_budget(answer: str | None, base_flags: list[str], reference, nproc: int, budget: int,
                           rtol: float, run_file=None, run=None) -> bool:
    """Lesson 05: the learner's run (`run_file`'s flags) on `base_flags`' layout, plus the learner's
    flags (recompute, micro batch). Correct when the job's measured activations of one microbatch
    (the largest rank's) stay within `budget` bytes, its global batch is the run's, and any
    recompute it asks for is needed: the same job without recompute, measured too, would not fit
    (and trains the same losses within `rtol`)."""
    if answer is None:
        return judge(None, None, "")
    flags, words, job, refused = _on_your_run(answer, base_flags, run_file, nproc, reference, run, instruments="on")
    if job is None:
        return judge(False, True, refused, shown=answer)
    saved = max(r["saved_activation_bytes_per_microbatch"] for r in job.ranks.values())
    recomputes = your_run.value(words, "--recompute-granularity") is not None
    print(f"your job: {job.spec.layout_name()}, micro batch {job.spec.micro_batch}, recompute "
          f"{job.spec.recompute_granularity or 'none'}: {saved:,} B of activations saved per microbatch "
          f"(budget {budget:,} B)")
    hints = []
    if saved > budget:
        hints.append(f"{saved:,} B is over the budget: the saved activations grow with the micro batch, and "
                     "recomputing a part of each layer in the backward drops what that part saves.")
    want = your_run.value(flags, "--global-batch-size")
    if want is not None and _global_batch(job.spec) != int(want):
        hints.append(f"Your run's global batch is {want}; this job's is {_global_batch(job.spec)}: a different run.")
    if recomputes and not hints:
        plain, _ = _job(your_run.without(words, your_run.RECOMPUTE_OPTIONS), nproc, reference, run,
                        instruments="on")
        kept = max(r["saved_activation_bytes_per_microbatch"] for r in plain.ranks.values())
        worst = _worst(plain.losses, job.losses)
        print(f"the same job without recompute: {kept:,} B per microbatch; losses max rel. diff {worst:.1e}")
        if kept <= budget:
            hints.append(f"Without recompute this job saves {kept:,} B, already within the budget: the recompute "
                         "only repeats forward work.")
        assert worst <= rtol, f"recompute changed the losses by {worst:.1e}"  # recompute must not change the run
    return _verdict(hints, answer, run_file, words, job, "05")


def bubble_fraction(pp: int, vpp: int | None, microbatches: int) -> float:
    """The ideal pipeline's bubble, the idle share of a stage's window: (p-1) / (v*m + p-1), in slots
    of one chunk's step (lesson 06 counts it off Megatron's schedule: helpers/views/schedule.py)."""
    v = vpp or 1
    return (pp - 1) / (v * microbatches + pp - 1)


def check_bubble_target(answer: str | None, base_flags: list[str], reference, nproc: int, target: float,
                        rtol: float, run_file=None, run=None) -> bool:
    """Lesson 06: the learner's run on `base_flags`' pipeline layout, plus the learner's flags (virtual
    stages, micro batch). Correct when the job's bubble (`bubble_fraction` with its own sizes) is at most
    `target` with the fewest virtual stages that reach it at its micro batch, and it trains the
    same run: losses within `rtol` of `reference`'s (one process, the run's global batch)."""
    if answer is None:
        return judge(None, None, "")
    _, words, job, refused = _on_your_run(answer, base_flags, run_file, nproc, reference, run)
    if job is None:
        return judge(False, True, refused, shown=answer)
    s = job.spec
    m, v = s.num_microbatches, s.vpp or 1
    bubble, worst = bubble_fraction(s.pp, v, m), _worst(reference.losses, job.losses)
    print(f"your job: {s.layout_name()}, micro batch {s.micro_batch}: m = {m} microbatches per pipeline, "
          f"v = {v}: bubble {bubble:.1%} (target {target:.0%}); losses max rel. diff from one process {worst:.1e}")
    hints = []
    if bubble > target:
        hints.append(f"A bubble of {bubble:.1%}: each stage idles p-1 slots of its window, a slot being one chunk's "
                     "step (1/v of a stage's work once its layers are dealt out in v chunks), beside v*m slots of work.")
    else:
        layers = s.model_preset().num_layers
        fewer = [u for u in range(1, v) if layers % (s.pp * u) == 0 and bubble_fraction(s.pp, u, m) <= target]
        if fewer:
            hints.append(f"v = {fewer[0]} reaches the target too, with fewer point-to-point sends per microbatch.")
    if worst > rtol:
        hints.append(f"Your job's losses are not the run's (global batch {_global_batch(s)}, the run's "
                     f"{_global_batch(reference.spec)}): micro batch and accumulation may change, their product with DP may not.")
    return _verdict(hints, answer, run_file, words, job, "06")
