"""Pipeline schedules as they ran: one row per rank of forward (F) and backward (B) blocks drawn
from the measured events in `timeline.jsonl` (helpers/runtime/measure/timeline.py), and the measured
bubble next to the textbook formula. Notebook side only.

Bubble, measured: in one iteration the pipeline is busy from the first forward on any rank to the
last backward on any rank (the window); a rank's bubble is the part of that window in which it
computed nothing. Formula (equal stages, communication free): (p-1)/(v*m + p-1) for p stages,
m microbatches and v virtual stages per rank (v=1: plain 1F1B).

Ideal: `ideal(p, m, v)` runs Megatron's own order (its warm-up count and its (microbatch, chunk)
table) on a pipeline in which every forward and backward of a chunk takes one time slot and
communication is free; `plot_ideal` draws it, `beside_measured` puts it above a run's timeline."""
from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import matplotlib.pyplot as plt
from matplotlib import colormaps
from matplotlib.patches import Patch

from helpers.rundir import names
from helpers.rundir.reader import RunDir


def events(run: RunDir) -> list[dict]:
    path = run.path / names.TIMELINE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the job ran without instruments (instruments='off'; auto "
                                "is off on cuda) or stopped before its last iteration; run it with instruments='on'")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compute(run: RunDir, iteration: int) -> list[dict]:
    return [e for e in events(run) if e["iteration"] == iteration and e["kind"] in ("F", "B")]


def formula(p: int, m: int, v: int = 1) -> float:
    return (p - 1) / (v * m + p - 1)


def formula_of(run: RunDir) -> float:
    s = run.spec
    return formula(s.pp, s.num_microbatches, s.vpp or 1)


def bubble(run: RunDir, iteration: int | None = None) -> dict[int, float]:
    """{rank: idle fraction of the pipeline window}, averaged over iterations 2.. (iteration 1
    includes one-time warm-up costs) unless one iteration is asked for."""
    its = [iteration] if iteration else list(range(2, run.spec.iters + 1)) or [1]
    out: dict[int, list[float]] = {}
    for it in its:
        evs = compute(run, it)
        t0, t1 = min(e["t0"] for e in evs), max(e["t1"] for e in evs)
        for r in range(run.spec.world_size):
            busy = sum(e["t1"] - e["t0"] for e in evs if e["rank"] == r)
            out.setdefault(r, []).append(1 - busy / (t1 - t0))
    return {r: sum(v) / len(v) for r, v in out.items()}


def order(run: RunDir, rank: int, iteration: int = 1) -> str:
    """The rank's schedule as text, e.g. 'F0 F1 B0 F2 B1 ...' (chunk suffix when interleaved)."""
    evs = sorted((e for e in compute(run, iteration) if e["rank"] == rank), key=lambda e: e["t0"])
    vpp = run.spec.vpp
    return " ".join(f"{e['kind']}{e['microbatch']}" + (f".{e['chunk']}" if vpp else "") for e in evs)


def _stage_of(run: RunDir) -> dict[int, int]:
    return {r: g["pp"].index(r) for r, g in run.groups.items()}


def timeline(run: RunDir, iteration: int | None = None, ax=None, title: str | None = None,
             ranks: list[int] | None = None):
    """One row per rank (top: first pipeline stage): forward blocks blue, backward orange (darker
    shade = later virtual chunk), each labelled with its microbatch; waits on point-to-point
    transfers as thin grey bars underneath. x: milliseconds since the window opened."""
    iteration = iteration or run.spec.iters
    evs = compute(run, iteration)
    waits = [e for e in events(run) if e["iteration"] == iteration and e["kind"] == "wait" and e["axis"] == "pp"]
    start, end = min(e["t0"] for e in evs), max(e["t1"] for e in evs)
    stage = _stage_of(run)
    ranks = ranks if ranks is not None else sorted(range(run.spec.world_size), key=lambda r: (stage[r], r))
    bub = bubble(run, iteration)
    vpp = run.spec.vpp or 1
    blues, oranges = colormaps["Blues"], colormaps["Oranges"]
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.75 * len(ranks) + 1.4))
    for row, r in enumerate(ranks):
        y = len(ranks) - 1 - row
        for e in (e for e in evs if e["rank"] == r):
            shade = 0.45 + 0.35 * (e["chunk"] / max(1, vpp - 1)) if vpp > 1 else 0.55
            colour = blues(shade) if e["kind"] == "F" else oranges(shade)
            x0, w = (e["t0"] - start) * 1e3, (e["t1"] - e["t0"]) * 1e3
            ax.barh(y, w, left=x0, height=0.62, color=colour, edgecolor="black", linewidth=0.4)
            label = str(e["microbatch"]) + (f"·{e['chunk']}" if vpp > 1 else "")
            if w > (end - start) * 1e3 * 0.018:
                ax.text(x0 + w / 2, y, label, ha="center", va="center", fontsize=7)
        for e in (e for e in waits if e["rank"] == r and start <= e["t0"] <= end):
            ax.barh(y - 0.4, (e["t1"] - e["t0"]) * 1e3, left=(e["t0"] - start) * 1e3, height=0.12, color="0.55")
        ax.text((end - start) * 1e3 * 1.01, y, f"bubble {bub[r]:.0%}", va="center", fontsize=8)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r} (stage {stage[r]})" for r in reversed(ranks)])
    ax.set_xlim(0, (end - start) * 1e3 * 1.12)
    ax.set_xlabel("milliseconds since the first forward of the iteration")
    s = run.spec
    ax.set_title(title or f"measured schedule, iteration {iteration}: PP={s.pp}"
                 + (f", VPP={s.vpp}" if s.vpp else "") + f", {s.num_microbatches} microbatches"
                 + f" (formula bubble {formula_of(run):.0%})")
    ax.legend(handles=[Patch(color=blues(0.55), label="forward (microbatch" + ("·chunk)" if vpp > 1 else ")")),
                       Patch(color=oranges(0.55), label="backward"),
                       Patch(color="0.55", label="waiting on a send/recv")],
              loc="upper center", bbox_to_anchor=(0.5, -0.28 if len(ranks) < 3 else -0.18), ncol=3, fontsize=8,
              frameon=False)
    plt.tight_layout()
    return ax


# ---- the ideal schedule: Megatron's order, every step one time slot ----------------------
def megatron_order(p: int, m: int, v: int, stage: int) -> list[tuple[str, int, int]]:
    """(kind, microbatch, chunk) in the order Megatron's schedule runs them on `stage`: the
    warm-up count from `get_pp_rank_microbatches`, the (microbatch, chunk) sequence from
    `get_schedule_table` (microbatch group = p, Megatron's default), then warm-up forwards,
    1F1B pairs, cool-down backwards; a backward runs the chunks in reverse (chunk v-1-c)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.pipeline_parallel.schedules import (
            get_pp_rank_microbatches,
            get_schedule_table,
        )
    # Megatron asks the communicator only for the pipeline size, this stage and the VPP size.
    p2p = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: p, rank=lambda: stage),
                          virtual_pipeline_model_parallel_size=v if v > 1 else None)
    total, _, warmup, _ = get_pp_rank_microbatches(m, v, p, p2p_communicator=p2p)
    table = get_schedule_table(m, v, p)
    forwards = [("F", mb, chunk) for mb, chunk in table]
    backwards = [("B", mb, v - 1 - chunk) for mb, chunk in table]
    out = forwards[:warmup]
    for i in range(warmup, total):
        out += [forwards[i], backwards[i - warmup]]
    return out + backwards[total - warmup:]


def ideal(p: int, m: int, v: int = 1) -> list[dict]:
    """Every step of one iteration: {stage, kind, microbatch, chunk, slot}. Each stage runs its
    Megatron order; a step starts when the stage is free and its input exists: a forward needs
    the previous virtual stage's forward of that microbatch (virtual stage = chunk*p + stage),
    a backward the next virtual stage's backward (the last one: its own forward)."""
    orders = [megatron_order(p, m, v, s) for s in range(p)]
    last = v * p - 1
    done: dict[tuple, int] = {}  # (kind, virtual stage, microbatch) -> slot it ended
    free, nxt, out = [0] * p, [0] * p, []
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, mb, chunk = orders[s][nxt[s]]
                vs = chunk * p + s
                if kind == "F":
                    needs = ("F", vs - 1, mb) if vs > 0 else None
                else:
                    needs = ("B", vs + 1, mb) if vs < last else ("F", vs, mb)
                if needs is not None and needs not in done:
                    break
                slot = max(free[s], done.get(needs, 0))
                done[(kind, vs, mb)] = free[s] = slot + 1
                out.append({"stage": s, "kind": kind, "microbatch": mb, "chunk": chunk, "slot": slot})
                nxt[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"no stage can move: Megatron's order deadlocks for p={p}, m={m}, v={v}")
    return out


def ideal_bubble(steps: list[dict]) -> dict[int, float]:
    """{stage: idle slots / slots of the iteration}, read off the schedule itself."""
    window = max(e["slot"] for e in steps) + 1
    stages = sorted({e["stage"] for e in steps})
    return {s: 1 - sum(e["stage"] == s for e in steps) / window for s in stages}


def plot_ideal(p: int, m: int, v: int = 1, ax=None, title: str | None = None):
    """The ideal schedule, one row per stage (top: stage 0), blocks labelled with the microbatch
    (and chunk). x: time in units of one stage's forward, so a chunk's step is 1/v wide and
    interleaved and plain 1F1B compare on the same axis."""
    steps = ideal(p, m, v)
    bub = ideal_bubble(steps)
    width = 1 / v
    blues, oranges = colormaps["Blues"], colormaps["Oranges"]
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.6 * p + 1.5))
    for e in steps:
        y = p - 1 - e["stage"]
        shade = 0.45 + 0.35 * (e["chunk"] / (v - 1)) if v > 1 else 0.55
        colour = blues(shade) if e["kind"] == "F" else oranges(shade)
        ax.barh(y, width, left=e["slot"] * width, height=0.62, color=colour, edgecolor="black", linewidth=0.4)
        label = str(e["microbatch"]) + (f"·{e['chunk']}" if v > 1 else "")
        ax.text((e["slot"] + 0.5) * width, y, label, ha="center", va="center", fontsize=7 if v == 1 else 6)
    end = (max(e["slot"] for e in steps) + 1) * width
    for s, b in bub.items():
        ax.text(end * 1.01, p - 1 - s, f"bubble {b:.0%}", va="center", fontsize=8)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {s}" for s in reversed(range(p))])
    ax.set_xlim(0, end * 1.12)
    ax.set_xlabel("time, in units of one stage's forward (backward assumed as long, communication free)")
    kind = f"interleaved (v={v} chunks per stage)" if v > 1 else "1F1B"
    window = max(e["slot"] for e in steps) + 1
    ax.set_title(title or f"ideal {kind}, p={p} stages, m={m} microbatches: stage 0 idles "
                 f"{round(bub[0] * window)} of {window} slots = {bub[0]:.1%}; formula (p-1)/(v·m+p-1) = "
                 f"{formula(p, m, v):.1%}", fontsize=9)
    ax.legend(handles=[Patch(color=blues(0.55), label="forward (microbatch" + ("·chunk)" if v > 1 else ")")),
                       Patch(color=oranges(0.55), label="backward")],
              loc="upper center", bbox_to_anchor=(0.5, -0.28 if p < 3 else -0.2), ncol=2, fontsize=8, frameon=False)
    plt.tight_layout()
    return ax


def beside_measured(run: RunDir, iteration: int | None = None):
    """The ideal schedule of the run's (p, m, v) above what the run measured: same order, the
    ideal's equal blocks against the measured durations and waits."""
    s = run.spec
    rows = s.pp + s.world_size
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 0.6 * rows + 3.2),
                                      gridspec_kw={"height_ratios": [s.pp, s.world_size]})
    plot_ideal(s.pp, s.num_microbatches, s.vpp or 1, ax=top)
    timeline(run, iteration, ax=bottom)
    fig.tight_layout()
    return fig
