"""MoE token dispatch across EP ranks, the idea: each rank's router picks top-k experts per
token, the experts live on EP ranks (rank j holds experts j·E/EP ... (j+1)·E/EP - 1), so the
all-to-all dispatch sends every token copy to the rank of its expert, and the combine sends the
expert outputs back along the same counts (the transposed matrix). Notebook side only.

The routing is a small seeded random one (`random_routing`) or one passed in: {source rank:
[the k experts of each of its tokens]}. `send_matrix` needs only per-expert counts per source
rank, so it also takes what a run's router log holds (moe.rank_tokens of each EP peer)."""
from __future__ import annotations

import random


def random_routing(ep: int, tokens: int, num_experts: int, topk: int, seed: int = 0) -> dict[int, list[tuple[int, ...]]]:
    """{source rank: per token, the k distinct experts its router chose} (uniform, seeded)."""
    rng = random.Random(seed)
    return {r: [tuple(sorted(rng.sample(range(num_experts), topk))) for _ in range(tokens)] for r in range(ep)}


def expert_rank(expert: int, num_experts: int, ep: int) -> int:
    """The EP rank holding `expert`: Megatron deals experts out in contiguous blocks of E/EP."""
    return expert // (num_experts // ep)


def per_expert(routing: dict[int, list[tuple[int, ...]]], num_experts: int) -> dict[int, list[int]]:
    """{source rank: token copies it sends to each expert}."""
    out = {}
    for r, tokens in routing.items():
        counts = [0] * num_experts
        for chosen in tokens:
            for e in chosen:
                counts[e] += 1
        out[r] = counts
    return out


def send_matrix(counts: dict[int, list[int]], ep: int) -> list[list[int]]:
    """[source][destination] token copies the dispatch all-to-all moves (the diagonal stays on
    its rank: those tokens' experts are local)."""
    num_experts = len(next(iter(counts.values())))
    out = [[0] * ep for _ in range(ep)]
    for src, row in counts.items():
        for e, n in enumerate(row):
            out[src][expert_rank(e, num_experts, ep)] += n
    return out


def _matrix(ax, matrix: list[list[int]], rows: str, cols: str, title: str, colours) -> None:
    n = len(matrix)
    ax.imshow(matrix, cmap="Greys", vmin=0, vmax=max(max(r) for r in matrix) * 1.6)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, str(matrix[i][j]), ha="center", va="center", fontsize=9)
        ax.text(n - 0.35, i, f"Σ {sum(matrix[i])}", ha="left", va="center", fontsize=8)
        ax.text(i, n - 0.35, f"Σ {sum(row[i] for row in matrix)}", ha="center", va="top", fontsize=8)
    ax.xaxis.tick_top()  # column names above, column sums below
    ax.set_xticks(range(n), [f"{cols} {j}" for j in range(n)], fontsize=8)
    ax.set_yticks(range(n), [f"{rows} {i}" for i in range(n)], fontsize=8)
    for tick, c in zip(ax.get_yticklabels(), colours):
        tick.set_color(c)
    ax.set_xlim(-0.5, n + 0.5)
    ax.set_ylim(n + 0.3, -0.5)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=9, pad=18)


def plot(routing: dict[int, list[tuple[int, ...]]], num_experts: int, title: str | None = None):
    """Left: every token's k experts, coloured by the EP rank that holds the expert, one block of
    tokens per source rank. Middle: the dispatch send matrix (row sums: tokens·k each rank sends;
    column sums: token copies each rank's experts receive). Right: the combine, transposed."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.patches import Patch, Rectangle

    ep = len(routing)
    topk = len(next(iter(routing.values()))[0])
    tokens = len(next(iter(routing.values())))
    colours = [colormaps["tab10"](r % 10) for r in range(ep)]
    dispatch = send_matrix(per_expert(routing, num_experts), ep)
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(12, 3.9), gridspec_kw={"width_ratios": [1.6, 1, 1]})
    gap = topk + 0.8
    for src, toks in routing.items():
        for t, chosen in enumerate(toks):
            for j, e in enumerate(chosen):
                x = src * gap + j
                left.add_patch(Rectangle((x, t), 0.92, 0.85, color=colours[expert_rank(e, num_experts, ep)]))
                left.text(x + 0.46, t + 0.42, str(e), ha="center", va="center", fontsize=7, color="white")
        left.text(src * gap + topk / 2, -0.4, f"rank {src}", ha="center", va="bottom", fontsize=8,
                  color=colours[src], fontweight="bold")
    left.set_xlim(-0.2, ep * gap)
    left.set_ylim(tokens + 0.2, -1.4)
    left.set_yticks([t + 0.42 for t in range(tokens)], [f"t{t}" for t in range(tokens)], fontsize=7)
    left.set_xticks([])
    for spine in left.spines.values():
        spine.set_visible(False)
    per = num_experts // ep
    left.set_title(f"router: top-{topk} of {num_experts} experts per token\n(number = expert, colour = its EP rank)",
                   fontsize=9)
    left.legend(handles=[Patch(color=colours[r], label=f"EP rank {r}: experts {r * per}-{(r + 1) * per - 1}")
                         for r in range(ep)], loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
                fontsize=7, frameon=False)
    _matrix(mid, dispatch, "from", "to", "dispatch all-to-all: token copies\nrow Σ = tokens × k, column Σ = received", colours)
    combine = [list(row) for row in zip(*dispatch)]
    _matrix(right, combine, "from", "to", "combine all-to-all: outputs go back\n(the dispatch matrix transposed)",
            colours)
    fig.suptitle(title or f"MoE dispatch over EP={ep}: {tokens} tokens per rank, top-{topk}, {num_experts} experts",
                 fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig
