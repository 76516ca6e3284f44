"""Pipeline schedules as they ran: one row per rank of forward (F) and backward (B) blocks drawn
from the measured events in `timeline.jsonl` (helpers/runtime/measure/timeline.py), and the measured
bubble next to the textbook formula. Notebook side only.

Bubble, measured: in one iteration the pipeline is busy from the first forward on any rank to the
last backward on any rank (the window); a rank's bubble is the part of that window in which it
computed nothing. Formula (equal stages, communication free): (p-1)/(v*m + p-1) for p stages,
m microbatches and v virtual stages per rank (v=1: plain 1F1B)."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
from matplotlib import colormaps
from matplotlib.patches import Patch

from helpers.rundir import names
from helpers.rundir.reader import RunDir


def events(run: RunDir) -> list[dict]:
    path = run.path / names.TIMELINE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the job did not finish, or it was made by a kit "
                                "without timeline recording; run it again")
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
