"""What each rank holds, read from the live jobs (`ranks.json`, helpers/runtime/measure/memory_stats.py
and instruments.py): parameters, gradient buffers, optimizer state and fp32 main copies, and the
activation bytes one microbatch's forward saves for backward. A table and a bar chart. Notebook
side only."""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt

from helpers.rundir.reader import RunDir
from helpers.views.table import Table

PARTS = {  # ranks.json field -> label
    "param_bytes": "parameters",
    "grad_bytes": "gradient buffers",
    "optimizer_state_bytes": "optimizer state (Adam m, v)",
    "main_param_bytes": "fp32 main parameters",
    "saved_activation_bytes_per_microbatch": "activations saved (1 microbatch)",
}


def table(runs: dict[str, RunDir], parts: list[str] | None = None) -> Table:
    parts = parts or list(PARTS)
    rows = []
    for label, run in runs.items():
        for rank, info in sorted(run.ranks.items()):
            rows.append({"job": label, "rank": rank, **{PARTS[p]: info.get(p, 0) for p in parts}})
    return Table(rows)


def _allocated(run: RunDir, info: dict, part: str) -> int:
    """Bytes a part really adds. fp32 training: the optimizer's "main parameters" are the parameters
    themselves (views into Megatron's parameter buffer), counted by the job but never allocated."""
    if part == "main_param_bytes" and run.spec.precision == "fp32":
        return 0
    return info.get(part, 0)


def bars(runs: dict[str, RunDir], parts: list[str] | None = None, title: str = "memory per rank, measured",
         unit: float = 2**20, ax=None):
    """Stacked bars, one per (job, rank), in MiB."""
    parts = parts or [p for p in PARTS if p != "saved_activation_bytes_per_microbatch"]
    labels, stacks = [], []
    for label, run in runs.items():
        for rank, info in sorted(run.ranks.items()):
            labels.append(textwrap.fill(label, 11) + f"\nrank {rank}")  # long job names wrap, not overlap
            stacks.append([_allocated(run, info, p) / unit for p in parts])
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.7 * len(labels) + 2), 3.8))
    bottom = [0.0] * len(labels)
    colours = ["#4c72b0", "#dd8452", "#55a868", "#8172b3", "#c44e52"]
    for i, p in enumerate(parts):
        vals = [s[i] for s in stacks]
        ax.bar(range(len(labels)), vals, bottom=bottom, label=PARTS[p], color=colours[i % len(colours)])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("MiB" if unit == 2**20 else f"x{unit:g} bytes")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    plt.tight_layout()
    return ax
