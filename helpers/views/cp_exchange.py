"""Context parallel, the idea, block by block: the sequence cut into 2·CP chunks (rank r holds
chunks r and 2·CP-1-r, read off Megatron's own split in context_parallel.positions), the causal
score blocks each rank's queries meet, and the K/V all-gather the kit's ContextParallelAttention
(helpers/runtime/layers/attention/context_parallel.py) does before attention. Notebook side only.

Block (q, k): queries of chunk q against keys of chunk k. Under the causal mask it is fully
visible when k < q, half visible (the lower triangle) when k == q, and fully masked when k > q.
The kit's attention multiplies the local queries by every gathered key and masks on global
positions; ring implementations (TE's p2p mode) skip the masked blocks. Either way the visible
blocks are the work, and the balancing makes them equal on every rank."""
from __future__ import annotations

from helpers.views.context_parallel import naive_positions, positions


def chunks_of(cp: int, balanced: bool = True) -> dict[int, list[int]]:
    """{cp rank: chunk indices it holds}, from Megatron's split of a sequence of 2·CP one-token
    chunks (or the contiguous split: rank r holds chunks 2r and 2r+1)."""
    return positions(2 * cp, cp) if balanced else naive_positions(2 * cp, cp)


def score_blocks(cp: int, balanced: bool = True) -> dict[int, dict[str, list[tuple[int, int]]]]:
    """{rank: {"full": [(q, k)], "diagonal": [...], "masked": [...]}} over every key chunk."""
    out = {}
    for rank, chunks in chunks_of(cp, balanced).items():
        kinds = {"full": [], "diagonal": [], "masked": []}
        for q in chunks:
            for k in range(2 * cp):
                kinds["full" if k < q else "diagonal" if k == q else "masked"].append((q, k))
        out[rank] = kinds
    return out


def visible_blocks(cp: int, balanced: bool = True) -> dict[int, float]:
    """{rank: visible score blocks}: a full block counts 1, a diagonal (half masked) block 1/2."""
    return {r: len(b["full"]) + len(b["diagonal"]) / 2 for r, b in score_blocks(cp, balanced).items()}


def gathered_order(cp: int) -> list[int]:
    """Chunk order in the all-gathered K/V buffer: rank 0's two chunks, then rank 1's, ... (the
    all-gather concatenates in rank order; the mask works on global positions, so nothing is
    reordered)."""
    return [c for r, chunks in chunks_of(cp).items() for c in chunks]


def plot(cp: int, kv_bytes: int | None = None, title: str | None = None):
    """Left: who holds which chunk. Middle: the 2CP x 2CP causal score matrix, each query row
    coloured by the rank that computes it (half blocks on the diagonal, white = masked), with
    each rank's visible-block count. Right: K/V before and after the all-gather."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.patches import Polygon, Rectangle

    colours = [colormaps["tab10"](r % 10) for r in range(cp)]
    owner = {c: r for r, chunks in chunks_of(cp).items() for c in chunks}
    n = 2 * cp
    fig, (seq, scores, gather) = plt.subplots(1, 3, figsize=(12, 4.2), gridspec_kw={"width_ratios": [0.55, 1.5, 1.6]})

    for c in range(n):  # the sequence, top to bottom, so it lines up with the score rows
        seq.add_patch(Rectangle((0, c), 1, 0.92, color=colours[owner[c]]))
        seq.text(0.5, c + 0.46, f"chunk {c}\nrank {owner[c]}", ha="center", va="center", fontsize=7, color="white")
    seq.set_xlim(0, 1)
    seq.set_ylim(n, 0)
    seq.axis("off")
    seq.set_title(f"sequence in {n} chunks", fontsize=9)

    visible = visible_blocks(cp)
    for q in range(n):
        face = colours[owner[q]]
        for k in range(n):
            scores.add_patch(Rectangle((k, q), 1, 1, fill=False, edgecolor="#bbbbbb", linewidth=0.5))
            if k < q:
                scores.add_patch(Rectangle((k, q), 1, 1, color=face, alpha=0.85))
            elif k == q:  # causal inside the block: keys up to the query's own position
                scores.add_patch(Polygon([(k, q), (k, q + 1), (k + 1, q + 1)], color=face, alpha=0.85))
    scores.set_xlim(0, n)
    scores.set_ylim(n, 0)
    scores.set_aspect("equal")
    scores.set_xticks([k + 0.5 for k in range(n)], [str(k) for k in range(n)], fontsize=7)
    scores.set_yticks([q + 0.5 for q in range(n)], [str(q) for q in range(n)], fontsize=7)
    scores.set_xlabel("key chunk")
    scores.set_ylabel("query chunk")
    counts = ", ".join(f"r{r}: {v:g}" for r, v in visible.items())
    scores.set_title(f"causal scores, rows coloured by the rank computing them\nvisible blocks (diagonal = 1/2): {counts}", fontsize=9)

    order = gathered_order(cp)
    rows = list(range(cp))
    width = 1.0
    for r in rows:  # left: each rank's own two chunks of K/V; right: all of them, in rank order
        for j, c in enumerate(chunks_of(cp)[r]):
            gather.add_patch(Rectangle((j * width, r), 0.92 * width, 0.8, color=colours[r]))
            gather.text((j + 0.46) * width, r + 0.4, str(c), ha="center", va="center", fontsize=7, color="white")
        for j, c in enumerate(order):
            x = 3 + j * width
            gather.add_patch(Rectangle((x, r), 0.92 * width, 0.8, color=colours[owner[c]]))
            gather.text(x + 0.46 * width, r + 0.4, str(c), ha="center", va="center", fontsize=7, color="white")
        gather.text(-0.15, r + 0.4, f"rank {r}", ha="right", va="center", fontsize=8)
    gather.annotate("", xy=(2.85, cp / 2), xytext=(2.05, cp / 2), arrowprops={"arrowstyle": "->", "lw": 1.5})
    gather.text(1, -0.25, "own K, V", ha="center", fontsize=8)
    gather.text(3 + n / 2, -0.25, "after all-gather (rank order)", ha="center", fontsize=8)
    gather.set_xlim(-1.3, 3 + n + 0.2)
    gather.set_ylim(cp + 0.2, -0.7)
    gather.axis("off")
    note = "each rank sends its K and V chunks to every other rank"
    if kv_bytes is not None:
        per = round(kv_bytes * (cp - 1) / cp)
        note = f"per layer: gathered K = gathered V = {kv_bytes:,} B;\neach rank sends {per:,} B of each (ring: (n-1)/n)"
    gather.text(3 + n / 2 - 1.5, cp + 0.05, note, ha="center", va="top", fontsize=8)
    gather.set_title("K/V all-gather (backward: reduce-scatter of their gradients)", fontsize=9)
    fig.suptitle(title or f"CP={cp}: rank r holds chunks r and {n - 1}-r, so every rank meets the same causal work",
                 fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig
