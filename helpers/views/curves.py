"""Loss curves of several runs on one axes (notebook side)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.rundir.reader import RunDir


def plot_losses(runs: dict[str, RunDir], title: str = "training loss", ax=None):
    """Overlay the loss of each run; markers differ so identical curves stay visible."""
    curves = {f"{label} ({run.spec.world_size} rank(s))": ([m["iteration"] for m in run.metrics],
                                                            run.losses) for label, run in runs.items()}
    return _plot(curves, title, ax)


def plot_loss_lists(losses: dict[str, list[float]], title: str = "training loss", ax=None):
    """The same picture for plain lists of losses (iterations 1, 2, ...), e.g. a script's own output."""
    return _plot({label: (list(range(1, len(v) + 1)), v) for label, v in losses.items()}, title, ax)


def _plot(curves: dict[str, tuple[list, list]], title: str, ax):
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    markers = "osD^v<>"
    for i, (label, (its, losses)) in enumerate(curves.items()):
        ax.plot(its, losses, marker=markers[i % len(markers)], markersize=9 - 2 * (i % 3),
                linewidth=1.5, alpha=0.8, label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (global-batch mean)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_train_and_eval(run: RunDir, title: str = "", ax=None):
    """Training loss per iteration with the validation passes (and the final test pass) of a
    real-data run on the same axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    ax.plot([m["iteration"] for m in run.metrics], run.losses, marker="o", label="train (batch of iteration i, before its update)")
    valid = [e for e in run.evaluations if e["split"] == "valid"]
    test = [e for e in run.evaluations if e["split"] == "test"]
    ax.plot([e["iteration"] for e in valid], [e["loss"] for e in valid], marker="s", linestyle="--",
            label="validation (fixed batches, after iteration i)")
    if test:
        ax.scatter([test[-1]["iteration"]], [test[-1]["loss"]], marker="*", s=200, color="tab:red",
                   zorder=3, label=f"test {test[-1]['loss']:.3f}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (mean over target tokens)")
    ax.set_title(title or f"{run.spec.data}: {run.spec.layout_name()}")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
