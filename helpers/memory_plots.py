"""Pictures of a memory plan (helpers/memory.py): stacked bars per pipeline stage, one colour per
term, the device size as a line. Notebook side only."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.memory import GiB, TERMS, MemoryPlan

COLORS = {"parameters": "#4C72B0", "gradients": "#55A868", "main_params": "#8172B2",
          "optimizer_states": "#C44E52", "activations": "#DD8452", "logits_loss": "#DA8BC3",
          "comm_buffers": "#8C8C8C", "workspace": "#CCB974"}
LABELS = {"parameters": "parameters", "gradients": "gradients (fp32 buffer)", "main_params": "fp32 main params",
          "optimizer_states": "Adam m, v", "activations": "activations (in flight)", "logits_loss": "logits + loss",
          "comm_buffers": "NCCL buffers", "workspace": "workspace + transient"}


def memory_bars(plan: MemoryPlan, device_gib: float | None = None, measured_gib: dict | None = None,
                ax=None, title: str | None = None):
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
    reserved = [(s.allocated_bytes * (1 + plan.training.allocator_overhead) + s.terms["comm_buffers"]) / GiB
                for s in plan.stages]
    ax.scatter(xs, reserved, marker="_", s=900, color="black", label="reserved (+ allocator overhead)",
               zorder=3)
    if measured_gib:
        pts = [(i, measured_gib[s.label]) for i, s in enumerate(plan.stages) if s.label in measured_gib]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="D", color="red", zorder=4,
                   label="measured peak allocated")
    if device_gib:
        ax.axhline(device_gib, color="red", linestyle="--", linewidth=1)
        ax.text(-0.45, device_gib, f"device {device_gib:.0f} GiB", color="red", va="bottom", ha="left",
                fontsize=8)
    ax.set_xticks(list(xs), [f"{s.label}\n(stage {s.stage}, {sum(len(c) for c in s.layers)} layers)"
                             for s in plan.stages], fontsize=8)
    ax.set_ylabel("GiB per GPU")
    ax.set_title(title or f"{plan.model.name}: {plan.layout.describe().split(':')[1].strip()}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax
