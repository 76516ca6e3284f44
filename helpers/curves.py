"""Loss curves of several runs on one axes (notebook side)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.results import RunDir


def plot_losses(runs: dict[str, RunDir], title: str = "training loss", ax=None):
    """Overlay the loss of each run; markers differ so identical curves stay visible."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    markers = "osD^v<>"
    for i, (label, run) in enumerate(runs.items()):
        its = [m["iteration"] for m in run.metrics]
        ax.plot(its, run.losses, marker=markers[i % len(markers)], markersize=9 - 2 * (i % 3),
                linewidth=1.5, alpha=0.8, label=f"{label} ({run.spec.world_size} rank(s))")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (global-batch mean)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
