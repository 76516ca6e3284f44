"""Pictures of where ranks sit and which groups they form (notebook side only).

`rank_grid(layout, "dense")` draws one panel per axis (TP, CP, DP, PP); `"expert"` draws ETP,
EP, EDP, PP. Every panel shows the same physical picture, nodes as dashed boxes and one cell per
device labelled with its rank, and colours the cells by the group they belong to on that axis;
the small `gN` under a rank names its group, so the picture reads without colour too."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib import colormaps
from matplotlib.patches import FancyBboxPatch, Rectangle

from helpers.job.layout import Layout

WHAT = {  # what each axis splits, for panel titles
    "tp": "tensor parallel: each layer's weight matrices",
    "cp": "context parallel: the sequence",
    "dp": "data parallel: the batch (model replicas)",
    "dp_cp": "DP x CP: where gradients are averaged",
    "pp": "pipeline parallel: the layers, in stages",
    "mp": "model parallel (TP x PP): one model copy",
    "etp": "expert tensor parallel: each expert's matrices",
    "ep": "expert parallel: the set of experts",
    "edp": "expert data parallel: replicas of an expert shard",
    "embedding": "embedding: first and last stage (tied/ synced weights)",
}
AXES = {"dense": ["tp", "cp", "dp", "pp"], "expert": ["etp", "ep", "edp", "pp"]}
MAX_PER_ROW = 16  # cells in one row before nodes wrap: keeps 16 ranks legible at notebook width
GREY = "#d9d9d9"


def _positions(layout: Layout, per_row: int = MAX_PER_ROW) -> dict[int, tuple[float, float]]:
    """Cell position (x, y) of every rank: nodes side by side, wrapping after `per_row` cells."""
    per = layout.gpus_per_node or layout.world_size
    width = min(per, per_row)
    rows_in_node = -(-per // width)
    nodes_per_row = max(1, per_row // width)
    pos = {}
    for rank, (node, local) in layout.placement().items():
        x = (node % nodes_per_row) * (width + 0.6) + local % width
        y = (node // nodes_per_row) * (rows_in_node + 0.9) + local // width
        pos[rank] = (x, y)
    return pos


def _colours(n: int) -> list:
    """n distinct colours; grey is left out (it means "axis off")."""
    tab10, tab20 = colormaps["tab10"], colormaps["tab20"]
    palette = [tab10(i) for i in range(10) if i != 7] + [tab20(i) for i in range(1, 20, 2) if i != 15]
    if n <= len(palette):
        return palette[:n]
    return [colormaps["turbo"](i / (n - 1)) for i in range(n)]


def _panel(ax, layout: Layout, axis: str, groups: list[list[int]], pos, narrow: bool = False,
           cell: float = 0.62) -> None:
    """One axis. `cell`: size of a cell in inches (fonts shrink with it)."""
    size = len(groups[0])
    colours = _colours(len(groups)) if size > 1 else [GREY] * len(groups)
    group_of = {r: i for i, g in enumerate(groups) for r in g}
    per = layout.gpus_per_node or layout.world_size
    for rank, (x, y) in pos.items():
        g = group_of.get(rank)
        face = colours[g] if g is not None else "white"
        ax.add_patch(FancyBboxPatch((x + 0.06, y + 0.06), 0.88, 0.88, boxstyle="round,pad=0,rounding_size=0.12",
                                    facecolor=face, edgecolor="#333333", linewidth=0.8))
        dark = g is not None and size > 1 and sum(face[:3]) < 1.5
        ax.text(x + 0.5, y + 0.42, str(rank), ha="center", va="center", fontsize=min(11, 24 * cell), fontweight="bold",
                color="white" if dark else "black")
        if g is not None and size > 1:
            ax.text(x + 0.5, y + 0.8, f"g{g}", ha="center", va="center", fontsize=min(7, 16 * cell),
                    color="white" if dark else "#222222")
    for node in range(layout.nodes):  # dashed box around each node's cells
        xs = [pos[r][0] for r in range(node * per, min((node + 1) * per, layout.world_size))]
        ys = [pos[r][1] for r in range(node * per, min((node + 1) * per, layout.world_size))]
        ax.add_patch(Rectangle((min(xs) - 0.08, min(ys) - 0.08), max(xs) - min(xs) + 1.16, max(ys) - min(ys) + 1.16,
                               fill=False, linestyle="--", linewidth=1.2, edgecolor="#555555"))
        if layout.nodes > 1 or layout.gpus_per_node:
            ax.text(min(xs), min(ys) - 0.18, f"node {node}", fontsize=8, va="bottom", color="#555555")
    state = f"{len(groups)} group(s) of {size}" if size > 1 else "size 1: off (every rank alone)"
    sep = "\n" if narrow else " | "
    ax.set_title(f"{axis.upper()}: {WHAT.get(axis, axis)}{sep}{state}", fontsize=9 if narrow else 10, loc="left")
    xs, ys = zip(*pos.values())
    ax.set_xlim(min(xs) - 0.3, max(xs) + 1.3)
    ax.set_ylim(max(ys) + 1.3, min(ys) - 0.55)  # rank 0 at the top left
    ax.set_aspect("equal")
    ax.set_anchor("W")
    ax.axis("off")


def _geometry(layout: Layout, width: float | None):
    """(inches per cell, titles on two lines?, figure width, height of one panel) for a grid."""
    xs, ys = zip(*_positions(layout).values())
    w, h = max(xs) + 1.6, max(ys) + 2.0
    cell = min(0.62, 11.5 / w, (width or 99) / w)
    narrow = width is not None and width < 7.5
    return cell, narrow, width or max(w * cell, 7.5), h * cell + 0.25 * narrow


def _draw(fig, layout: Layout, kind: str, axes: list[str], title: str | None, cell: float, narrow: bool) -> None:
    groups, pos = layout.rank_groups(), _positions(layout)
    for ax, axis in zip(fig.subplots(len(axes), 1, squeeze=False)[:, 0], axes):
        _panel(ax, layout, axis, groups[axis], pos, narrow, cell=cell)
    sizes = (f"TP{layout.tp} CP{layout.cp} DP{layout.dp} PP{layout.pp}" if kind == "dense"
             else f"ETP{layout.expert_tp} EP{layout.ep} EDP{layout.edp} PP{layout.pp}")
    default = f"{kind} grid, {layout.world_size} ranks on {layout.nodes} node(s): {sizes}"
    fig.suptitle(title or default, fontsize=10 if narrow else 11, x=0.01, ha="left")


def rank_grid(layout: Layout, kind: str = "dense", axes: list[str] | None = None, title: str | None = None,
              width: float | None = None):
    """One panel per axis; returns the matplotlib Figure. `width` in inches (default: from the
    number of ranks, at least 7.5 so the titles fit)."""
    axes = axes or AXES[kind]
    cell, narrow, width, panel = _geometry(layout, width)
    fig = plt.figure(figsize=(width, len(axes) * panel + 0.6), layout="constrained")
    _draw(fig, layout, kind, axes, title, cell, narrow)
    return fig


def rank_grids(layout: Layout, width: float = 5.5):
    """Dense and expert grids side by side in one figure (for small layouts; 8 ranks or fewer
    stay legible at the default width)."""
    cell, narrow, width, panel = _geometry(layout, width)
    fig = plt.figure(figsize=(2 * width, 4 * panel + 0.6), layout="constrained")
    for sub, kind in zip(fig.subfigures(1, 2), ("dense", "expert")):
        _draw(sub, layout, kind, AXES[kind], None, cell, narrow)
    return fig


def coordinates(layout: Layout) -> dict[int, dict[str, int]]:
    """{rank: {axis: index of the rank inside its group}}, e.g. rank 5 is tp-rank 1, ep-rank 1."""
    out = {r: {} for r in range(layout.world_size)}
    for axis, gs in layout.rank_groups().items():
        for g in gs:
            for i, r in enumerate(g):
                out[r][axis] = i
    return out


def fold(layout: Layout):
    """The expert grid folded onto the dense one: every rank shows its dense coordinates (black)
    above its expert coordinates (red); colour = EP group. Same ranks, two factorisations."""
    co = coordinates(layout)
    pos = _positions(layout, per_row=8)  # wider cells: three lines of text each
    ep_groups = layout.rank_groups()["ep"]
    colours = _colours(len(ep_groups))
    group_of = {r: i for i, g in enumerate(ep_groups) for r in g}
    xs, ys = zip(*pos.values())
    w, h = max(xs) + 1.4, max(ys) + 1.5
    scale = min(1.45, 12 / w)
    fig, ax = plt.subplots(figsize=(w * scale, h * scale + 0.5))
    for r, (x, y) in pos.items():
        ax.add_patch(FancyBboxPatch((x + 0.04, y + 0.04), 0.92, 0.92, boxstyle="round,pad=0,rounding_size=0.1",
                                    facecolor=colours[group_of[r]], alpha=0.3, edgecolor="#333333"))
        c = co[r]
        ax.text(x + 0.5, y + 0.2, f"rank {r}", ha="center", va="center", fontsize=10, fontweight="bold")
        ax.text(x + 0.5, y + 0.48, f"TP{c['tp']} CP{c['cp']}\nDP{c['dp']} PP{c['pp']}", ha="center",
                va="center", fontsize=8)
        ax.text(x + 0.5, y + 0.8, f"ETP{c['etp']} EP{c['ep']}\nEDP{c['edp']}", ha="center", va="center",
                fontsize=8, color="#b22200")
    per = layout.gpus_per_node or layout.world_size
    for node in range(layout.nodes if layout.gpus_per_node else 0):
        ranks = range(node * per, min((node + 1) * per, layout.world_size))
        nx, ny = min(pos[r][0] for r in ranks), min(pos[r][1] for r in ranks)
        ax.text(nx, ny - 0.05, f"node {node}", fontsize=8, color="#555555")
    ax.set_xlim(min(xs) - 0.1, max(xs) + 1.1)
    ax.set_ylim(max(ys) + 1.1, min(ys) - 0.25)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("each rank: its index in its dense groups (black) and in its expert groups (red);\n"
                 "colour = EP group", fontsize=10, loc="left")
    fig.tight_layout()
    return fig
