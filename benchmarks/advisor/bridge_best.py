"""The published layout against the advisor's own pick, per case of NVIDIA's Megatron-Bridge table
(bridge_rows.py): for each (model, system, GPU count, precision) the newest release's row, its
layout timed by the time model (the table's prediction), and the advisor's fastest layout that its
memory planner fits on the same GPUs, global batch, sequence and precision (helpers/advisor fastest).
Where the advisor's pick is more than 10% faster, the time model's terms (helpers/advisor/time/step.py TERMS) say
where the published layout spends the difference: the terms it spends most on beyond the pick's.

The search is narrowed to what the published recipes vary, so that every case runs in one command:
TP within a node, CP, PP (uneven splits included), VPP, EP, micro batches up to 4, recompute none,
selective or full; sequence parallel on with TP, expert TP 1, the distributed optimizer on (as
bridge_rows.py reads the table). The pick is timed with gradients reduced in bf16 and no FSDP; the
model's real layer count (the published layout is timed as its busiest chunk where its pipeline does
not divide the layers). NVFP4 cases are left out: the memory planner the search runs on has no NVFP4."""
from __future__ import annotations

from dataclasses import dataclass

from benchmarks.advisor import bridge_rows
from helpers.advisor import fastest
from helpers.advisor.advise import Row
from helpers.advisor.execution import MEGATRON_CORE
from helpers.advisor.time import step
from helpers.memory.plan import plan_memory
from helpers.memory.training import GiB
from helpers.perf.layouts import Space

SPACE = Space(tp_beyond_node=False, sp_off=False, expert_tp=False)
MAX_MICRO_BATCH = 4
# the recipes' bf16 gradient reduction (bridge_rows.py)
PICK_EXECUTION = MEGATRON_CORE.with_(grad_reduce_bytes=2)
WITHIN = 0.10  # the pick counts as no better when at most this much faster

# What a term the published layout spends more on says about the pick
WORDS = {"gemm": "less GEMM time (larger or less split GEMMs)", "attention": "less attention-core time",
         "elementwise": "less elementwise time", "tp": "less TP traffic", "cp": "less CP traffic",
         "ep": "less expert all-to-all", "host": "less MoE host time (fewer layer-microbatches per rank)",
         "recompute": "less recompute", "output_layer": "the output layer off (or lighter on) the busiest stage",
         "pp_p2p": "fewer pipeline sends", "grad_accumulate": "less gradient accumulation",
         "bubble": "a smaller pipeline bubble", "dp": "less exposed DP traffic", "optimizer": "a shorter optimizer step"}


@dataclass
class Case:
    row: bridge_rows.Published  # the newest release's row of the case
    published: step.StepTime | None  # its layout, timed (None: the table cannot express it)
    published_gib: float | None  # its planned reserved peak per GPU
    gpu_gib: float
    best: Row | None  # the advisor's pick (None: nothing fits)

    @property
    def ratio(self) -> float | None:
        """The pick's tokens/s/GPU over the published layout's, both predicted."""
        if self.published is None or self.best is None:
            return None
        return self.best.step.tokens_per_s_per_gpu / self.published.tokens_per_s_per_gpu

    @property
    def within(self) -> bool:
        return self.ratio is not None and self.ratio <= 1 + WITHIN


def _release(row: bridge_rows.Published) -> tuple[int, ...]:
    return tuple(int(x) for x in row.release.split("."))


def newest(rows: list[bridge_rows.Published]) -> list[bridge_rows.Published]:
    """One row per case (family, system, GPUs, precision): the newest release's, in the table's order."""
    out = {}
    for r in rows:
        if r.case not in out or _release(r) > _release(out[r.case]):
            out[r.case] = r
    return list(out.values())


def evaluate(rows: list[bridge_rows.Published]) -> list[Case]:
    """A Case per expressed case; a search is shared by cases that differ only in their precision's label."""
    searched, out = {}, []
    for row in newest(rows):
        inputs = bridge_rows.expressed(row)
        if isinstance(inputs, str) or bridge_rows.PRECISIONS[row.precision] == "fp4":
            continue  # the advisor's search plans memory per precision, and the planner has no NVFP4
        m, lay, training, gpu = inputs
        published = step.predict(m, lay, training, gpu, lay.gpus_per_node,
                                 bridge_rows.precision_execution(training, row))
        published_gib = plan_memory(m, lay, training).reserved_bytes / GiB
        model = bridge_rows.model_of(row)
        key = (model, gpu.name, row.gpus, training.precision, row.gbs, row.seq)
        if key not in searched:
            searched[key] = fastest(model, row.gpus, gpu, lay.gpus_per_node, row.seq, row.gbs, PICK_EXECUTION,
                                    "te", MAX_MICRO_BATCH, training.precision, SPACE, (True,))
        out.append(Case(row, published, published_gib, gpu.memory_gib, searched[key]))
    return out


def layout_text(tp: int, pp: int, cp: int, vp: int | None, ep: int, mbs: int) -> str:
    return f"TP{tp} PP{pp} CP{cp} VP{vp or 1} EP{ep} mbs{mbs}"


def reason(published: step.StepTime, best: step.StepTime, terms: int = 2) -> str:
    """The terms the published layout spends most on beyond the pick, in words with the seconds per
    iteration it spends more (at most `terms`, each at least a tenth of the whole difference)."""
    gap = published.step_s - best.step_s
    more = sorted(((published.terms[k] - best.terms[k], k) for k in step.TERMS), reverse=True)
    named = [(d, k) for d, k in more[:terms] if d > 0 and d >= 0.1 * gap] or more[:1]
    return ", ".join(f"{WORDS[k]} ({d:.2f} s)" for d, k in named)


def why(case: Case) -> str:
    """The page's words for a case whose pick is more than WITHIN faster."""
    b = case.best
    text = reason(case.published, b.step)
    if b.training.recompute != "none":
        text += f"; the pick recomputes ({b.training.recompute})"
    if case.published_gib > case.gpu_gib:
        text += (f"; the planner puts the published layout at {case.published_gib:.0f} GiB, over the GPU's "
                 f"{case.gpu_gib:.0f}")
    elif b.memory_gib > 0.9 * case.gpu_gib:
        text += f"; the pick fits by the planner's estimate ({b.memory_gib:.0f} of {case.gpu_gib:.0f} GiB)"
    return text


def section(cases: list[Case]) -> list[str]:
    """The page's section: the summary line and a row per case."""
    within = sum(c.within for c in cases)
    lines = ["## The published layout against the advisor's pick", "",
             f"Per case (model, system, GPUs, precision; the newest release's row), the advisor's fastest layout "
             f"that fits (benchmarks/advisor/bridge_best.py says the search's bounds: TP within a node, micro "
             f"batch up to {MAX_MICRO_BATCH}, SP on with TP, expert TP 1, distributed optimizer on) beside the "
             f"published layout, both timed by the time model. {within} of {len(cases)} cases: the published "
             f"layout is predicted within {WITHIN:.0%} of the pick; for the others the last column names the terms "
             "the published layout spends more on.", "",
             "| system | model | GPUs | precision | published layout | predicted tok/s/GPU | planned GiB "
             "| advisor's pick | predicted tok/s/GPU | planned GiB | pick / published | why the pick is faster |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        p = c.row
        pub = layout_text(p.tp, p.pp, p.cp, p.vp, p.ep, p.mbs) + (f" FSDP{p.fsdp}" if p.fsdp else "")
        if c.best is None:
            lines.append(f"| {p.system} | {p.model} | {p.gpus} | {p.precision} | {pub} | "
                         f"{c.published.tokens_per_s_per_gpu:,.0f} | {c.published_gib:.0f} | none fits | | | | |")
            continue
        lay, tr = c.best.layout, c.best.training
        pick = layout_text(lay.tp, lay.pp, lay.cp, lay.vpp, lay.ep, lay.micro_batch)
        if tr.recompute != "none":
            pick += f" recompute {tr.recompute}"
        lines.append(f"| {p.system} | {p.model} | {p.gpus} | {p.precision} | {pub} | "
                     f"{c.published.tokens_per_s_per_gpu:,.0f} | {c.published_gib:.0f} | {pick} | "
                     f"{c.best.step.tokens_per_s_per_gpu:,.0f} | {c.best.memory_gib:.0f} | {c.ratio:.2f} | "
                     f"{'' if c.within else why(c)} |")
    beyond = [c for c in cases if c.ratio is not None and not c.within]
    over = sum(c.published_gib > c.gpu_gib for c in beyond)
    lines += ["", f"Of the {len(beyond)} cases beyond the line, {over} have the published layout over the GPU's memory "
              "by the planner's estimate (its planned GiB above), where the pick is what the planner lets fit "
              "rather than a layout NVIDIA passed over; the rest name where the time model sees the published "
              "layout lose."]
    return lines + [""]
