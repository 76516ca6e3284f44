"""Pictures of a memory plan (helpers/memory/plan.py): stacked bars per pipeline stage, one colour per
term, the device size as a line. Notebook side only."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.memory import TERMS, GiB, MemoryPlan

COLORS = {"parameters": "#4C72B0", "gradients": "#55A868", "main_params": "#8172B2",
          "optimizer_states": "#C44E52", "activations": "#DD8452", "logits_loss": "#DA8BC3",
          "comm_buffers": "#8C8C8C", "workspace": "#CCB974"}
LABELS = {"parameters": "parameters", "gradients": "gradients (fp32 buffer)", "main_params": "fp32 main params",
          "optimizer_states": "Adam m, v", "activations": "activations (in flight)", "logits_loss": "logits + loss",
          "comm_buffers": "NCCL buffers", "workspace": "workspace + transient"}


def memory_bars(plan: MemoryPlan, device_gib: float | None = None, measured_gib: dict | None = None,
                ax=None, title: str | None = None, legend: bool = True):
    """Stacked bars (GiB) for each planned stage (first/middle/last). `device_gib` draws the device
    size; `measured_gib` {stage label: GiB} marks measured peaks. Returns the Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(2.2 + 1.6 * len(plan.stages), 4))
    xs = range(len(plan.stages))
    bottom = [0.0] * len(plan.stages)
    for term in TERMS:
        vals = [s.terms[term] / GiB for s in plan.stages]
        if not any(vals):
            continue
        ax.bar(xs, vals, bottom=bottom, color=COLORS[term], label=LABELS[term], width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    _reserved_marks(ax, xs, [_reserved_gib(plan, s) for s in plan.stages])
    if measured_gib:
        pts = [(i, measured_gib[s.label]) for i, s in enumerate(plan.stages) if s.label in measured_gib]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="D", color="red", zorder=4,
                   label="measured peak allocated")
    if device_gib:
        ax.axhline(device_gib, color="red", linestyle="--", linewidth=1)
        ax.text(0.01, device_gib, f"device {device_gib:.0f} GiB", color="red", va="bottom", ha="left",
                fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_xticks(list(xs), [f"{s.label}\nstage {s.stage}\n{sum(len(c) for c in s.layers)} layers"
                             for s in plan.stages], fontsize=8)
    ax.set_ylabel("GiB per GPU")
    ax.set_title(title or f"{plan.model.name}: {plan.layout.describe().split(':')[1].strip()}", fontsize=9)
    if legend:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=0.4)  # the 900-pt dash fits the box
    ax.figure.tight_layout()
    return ax


def compare_bars(plans: dict, stage: str = "worst", device_gib: float | None = None, ax=None, title: str = ""):
    """One stacked bar per plan ({label: MemoryPlan}), for the given stage label or the busiest stage:
    how each knob moves each term."""
    if ax is None:
        _, ax = plt.subplots(figsize=(2.5 + 1.3 * len(plans), 4))
    stages = [max(p.stages, key=lambda s: s.allocated_bytes) if stage == "worst" else p.stage(stage)
              for p in plans.values()]
    xs = range(len(stages))
    bottom = [0.0] * len(stages)
    for term in TERMS:
        vals = [s.terms[term] / GiB for s in stages]
        if any(vals):
            ax.bar(xs, vals, bottom=bottom, color=COLORS[term], label=LABELS[term], width=0.6)
            bottom = [b + v for b, v in zip(bottom, vals)]
    # what decides "fits": the reserved total, above the allocated bars by the allocator's overhead
    _reserved_marks(ax, xs, [_reserved_gib(p, st) for p, st in zip(plans.values(), stages)])
    if device_gib:
        ax.axhline(device_gib, color="red", linestyle="--", linewidth=1)
        ax.text(0.01, device_gib, f"device {device_gib:.0f} GiB", color="red", va="bottom", fontsize=8,
                transform=ax.get_yaxis_transform())
    ax.set_xticks(list(xs), list(plans), fontsize=8, rotation=20, ha="right")
    ax.set_ylabel("GiB per GPU (busiest stage)" if stage == "worst" else f"GiB per GPU ({stage} stage)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=0.4)
    ax.figure.tight_layout()
    return ax


def _reserved_gib(plan: MemoryPlan, stage) -> float:
    return (stage.allocated_bytes * (1 + plan.training.allocator_overhead) + stage.terms["comm_buffers"]) / GiB


def _reserved_marks(ax, xs, reserved: list[float]) -> None:
    ax.scatter(list(xs), reserved, marker="_", s=900, color="black", label="reserved (+ allocator overhead)",
               zorder=3)


def plan_vs_measured(rows: list[dict], ax=None):
    """Scatter of planned vs measured peak allocated GiB (rows from vs_measured.peak_rows, each with a
    'name' and 'world' size), with the +-10% band."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.2))
    meas = [r["allocated"] / GiB for r in rows]
    plan = [r["planned"] / GiB for r in rows]
    top = max(meas + plan) * 1.1
    ax.fill_between([0, top], [0, top * 0.9], [0, top * 1.1], color="#DDDDDD", label="within 10%")
    ax.plot([0, top], [0, top], color="gray", linewidth=0.8)
    for world, color in ((1, "#4C72B0"), (2, "#DD8452")):
        pts = [(m_, p_) for r, m_, p_ in zip(rows, meas, plan) if r.get("world", 1) == world]
        if pts:
            ax.scatter([x for x, _ in pts], [y for _, y in pts], color=color, zorder=3, s=18,
                       label=f"{world} GPU{'s' if world > 1 else ''} (one point per rank)")
    worst = max(rows, key=lambda r: abs(r["error"]))
    ax.annotate(f"largest error: {worst['name']} rank {worst['rank']} ({worst['error']:+.1%})",
                (worst["allocated"] / GiB, worst["planned"] / GiB), fontsize=7, xytext=(10, -25),
                textcoords="offset points", arrowprops=dict(arrowstyle="->", linewidth=0.6))
    ax.set_xlim(0, top), ax.set_ylim(0, top)
    ax.set_xlabel("measured peak allocated (GiB, torch)")
    ax.set_ylabel("planned peak allocated (GiB)")
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax
