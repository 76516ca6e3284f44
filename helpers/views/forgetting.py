"""Forgetting in one picture (notebook side): the loss on the text a continued-pretraining job
trained for and on the general text it did not see, before and after it."""
from __future__ import annotations

import matplotlib.pyplot as plt


def rise(before: float, after: float) -> float:
    """The relative change of a loss, (after - before) / before: > 0 when it rose."""
    return (after - before) / before


def plot(losses: dict[str, tuple[float, float]], title: str = "", ax=None):
    """A pair of bars per data set, {name: (before, after)}, each pair labelled with its relative
    change: the trained-for text's loss should fall, the general text's should barely move."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    names = list(losses)
    width = 0.38
    for k, (label, color) in enumerate((("before", "tab:gray"), ("after", "tab:blue"))):
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        ax.bar(xs, [losses[n][k] for n in names], width, label=label, color=color)
    for i, n in enumerate(names):
        before, after = losses[n]
        ax.annotate(f"{rise(before, after):+.1%}", (i, max(before, after)), ha="center", va="bottom",
                    xytext=(0, 4), textcoords="offset points")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("validation loss (nats per token)")
    ax.set_ylim(0, 1.3 * max(max(v) for v in losses.values()))  # room for the labels and the legend
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", ncol=2)
    return ax
