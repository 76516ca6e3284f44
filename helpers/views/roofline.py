"""The roofline model's picture (helpers/perf/roofline.py): for each layout, one bar of a rank's
iteration split into its terms (GEMMs and attention, memory-bound kernels, each axis's
communication), on a named GPU (helpers/perf/gpus.py) and link (helpers/perf/links.py LINKS). A
model, not a measurement: the title says so."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import roofline
from helpers.perf.gpus import PROFILES
from helpers.perf.links import LINKS

COLORS = {"GEMMs + attention": "#4c72b0", "memory-bound kernels": "#8fb0d9", "tp": "#dd8452", "cp": "#c44e52",
          "pp": "#8172b3", "ep": "#937860", "dp": "#55a868"}


def bars(model: ModelPreset, layouts: dict[str, tuple[Layout, str]], gpu: str = "h200", dist_opt: bool = True,
         ax=None):
    """`layouts`: label -> (Layout, links): a link name of LINKS for every axis, or {axis: link name,
    "default": link name}; `gpu`: a key of PROFILES. Returns {label: Terms}."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(layouts)))
    out = {}
    for row, (label, (lay, link)) in enumerate(layouts.items()):
        links = {k: LINKS[v] for k, v in link.items()} if isinstance(link, dict) else LINKS[link]
        t = roofline.terms(model, lay, PROFILES[gpu], links, dist_opt)
        out[label] = t
        left = 0.0
        parts = {"GEMMs + attention": t.math_s, "memory-bound kernels": t.memory_s, **t.comm_s}
        for name, seconds in parts.items():
            ax.barh(row, seconds * 1e3, left=left, color=COLORS[name], edgecolor="white",
                    label=name if name not in ax.get_legend_handles_labels()[1] else None)
            left += seconds * 1e3
        ax.text(left, row, f" {left:,.0f} ms", va="center", fontsize=8)
    names = [f"{k}\n({describe(link)})" for k, (_, link) in layouts.items()]
    ax.set_yticks(range(len(layouts)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per iteration on one rank (no overlap)")
    ax.set_title(f"a roofline model, not a measurement: {model.name} on {PROFILES[gpu].name}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(axis="x", alpha=0.3)
    return out


def describe(link) -> str:
    short = lambda name: LINKS[name].name.split(",")[0].split(" (")[0]  # noqa: E731
    if isinstance(link, str):
        return short(link)
    return ", ".join(f"{axis}: {short(name)}" if axis != "default" else f"others: {short(name)}"
                     for axis, name in link.items())
